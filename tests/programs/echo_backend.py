"""A backend that echoes the last message, shared by the plugin test programs."""

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk


class EchoBackend(Backend):
    """Replies with the last message's text."""

    model_id = "echo"

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        text = str(messages[-1]["content"])

        async def stream():
            yield GenerationChunk(text=text)
            yield GenerationChunk(finish_reason="stop")

        return ModelOutputThunk.from_stream(stream())
