"""The cache salt travels from the request to wherever the program generates."""

from __future__ import annotations

import json

import anyio

from cli.serve.tenancy import CacheSalt, set_tenant
from mellea.backends.cache_salt import cache_salt, current_cache_salt
from mellea.core._sync import run_sync
from tests.inprocess import app_for, client_for
from tests.server import PROGRAMS


async def salt_seen(tenant: str | None, body: dict) -> tuple[str | None, list[dict]]:
    seen: list[str | None] = []
    sent: list[dict] = []

    async def app(scope, receive, send):
        seen.append(current_cache_salt())

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "state": {
            "body": json.dumps({"messages": [{"role": "user", "content": "hi"}], **body}).encode()
        },
    }
    if tenant is not None:
        set_tenant(scope, tenant)
    await CacheSalt(app)(scope, None, send)
    return (seen[0] if seen else None), sent


async def test_the_salt_joins_tenant_and_request():
    assert (await salt_seen(None, {}))[0] is None
    assert (await salt_seen("t1", {}))[0] == "t1"
    own, other = (
        (await salt_seen("t1", {"cache_salt": "x"}))[0],
        (await salt_seen("t2", {"cache_salt": "x"}))[0],
    )
    assert own and other and own != other
    assert (await salt_seen(None, {"cache_salt": "x"}))[0] is not None
    # A bad salt makes the body invalid: it goes on with the tenant's salt alone, and the
    # route refuses it (below).
    seen, sent = await salt_seen("t1", {"cache_salt": ["x"]})
    assert seen == "t1" and sent == []
    assert current_cache_salt() is None


async def test_a_bad_salt_is_a_400_naming_it():
    async with client_for(app_for(PROGRAMS / "echo.py")) as client:
        for salt in (["x"], "", "s" * 257):
            body = {"messages": [{"role": "user", "content": "hi"}], "cache_salt": salt}
            response = await client.post("/v1/chat/completions", json=body)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "cache_salt"
            assert error["message"] == (
                "cache_salt must be a non-empty string of at most 256 characters"
            )


async def read_salt() -> str | None:
    return current_cache_salt()


def sync_program() -> str | None:
    """What a sync serve() does: a sync mellea call, run on the background loop."""
    return run_sync(read_salt())


async def test_the_salt_reaches_sync_programs_and_their_sync_calls():
    with cache_salt("tenant-salt"):
        assert await anyio.to_thread.run_sync(sync_program) == "tenant-salt"
    assert await anyio.to_thread.run_sync(sync_program) is None
