"""Test program: forwards to another OpenAI-compatible server through the openai backend."""

import os

import mellea
from mellea.stdlib.context import SimpleContext

session = mellea.start_session(
    "openai", model_id="upstream", base_url=os.environ["UPSTREAM_BASE_URL"], ctx=SimpleContext()
)


async def serve(input, requirements=None, model_options=None):
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
