"""A module-level session (the README's pattern) must not grow with every request."""

from __future__ import annotations

import gc
import tracemalloc

import mellea
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend

REQUESTS = 3000


async def test_module_level_session_memory_stays_flat_over_thousands_of_requests():
    # Every reply carries 8 words x 16 log-probabilities, like a request that asked for them.
    session = MelleaSession(ScriptedBackend(["one two three four five six seven eight"], 16))

    async def serve(text: str, model_options: dict | None = None) -> str:
        thunk = await session.ainstruct(
            text, strategy=None, model_options=model_options, await_result=False
        )
        return await thunk.avalue()  # what the server does with a returned thunk

    tracemalloc.start()
    try:
        sizes = []
        for i in range(REQUESTS):
            await serve(f"request {i}", {"logprobs": True, "top_logprobs": 3})
            if i in (499, REQUESTS - 1):
                session.backend.calls.clear()  # the test's own record, not the session's
                gc.collect()
                sizes.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    grown = sizes[1] - sizes[0]
    # One request's reply holds ~128 TokenLogprob objects (tens of KiB): 2500 more
    # requests kept would add tens of MiB. Allow well under one request's worth per 100.
    assert grown < 256 * 1024, f"heap grew by {grown / 1024:.0f} KiB over {REQUESTS - 500} requests"
    assert len(session.ctx.as_list()) <= 3


def test_sync_instruct_on_a_module_level_session_keeps_one_turn():
    session = MelleaSession(ScriptedBackend(["ok"], 4))
    first = session.instruct("a")
    for i in range(200):
        session.instruct(f"q{i}")
    kept = session.ctx.as_list()
    assert first not in kept and len(kept) <= 3
    assert mellea.SimpleContext is type(session.ctx)
