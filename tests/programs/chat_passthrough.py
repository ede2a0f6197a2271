"""Test program: the chat sent to the local model ``$LOCAL_MODEL`` as it came (loaded at
import), so a reply's prompt tokens are the chat template over the request's messages."""

import os

import mellea

session = mellea.start_session(model_id=os.environ["LOCAL_MODEL"])


async def serve(input, requirements=None, model_options=None):
    messages = [message.to_openai() for message in input]
    return await session.backend.generate(messages, model_options=model_options)
