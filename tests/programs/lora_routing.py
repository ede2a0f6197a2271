"""Test program: upstream's model routing, a request's model picking its session.

The base session runs the local model named by ``$LOCAL_MODEL``; a request whose model
names an adapter loaded in the runtime (``m serve --lora NAME=PATH``) gets a session
started with ``model_id=NAME``, which generates with that adapter.
"""

import os

import mellea

base = mellea.start_session(model_id=os.environ["LOCAL_MODEL"])
sessions = {}


async def serve(input, requirements=None, model_options=None, client_options=None):
    model = (client_options or {}).get("model")
    session = base
    if model in base.backend.adapters:
        if model not in sessions:
            sessions[model] = mellea.start_session(model_id=model)
        session = sessions[model]
    messages = [{"role": "user", "content": input[-1].get_text_content()}]
    return await session.backend.generate(messages, model_options=model_options)
