"""A tool call the model asked for."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelToolCall:
    """A call of tool ``name`` with ``args``; ``func`` is the Python callable when known.

    ``partial_arguments`` holds the arguments' JSON text as far as the model wrote it
    when generation stopped (``max_tokens``) before the call was complete; ``args`` is
    then empty.
    """

    name: str
    func: Callable[..., Any] | None = None
    args: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    partial_arguments: str | None = None

    def call_func(self) -> Any:
        """Run the tool with the model's arguments."""
        if self.func is None:
            raise RuntimeError(f"tool {self.name!r} has no Python function attached")
        return self.func(**self.args)

    @property
    def tool_call_id(self) -> str:
        """Upstream's name for :attr:`id`."""
        return self.id

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON string the OpenAI wire format carries (for a call cut
        short, the text the model wrote)."""
        if self.partial_arguments is not None:
            return self.partial_arguments
        return json.dumps(self.args, ensure_ascii=False)


class ToolCalls(list):
    """The tool calls of one reply, in order (as upstream's list), also readable by name.

    Iterating gives :class:`ModelToolCall` s; ``calls["get_weather"]``, ``.get(name)``,
    ``name in calls``, ``.keys()``, ``.values()`` and ``.items()`` read it like the
    name-keyed dict older upstream versions (and earlier versions here) returned.
    """

    def __init__(self, calls: Any = ()) -> None:
        super().__init__(calls.values() if isinstance(calls, dict) else calls)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            for call in self:
                if call.name == key or call.id == key:
                    return call
            raise KeyError(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            return any(call.name == key or call.id == key for call in self)
        return super().__contains__(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The first call of tool ``key`` (or with id ``key``), else ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        """Tool names (a repeated tool's later calls by their ids), as the old dict had."""
        seen: list[str] = []
        for call in self:
            seen.append(call.id if call.name in seen else call.name)
        return seen

    def values(self) -> list[ModelToolCall]:
        """The calls, in order."""
        return list(self)

    def items(self) -> list[tuple[str, ModelToolCall]]:
        """``(key, call)`` pairs, keys as :meth:`keys` gives them."""
        return list(zip(self.keys(), self, strict=True))
