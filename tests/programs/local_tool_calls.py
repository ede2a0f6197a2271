"""Test program: the local backend with ``tool_calls=True`` over a scripted engine.

The engine writes two hermes tool calls, one character per step; the backend lifts
them onto the thunk and the server must serve each exactly once.
"""

import mellea
from mellea.backends.local import LocalBackend
from tests.unit.test_local_tool_calls import CALLS, ScriptedEngine

session = mellea.MelleaSession(LocalBackend(engine=ScriptedEngine(CALLS)))


async def serve(input, requirements=None, model_options=None):
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        tool_calls=True,
        model_options=model_options,
        await_result=False,
    )
