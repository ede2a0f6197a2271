"""Test program in upstream mellea's m_serve style, on the real default model.

A sync ``serve()`` passes the request's ``model_options`` to ``session.instruct`` with
rejection sampling and returns the result, as upstream's simplest example does.
"""

import mellea
from mellea.core import ModelOutputThunk, Requirement, SamplingResult
from mellea.serve import ChatMessage
from mellea.stdlib.requirements import simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy


def short_enough(text: str) -> bool:
    return len(text) < 400


def greets(text: str) -> bool:
    return text.lower().startswith("hello")


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict | None = None,
) -> ModelOutputThunk | SamplingResult:
    """Answer the last message, preferring answers that greet and stay short."""
    session = mellea.start_session()
    checks = [
        Requirement("Stay short", validation_fn=simple_validate(short_enough)),
        Requirement("Start with 'Hello'", validation_fn=simple_validate(greets)),
        *(requirements or []),
    ]
    return session.instruct(
        description=input[-1].content,
        requirements=checks,
        strategy=RejectionSamplingStrategy(loop_budget=2),
        model_options=model_options,
    )
