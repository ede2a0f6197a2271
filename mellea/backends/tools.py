"""Tools a model can call: ``MelleaTool`` and the ``@tool`` decorator, as upstream names them."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from mellea.core.base import AbstractMelleaTool

P = ParamSpec("P")
R = TypeVar("R")


class MelleaTool(AbstractMelleaTool[P, R], Generic[P, R]):
    """A callable with a name and an OpenAI-style JSON description.

    Put it in ``model_options[ModelOption.TOOLS]``; a call the model makes comes back
    as a :class:`~mellea.core.ModelToolCall` whose ``call_func()`` runs the tool.
    """

    def __init__(self, name: str, tool_call: Callable[P, R], as_json_tool: dict[str, Any]) -> None:
        self.name = name
        self._call_tool = tool_call
        self._as_json_tool = as_json_tool

    def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the tool."""
        return self._call_tool(*args, **kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(*args, **kwargs)

    @property
    def as_json_tool(self) -> dict[str, Any]:
        """The tool as ``{"type": "function", "function": {...}}`` (a copy)."""
        return dict(self._as_json_tool)

    @classmethod
    def from_callable(cls, func: Callable[..., Any], name: str | None = None) -> MelleaTool:
        """A tool from a function, described by its type hints and docstring.

        An ``async def`` tool is run to completion when called.
        """
        from mellea.backends.base import function_tool

        tool_name = name or func.__name__
        schema = function_tool(func)
        schema["function"]["name"] = tool_name
        call: Callable[..., Any] = func
        if inspect.iscoroutinefunction(func):
            call = _sync_caller(func)
        return cls(tool_name, call, schema)

    @classmethod
    def from_langchain(cls, tool: Any) -> MelleaTool:
        """Not provided here: LangChain is not a dependency of this mellea."""
        raise NotImplementedError("MelleaTool.from_langchain is not provided by this mellea")

    @classmethod
    def from_smolagents(cls, tool: Any) -> MelleaTool:
        """Not provided here: smolagents is not a dependency of this mellea."""
        raise NotImplementedError("MelleaTool.from_smolagents is not provided by this mellea")

    def __repr__(self) -> str:
        return f"MelleaTool({self.name!r})"


def _sync_caller(func: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(func(*args, **kwargs))
        from mellea.core._sync import run_sync

        return run_sync(func(*args, **kwargs))

    return call


@overload
def tool(func: Callable[P, R], *, name: str | None = None) -> MelleaTool[P, R]: ...
@overload
def tool(*, name: str | None = None) -> Callable[[Callable[P, R]], MelleaTool[P, R]]: ...


def tool(func: Callable[..., Any] | None = None, name: str | None = None) -> Any:
    """Make a function a :class:`MelleaTool` (``@tool`` or ``@tool(name="...")``)."""

    def decorate(f: Callable[..., Any]) -> MelleaTool:
        return MelleaTool.from_callable(f, name=name)

    return decorate if func is None else decorate(func)


__all__ = ["MelleaTool", "tool"]
