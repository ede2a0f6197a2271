"""Test program: one local model per family, the chat sent to it as it came.

``$FAMILY_MODELS`` is a JSON object of family name -> model directory; a request's
system message names the family, its last message goes to that model alone (no
system prompt, no history), so its prompt is the chat template over that message.
"""

import json
import os

import mellea

MODELS = json.loads(os.environ["FAMILY_MODELS"])
sessions: dict[str, object] = {}


async def serve(input, requirements=None, model_options=None):
    family = input[0].get_text_content()
    if family not in sessions:
        sessions[family] = mellea.start_session(model_id=MODELS[family])
    messages = [{"role": "user", "content": input[-1].get_text_content()}]
    return await sessions[family].backend.generate(messages, model_options=model_options)
