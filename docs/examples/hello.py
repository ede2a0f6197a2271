"""The smallest useful program: answer the last message, streaming when asked.

Run it:  m serve docs/examples/hello.py
"""

from typing import Any

import mellea
from mellea.core import ModelOutputThunk
from mellea.serve import ChatMessage

session = mellea.start_session()  # the bundled local model, offline


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Reply to the newest message; the server streams the thunk or awaits it."""
    return await session.ainstruct(
        input[-1].get_text_content(),
        requirements=requirements,
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
