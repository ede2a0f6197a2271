"""Test program: reports which runtime its sessions reached, at import and inside serve().

A sync ``serve()`` (run in a worker thread) starts a session of its own, asks the
module-level session something (through the sync helper's background loop), and
reports what each saw.
"""

import json

import mellea
from mellea.backends.runtime import current_runtime
from mellea.core._sync import run_sync
from mellea.serve import ChatMessage

session = mellea.start_session()  # at import: the loading app's runtime


async def _runtime_on_the_sync_loop() -> str | None:
    return current_runtime().tool_call_parser


def serve(input: list[ChatMessage]) -> str:
    """A JSON report of the runtime the program's sessions reached."""
    inner = mellea.start_session(model_id="someone/else-7B")
    answer = session.instruct(input[-1].get_text_content(), strategy=None)
    return json.dumps(
        {
            "parser": inner.backend.tool_call_parser,
            "loop_parser": run_sync(_runtime_on_the_sync_loop()),
            "kv": inner.backend.engine.kwargs.get("kv_cache_memory"),
            "same_engine": inner.backend.engine is session.backend.engine,
            "answer": str(answer),
        }
    )
