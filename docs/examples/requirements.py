"""Rejection sampling: retry until the reply meets every requirement.

Run it:  m serve docs/examples/requirements.py
Requirements sent by the client (the ``requirements`` field) are checked too.
"""

from typing import Any

import mellea
from mellea.core import ModelOutputThunk, Requirement, SamplingResult
from mellea.serve import ChatMessage
from mellea.stdlib.context import SimpleContext
from mellea.stdlib.requirements import simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy

session = mellea.start_session(ctx=SimpleContext())


def short_enough(reply: str) -> bool:
    return len(reply.split()) <= 60


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk | SamplingResult:
    """Answer in at most 60 words; up to three attempts."""
    reqs = [
        Requirement("Answer in at most 60 words.", validation_fn=simple_validate(short_enough)),
        *(requirements or []),
    ]
    return session.instruct(
        input[-1].get_text_content(),
        requirements=reqs,
        strategy=RejectionSamplingStrategy(loop_budget=3),
        model_options=model_options,
        return_sampling_results=True,
    )
