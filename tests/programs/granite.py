"""Test program written for Granite: names a model this machine does not have.

The identifier is an upstream-style ``ModelIdentifier`` (duck-typed here): the local
backend reads its ``hf_model_name``.
"""

from typing import Any

import mellea
from mellea.serve import ChatMessage


class GraniteId:
    """Like upstream's ``IBM_GRANITE_4_1_3B``."""

    hf_model_name = "ibm-granite/granite-4.1-3b-not-on-this-machine"
    ollama_name = "granite4.1:3b"


session = mellea.start_session(model_id=GraniteId())


async def serve(input: list[ChatMessage], model_options: dict[str, Any] | None = None):
    """Answer the last message."""
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
