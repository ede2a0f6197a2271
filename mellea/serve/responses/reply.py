"""The ``/v1/responses`` reply the request runner sends: one :class:`ResponseRun`, drained
for a whole reply or sent as named SSE events."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from mellea.core.parsers import ReplyParser
from mellea.core.thunk import ModelOutputThunk
from mellea.serve.errors import as_openai_error
from mellea.serve.frames import Frames, named_events
from mellea.serve.request_runner import Choices, Reply, ThunkSource
from mellea.serve.responses.arguments import naming_input
from mellea.serve.responses.objects import ResponseObject
from mellea.serve.responses.request import ResponsesRequest
from mellea.serve.responses.run import CancelSignal, ResponseRun, ResponseSink


class ResponsesReply(Reply[dict[str, Any]]):
    """One response: its events from ``response.created`` to the terminal one; a whole
    reply is the final response object."""

    def __init__(
        self,
        body: ResponsesRequest,
        response: ResponseObject,
        sink: ResponseSink,
        parser: ReplyParser | None,
        cancel: CancelSignal | None,
    ) -> None:
        """The reply creating ``response`` (kept through ``sink``; ``cancel`` stops it)."""
        self.stream = bool(body.stream)
        self.live = bool(body.stream and (body.stream_options or {}).get("include_program_events"))
        self.logprobs = body.wants_logprobs
        self.response = response
        self.sink = sink
        self.parser = parser
        self.cancel = cancel

    def guard(self, call: Awaitable[ModelOutputThunk]) -> Awaitable[ModelOutputThunk]:
        """A client error naming the program's chat ``messages`` names ``input`` instead."""
        return naming_input(call)

    def _run(self, choices: Choices, sources: list[ThunkSource] | None = None) -> ResponseRun:
        [reader] = choices.readers(sources, [self.parser], self.cancel)
        return ResponseRun(reader, self.response, self.sink, self.logprobs)

    async def whole(self, choices: Choices) -> dict[str, Any]:
        """Run the response to its end, from the events a stream sends; a failed one
        raises its error."""
        run = self._run(choices)
        async for _ in run.events():
            pass
        if run.failure is not None:
            raise as_openai_error(run.failure)
        assert run.final is not None
        return run.final

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The response's events, each with its ``event:`` name."""
        return named_events(self._run(choices, sources).events())
