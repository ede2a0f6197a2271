"""Test program: returns thunks that the program already consumed in some way.

Written in upstream mellea's style (a sync ``serve()`` that hands the request's
``model_options`` to ``session.instruct(..., strategy=RejectionSamplingStrategy(...))``),
on a scripted backend so the served text is known exactly. The first word of the
last message picks what the program does with its thunk before returning it:

- ``sampled``: rejection sampling; the first attempt fails its requirement, the
  second passes (the accepted text is ``Hi Bob! attempt 1 ...``).
- ``awaited``: a single ``instruct`` (computed before it is returned).
- ``streamed``: the program streams the thunk to the end itself with ``astream()``.
- ``partial``: the program reads the first piece with ``astream()`` and returns the
  thunk still streaming.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk, Requirement, SamplingResult
from mellea.core._sync import run_sync
from mellea.serve import ChatMessage
from mellea.stdlib.requirements import simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy
from mellea.stdlib.session import MelleaSession

REPLY = "attempt {n} says hello in several small words"


class ScriptedBackend(Backend):
    """Streams ``Hi Bob! attempt N ...`` word by word; attempt 0 lacks the greeting."""

    model_id = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        n = self.calls
        self.calls += 1
        text = REPLY.format(n=n) if n == 0 else "Hi Bob! " + REPLY.format(n=n)
        return ModelOutputThunk.from_stream(_words(text))


async def _words(text: str) -> AsyncIterator[GenerationChunk]:
    words = text.split(" ")
    for i, word in enumerate(words):
        await asyncio.sleep(0.005)
        yield GenerationChunk(text=word if i == 0 else " " + word)
    usage = {"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)}
    yield GenerationChunk(finish_reason="stop", usage=usage)


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict | None = None,
) -> ModelOutputThunk | SamplingResult:
    """Run the instruction as the first word says, then return the (consumed) result."""
    message = input[-1].get_text_content()
    mode = message.split(" ")[0]
    session = MelleaSession(ScriptedBackend())
    if mode == "sampled":
        reqs = [
            Requirement(
                "Add a 'Hi Bob!' at the top of the output",
                validation_fn=simple_validate(lambda text: text.startswith("Hi Bob!")),
            )
        ]
        return session.instruct(
            description=message,
            requirements=reqs,
            strategy=RejectionSamplingStrategy(loop_budget=3),
            model_options=model_options,
        )
    if mode == "awaited":
        return session.instruct(description=message, strategy=None, model_options=model_options)
    thunk = run_sync(
        session.ainstruct(message, strategy=None, model_options=model_options, await_result=False)
    )
    if mode == "streamed":
        while not thunk.is_computed():
            run_sync(thunk.astream())
    elif mode == "partial":
        run_sync(thunk.astream())
    return thunk
