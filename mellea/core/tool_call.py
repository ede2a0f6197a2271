"""A tool call the model asked for."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelToolCall:
    """A call of tool ``name`` with ``args``; ``func`` is the Python callable when known."""

    name: str
    func: Callable[..., Any] | None = None
    args: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

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
        """The arguments as the JSON string the OpenAI wire format carries."""
        return json.dumps(self.args, ensure_ascii=False)
