"""Test program: written the ordinary way, choosing no model itself.

``start_session()`` at module level (the served model: ``m serve --model``), and
``serve()`` instructing it with the last message; a request whose model names a
``--lora`` adapter is answered with that adapter all the same.
"""

import mellea

session = mellea.start_session()


async def serve(input, requirements=None, model_options=None):
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
