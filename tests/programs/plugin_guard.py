"""Test program: a plugin it registers at import blocks requests about a forbidden topic.

The reply otherwise echoes the last message (no model), so only the plugin decides.
"""

from echo_backend import EchoBackend

from mellea.plugins import HookType, block, hook, register
from mellea.serve import ChatMessage
from mellea.stdlib.session import MelleaSession


@hook(HookType.COMPONENT_PRE_EXECUTE)
async def topic_guard(payload, ctx):
    """Refuse any instruction that names the forbidden topic."""
    if "forbidden" in str(payload.action):
        return block("the request names a forbidden topic", code="FORBIDDEN_TOPIC")


SEEN: list[str] = []  # what generation_post_call saw, for the tests to read


@hook(HookType.GENERATION_POST_CALL)
async def remember(payload, ctx):
    """Note each finished output (the server reads the thunk after serve() returned)."""
    SEEN.append(payload.model_output.value)


register([topic_guard, remember])  # for this program's app only


async def serve(input: list[ChatMessage], requirements=None, model_options=None):
    """Echo the last message through a session the plugins watch; the thunk is
    returned unread, for the server to stream."""
    session = MelleaSession(EchoBackend())
    return await session.ainstruct(str(input[-1].content), strategy=None)
