"""Test program: plain chat on the local engine with the model named by ``$LOCAL_MODEL``."""

import os

import mellea

session = mellea.start_session(model_id=os.environ["LOCAL_MODEL"])


async def serve(input, requirements=None, model_options=None):
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
