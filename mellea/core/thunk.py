"""ModelOutputThunk: a model output that may still be arriving."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mellea.core.logprobs import TokenLogprob
from mellea.core.tool_call import ModelToolCall, ToolCalls


@dataclass
class GenerationChunk:
    """One piece of a generation as a backend streams it."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    tool_calls: list[ModelToolCall] | None = None
    logprobs: list[TokenLogprob] | None = None  # one per token of ``text``, when asked for
    prompt_logprobs: list[TokenLogprob] | None = None  # the prompt's tokens, when asked for


class GenerationInfo:
    """A thunk's generation metadata (upstream's ``thunk.generation``)."""

    def __init__(self, thunk: ModelOutputThunk) -> None:
        self._thunk = thunk
        self.model: str | None = None
        self.provider: str | None = None

    @property
    def usage(self) -> dict[str, Any] | None:
        """Token counts, as :attr:`ModelOutputThunk.usage`."""
        return self._thunk.usage

    @usage.setter
    def usage(self, value: dict[str, Any] | None) -> None:
        self._thunk.usage = value


DoneHook = Callable[["ModelOutputThunk"], Awaitable[None] | None]


class ModelOutputThunk:
    """The output of a generation: computed already, or streaming in from a backend.

    ``ModelOutputThunk(value="text")`` is an already computed result. Backends
    build uncomputed ones with :meth:`from_stream`; ``await astream()`` then returns
    the text that arrived since the previous call, and ``await avalue()`` the whole
    text once generation has finished.
    """

    def __init__(
        self,
        value: str | None = None,
        meta: dict[str, Any] | None = None,
        parsed_repr: Any = None,
        tool_calls: dict[str, ModelToolCall] | list[ModelToolCall] | None = None,
    ) -> None:
        self._parts: list[str] = [] if value is None else [value]
        self._value = value
        self._computed = value is not None
        self._handed_out = 0  # characters already returned by astream()
        self._source: AsyncIterator[GenerationChunk] | None = None
        self._done_hooks: list[DoneHook] = []
        self.meta: dict[str, Any] = meta or {}
        self.parsed_repr: Any = parsed_repr if parsed_repr is not None else value
        # A list as upstream's, also readable by tool name (see ToolCalls).
        self.tool_calls: ToolCalls | None = ToolCalls(tool_calls) if tool_calls else None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = "stop" if self._computed else None
        # Per-token log-probabilities, when the request asked for them and the backend
        # can report them; grows as the generation streams in.
        self.logprobs: list[TokenLogprob] | None = None
        # The prompt's own tokens and their log-probabilities (the first has none), when
        # the request asked for them (model option ``prompt_logprobs``) and the backend
        # can score a prompt; set once, with the first chunk.
        self.prompt_logprobs: list[TokenLogprob] | None = None
        # Upstream's reasoning trace; reasoning is split off by the server here, so the
        # library leaves it None.
        self.thinking: str | None = None

    @classmethod
    def from_stream(
        cls, source: AsyncIterator[GenerationChunk], on_done: DoneHook | None = None
    ) -> ModelOutputThunk:
        """An uncomputed thunk fed by ``source``; ``on_done`` runs once it is complete."""
        thunk = cls()
        thunk._source = source
        if on_done is not None:
            thunk._done_hooks.append(on_done)
        return thunk

    def add_done_hook(self, hook: DoneHook) -> None:
        """Run ``hook(self)`` when the generation completes (never, if it already has)."""
        self._done_hooks.append(hook)

    def wrap_source(
        self, wrap: Callable[[AsyncIterator[GenerationChunk]], AsyncIterator[GenerationChunk]]
    ) -> None:
        """Put ``wrap`` around the chunk stream still to come (to watch it, or its errors)."""
        if self._source is not None and not self._computed:
            self._source = wrap(self._source)

    # -- state ---------------------------------------------------------------

    @property
    def value(self) -> str | None:
        """The full text once computed, else ``None``."""
        return self._value if self._computed else None

    @value.setter
    def value(self, text: str) -> None:
        self._parts = [text]
        self._value = text
        self._computed = True
        self.parsed_repr = text

    @property
    def generation(self) -> GenerationInfo:
        """Upstream's generation metadata: ``usage`` (the same dict as :attr:`usage`),
        ``model`` and ``provider`` (``None`` unless a backend sets them)."""
        info = self.__dict__.get("_generation")
        if info is None:
            info = self.__dict__["_generation"] = GenerationInfo(self)
        return info

    def is_computed(self) -> bool:
        """Whether generation has finished and ``value`` holds the whole text."""
        return self._computed

    def text_so_far(self) -> str:
        """All the text that has arrived, whoever consumed it (``value`` once computed)."""
        return "".join(self._parts)

    # -- consuming -----------------------------------------------------------

    async def astream(self) -> str:
        """Wait for more output and return the text that arrived since the last call.

        Returns ``""`` once everything has been handed out; after that the thunk is
        computed.
        """
        if not self._computed and self._source is not None:
            try:
                chunk = await anext(self._source)
            except StopAsyncIteration:
                await self._finish()
            else:
                self._absorb(chunk)
        elif not self._computed:
            raise RuntimeError("this ModelOutputThunk has neither a value nor a source")
        text = "".join(self._parts)
        new = text[self._handed_out :]
        self._handed_out = len(text)
        return new

    async def avalue(self) -> str:
        """Wait for the generation to finish and return the whole text."""
        while not self._computed:
            await self.astream()
        assert self._value is not None
        return self._value

    async def aclose(self) -> None:
        """Stop the generation early (e.g. the client went away); frees backend work."""
        source, self._source = self._source, None
        if source is not None and not self._computed:
            closer = getattr(source, "aclose", None)
            if closer is not None:
                await closer()
            self._value = "".join(self._parts)
            self._computed = True
            self.finish_reason = self.finish_reason or "abort"

    # -- internals -----------------------------------------------------------

    def _absorb(self, chunk: GenerationChunk) -> None:
        if chunk.text:
            self._parts.append(chunk.text)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.prompt_logprobs is not None:
            self.prompt_logprobs = chunk.prompt_logprobs
        if chunk.logprobs is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs.extend(chunk.logprobs)
        if chunk.tool_calls:
            self.tool_calls = ToolCalls([*(self.tool_calls or []), *chunk.tool_calls])

    async def _finish(self) -> None:
        self._source = None
        self._value = "".join(self._parts)
        self._computed = True
        self.parsed_repr = self._value
        self.finish_reason = self.finish_reason or "stop"
        for hook in self._done_hooks:
            result = hook(self)
            if inspect.isawaitable(result):
                await result

    def __aiter__(self) -> ModelOutputThunk:
        """``async for delta in thunk``: the text as it arrives (one consumer only)."""
        return self

    async def __anext__(self) -> str:
        while True:
            delta = await self.astream()
            if delta:
                return delta
            if self._computed:
                raise StopAsyncIteration

    async def __aenter__(self) -> ModelOutputThunk:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __class_getitem__(cls, item: Any) -> type[ModelOutputThunk]:
        # Upstream's thunk is generic (``ModelOutputThunk[str]``); accept the annotation.
        return cls

    def __str__(self) -> str:
        return self._value if self._computed and self._value is not None else ""

    def __repr__(self) -> str:
        state = repr(self._value) if self._computed else "<not computed>"
        return f"{type(self).__name__}({state})"


class ComputedModelOutputThunk(ModelOutputThunk):
    """A thunk that is known to be computed: its ``value`` is always a ``str``."""

    def __init__(
        self,
        value: str | ModelOutputThunk,
        meta: dict[str, Any] | None = None,
        parsed_repr: Any = None,
        tool_calls: dict[str, ModelToolCall] | None = None,
    ) -> None:
        if isinstance(value, ModelOutputThunk):
            source = value
            if not source.is_computed():
                raise ValueError("ComputedModelOutputThunk needs a computed thunk")
            super().__init__(source.value or "", source.meta, source.parsed_repr, source.tool_calls)
            self.usage = source.usage
            self.finish_reason = source.finish_reason
            self.logprobs = source.logprobs
            self.prompt_logprobs = source.prompt_logprobs
            return
        super().__init__(value, meta, parsed_repr, tool_calls)
