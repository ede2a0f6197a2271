"""The interface every backend implements (upstream's module path; ``mellea.backends.base``
re-exports it beside the helpers backends share).

A backend is written one of two ways, and either serves every caller:

- ours: ``async generate(messages, *, model_options, format, tool_calls)`` takes the
  chat messages a session rendered and returns a (usually uncomputed) thunk;
- upstream's: ``async _generate_from_context(action, ctx, *, format, model_options,
  tool_calls)`` returns ``(thunk, new_context)``, and ``_generate_from_raw(actions,
  ctx, ...)`` returns ``(thunks, usage)``.

A session calls ``generate``; for an upstream-style backend it hands
``_generate_from_context`` the rendered conversation as a ``ChatContext`` of
``Message`` s with the newest message as the action (system prompt, history and any
retry feedback included). Upstream-style callers use ``generate_from_context`` /
``generate_from_raw``, which a backend written our way answers by rendering the
action after the context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from mellea.core.base import BaseModelSubclass, CBlock, Component, Context
from mellea.core.thunk import ModelOutputThunk

__all__ = ["Backend", "BaseModelSubclass", "generate_walk"]


def _overrides(cls: type, name: str) -> bool:
    """Whether ``cls`` (or a class between it and :class:`Backend`) defines ``name``."""
    return getattr(cls, name, None) is not getattr(Backend, name, None)


class Backend:
    """Turns a conversation into a :class:`ModelOutputThunk` (see the module doc)."""

    model_id: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Backend:
        """Refuse a backend that implements neither way of generating."""
        del args, kwargs
        if not _overrides(cls, "generate") and not _overrides(cls, "_generate_from_context"):
            raise TypeError(
                f"Can't instantiate {cls.__name__}: a Backend implements "
                "generate(messages, ...) or upstream's _generate_from_context(action, ctx, ...)"
            )
        return super().__new__(cls)

    def __init__(self, model_options: dict[str, Any] | None = None) -> None:
        self.model_options = dict(model_options or {})

    @property
    def model_options(self) -> dict[str, Any]:
        """The backend's default options (empty for a subclass that skipped ``__init__``)."""
        return self.__dict__.setdefault("_model_options", {})

    @model_options.setter
    def model_options(self, value: dict[str, Any]) -> None:
        self.__dict__["_model_options"] = value

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Start generating a reply to ``messages`` and return its uncomputed thunk.

        Errors the client caused (e.g. a prompt too long) are raised here, before
        any output, as :class:`mellea.core.RequestError`. An upstream-style backend
        inherits this method, which calls its ``_generate_from_context``.
        """
        from mellea.stdlib.backend_bridge import context_call

        action, ctx = context_call(messages)
        thunk, _ = await self._generate_from_context(
            action, ctx, format=format, model_options=model_options, tool_calls=tool_calls
        )
        return thunk

    async def generate_from_context(
        self,
        action: Component[Any] | CBlock | ModelOutputThunk,
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk, Context]:
        """Upstream's entry point: generate ``action`` after ``ctx``; ``(thunk, new_context)``.

        The new context is ``ctx`` with ``action`` and the thunk added; ``ctx`` itself
        is not changed. Plugins' generation hooks fire on the session's calls, not here.
        """
        if _overrides(type(self), "_generate_from_context"):
            return await self._generate_from_context(
                action, ctx, format=format, model_options=model_options, tool_calls=tool_calls
            )
        from mellea.stdlib.backend_bridge import messages_for

        await self.do_generate_walk(action)  # an action may hold outputs still to come
        thunk = await self.generate(
            messages_for(action, ctx),
            model_options=model_options,
            format=format,
            tool_calls=tool_calls,
        )
        return thunk, ctx.add(action).add(thunk)

    async def _generate_from_context(
        self,
        action: Component[Any] | CBlock | ModelOutputThunk,
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk, Context]:
        """What an upstream-style backend overrides (see :meth:`generate_from_context`)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement _generate_from_context"
        )

    async def generate_from_raw(
        self,
        actions: Sequence[Component[Any] | CBlock],
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> list[ModelOutputThunk]:
        """Upstream's context-free batch: one computed thunk per action, in order."""
        thunks, _ = await self._generate_from_raw(
            actions, ctx, format=format, model_options=model_options, tool_calls=tool_calls
        )
        return thunks

    async def _generate_from_raw(
        self,
        actions: Sequence[Component[Any] | CBlock],
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[list[ModelOutputThunk], dict[str, Any] | None]:
        """``(thunks, usage)``: each action sent alone, all at once, through :meth:`generate`.

        An upstream-style backend overrides this; one written our way inherits it.
        ``usage`` sums the thunks' token counts when every thunk reports them.
        """
        del ctx
        if not _overrides(type(self), "generate"):
            raise NotImplementedError(
                f"{type(self).__name__} does not implement _generate_from_raw"
            )
        from mellea.stdlib.backend_bridge import messages_for

        await self.do_generate_walks(list(actions))

        async def one(action: Component[Any] | CBlock) -> ModelOutputThunk:
            thunk = await self.generate(
                messages_for(action, None),
                model_options=model_options,
                format=format,
                tool_calls=tool_calls,
            )
            await thunk.avalue()
            return thunk

        thunks = list(await asyncio.gather(*(one(a) for a in actions)))
        return thunks, _summed_usage(thunks)

    async def do_generate_walk(self, action: Any) -> None:
        """Await every uncomputed thunk reachable from ``action`` (see :func:`generate_walk`)."""
        await asyncio.gather(*(t.avalue() for t in generate_walk(action)))

    async def do_generate_walks(self, actions: list[Any]) -> None:
        """:meth:`do_generate_walk` for each of ``actions``, all at once."""
        await asyncio.gather(*(t.avalue() for a in actions for t in generate_walk(a)))


def generate_walk(c: Any) -> list[ModelOutputThunk]:
    """The uncomputed thunks among ``c`` and its parts, depth first (upstream's helper).

    A component's parts are what its rendering reads, so a lazily composed action
    (a component holding thunks still streaming) is rendered once they are done.
    """
    if isinstance(c, ModelOutputThunk):
        return [] if c.is_computed() else [c]
    if isinstance(c, CBlock):
        return []
    if isinstance(c, Component):
        return [t for part in c.parts() for t in generate_walk(part)]
    return []  # images, audio and documents hold no model output


def _summed_usage(thunks: list[ModelOutputThunk]) -> dict[str, Any] | None:
    usages = [t.usage for t in thunks]
    if not usages or any(u is None for u in usages):
        return None
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {k: sum(int(u.get(k) or 0) for u in usages if u) for k in keys}
