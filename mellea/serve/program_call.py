"""One call of the served program: awaited, its result made a thunk, its failure an
OpenAI error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace, recording
from mellea.serve.errors import as_openai_error
from mellea.stdlib.streaming import Streamer


class ProgramOutputError(TypeError):
    """``serve()`` returned something that is not a thunk, a sampling result, a validated
    stream or a string."""


def as_thunk(result: Any) -> ModelOutputThunk:
    """The thunk to serve for whatever ``serve()`` returned.

    A validated stream (:class:`~mellea.stdlib.streaming.Streamer`) is served as the
    chunks that pass its checks, read as the client reads.
    """
    if isinstance(result, SamplingResult):
        return result.result
    if isinstance(result, ModelOutputThunk):
        return result
    if isinstance(result, Streamer):
        return result.as_thunk()
    if isinstance(result, str):
        return ModelOutputThunk(value=result)
    raise ProgramOutputError(
        f"serve() returned {type(result).__name__}; "
        "expected a ModelOutputThunk, a SamplingResult, a Streamer or a str"
    )


async def run_program(call: Awaitable[Any], trace: ProgramTrace | None = None) -> ModelOutputThunk:
    """Await a program call and normalise what it returns; failures become OpenAI errors.

    With a ``trace``, the program reports into it (its model calls, attempts, verdicts).
    """
    try:
        with recording(trace):
            try:
                return as_thunk(await call)
            finally:
                if trace is not None:
                    trace.program_returned()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise as_openai_error(exc) from None
