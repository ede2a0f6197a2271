"""The responses store: bounded in bytes, and keeping of a conversation only what is read."""

from __future__ import annotations

import hashlib
import time

from mellea.serve.responses import ResponseStore, StoredResponse


def record(rid: str, created: float, text: str = "", status: str = "completed") -> StoredResponse:
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return StoredResponse(
        {"id": rid, "status": status, "created_at": created, "output": []}, [message]
    )


def test_store_evicts_the_oldest_finished_responses_beyond_max_bytes():
    store = ResponseStore(max_count=None, max_bytes=5_000)
    now = time.time()
    store.create(record("running", now - 50, "r" * 2_000, status="in_progress"))
    for i in range(4):
        store.create(record(f"r{i}", now - 40 + i, "x" * 1_000))
    kept = [store.get(f"r{i}") is not None for i in range(4)]
    assert kept == [False, False, True, True]  # 2 KB running + 2 x ~1.2 KB fit in 5 KB
    assert store.status("running") == "in_progress", "a running response is never evicted"
    store.finish({"id": "running", "status": "completed", "created_at": now - 50, "output": []})
    store.create(record("big", now, "y" * 3_000))
    assert store.get("running") is None and store.get("r2") is None
    assert store.get("big") is not None


def test_conversation_keeps_only_what_a_program_reads():
    output = [
        {"type": "reasoning", "id": "rs_1", "content": [{"type": "reasoning_text", "text": "hm"}]},
        {
            "type": "message",
            "id": "msg_2",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "hi", "annotations": [], "logprobs": [{"t": 1}]}
            ],
        },
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    stored = StoredResponse({"id": "r", "status": "completed", "output": output})
    assert stored.conversation() == [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]


def test_a_response_is_visible_to_its_owner_only(tmp_path):
    import sqlite3

    from cli.serve.auth import tenant_id

    path = str(tmp_path / "responses.db")
    store = ResponseStore(path)
    key = b"sk-very-secret"
    owner = tenant_id(hashlib.sha256(key).digest())
    store.create(record("mine", time.time(), status="in_progress"), owner)
    assert store.get("mine", "someone-else") is None and store.status("mine", "") is None
    assert store.cancel("mine", "someone-else") is None
    assert not store.delete("mine", "someone-else")
    assert store.get("mine", owner) is not None and store.cancel("mine", owner)[0] == "in_progress"
    stored = sqlite3.connect(path).execute("SELECT * FROM responses").fetchall()
    assert key.decode() not in repr(stored) and hashlib.sha256(key).hexdigest() not in repr(stored)
    assert store.delete("mine", owner)
