"""Test program: rejection sampling whose first attempt fails, on a scripted backend.

Upstream's style (a sync ``serve()`` returning ``session.instruct(...)``), so the served
text and token counts are known exactly. The first word of the last message picks:

- ``sampled``: two requirements, one checked by a function (the text must start with
  ``Hi Bob!``; attempt 0 does not), one judged by the model (the scripted judge says
  yes). Attempt 1 is accepted.
- ``failing``: a requirement no attempt meets; both attempts fail, attempt 0 is served.
- ``plain``: one generation, no requirements.

Every generation streams word by word and reports ``prompt_tokens=5`` and one
completion token per word; a judge's answer ``yes`` reports ``prompt_tokens=7`` and
``completion_tokens=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk, Requirement, SamplingResult
from mellea.serve import ChatMessage
from mellea.stdlib.requirements import simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy
from mellea.stdlib.session import MelleaSession

REPLY = "attempt {n} says hello in several small words"
GREETING = "Hi Bob!"
JUDGE_PROMPT_TOKENS = 7
PROMPT_TOKENS = 5


class ScriptedBackend(Backend):
    """Attempt N streams ``REPLY``; from attempt 1 on it starts with the greeting."""

    model_id = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        if messages[-1]["content"].startswith("Here is a text"):
            return ModelOutputThunk.from_stream(_words("yes", JUDGE_PROMPT_TOKENS))
        n = self.attempts
        self.attempts += 1
        text = REPLY.format(n=n) if n == 0 else f"{GREETING} " + REPLY.format(n=n)
        return ModelOutputThunk.from_stream(_words(text, PROMPT_TOKENS))


async def _words(text: str, prompt_tokens: int) -> AsyncIterator[GenerationChunk]:
    words = text.split(" ")
    for i, word in enumerate(words):
        await asyncio.sleep(0.01)
        yield GenerationChunk(text=word if i == 0 else " " + word)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(words),
        "total_tokens": prompt_tokens + len(words),
    }
    yield GenerationChunk(finish_reason="stop", usage=usage)


def serve(
    input: list[ChatMessage], model_options: dict | None = None
) -> ModelOutputThunk | SamplingResult:
    """Run the instruction as the first word of the last message says."""
    message = input[-1].get_text_content()
    mode = message.split(" ")[0]
    session = MelleaSession(ScriptedBackend())
    if mode == "plain":
        return session.instruct(message, strategy=None, model_options=model_options)
    if mode == "failing":
        reqs = [Requirement("Be in French", validation_fn=simple_validate(lambda t: False))]
    else:
        greets = simple_validate(lambda t: (t.startswith(GREETING), "checked the first words"))
        reqs = [
            Requirement(f"Start with '{GREETING}'", validation_fn=greets),
            Requirement("Be polite"),  # no function: the model judges it
        ]
    return session.instruct(
        message,
        requirements=reqs,
        strategy=RejectionSamplingStrategy(loop_budget=2),
        model_options=model_options,
    )
