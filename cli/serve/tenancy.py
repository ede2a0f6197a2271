"""Tenants: who a request belongs to, and the prefix-cache salt of its generations.

With API keys, each key is a tenant (:class:`cli.serve.auth.ApiKeyAuth` names it);
without, every request belongs to the one anonymous tenant ``""``. Stored responses
are visible to their tenant only, and each tenant's prompts share cached KV blocks
only among themselves: a client cannot learn from ``cached_tokens`` what another sent.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.admission import GENERATING
from cli.serve.error_response import send_error
from cli.serve.limits import body_facts
from mellea.backends.cache_salt import cache_salt

_TENANT = "tenant"
MAX_SALT_LENGTH = 256


def set_tenant(scope: Scope, tenant: str) -> None:
    """Record the tenant a request belongs to."""
    scope.setdefault("state", {})[_TENANT] = tenant


def tenant_of(scope: Scope) -> str:
    """The tenant a request belongs to (``""`` without API keys)."""
    return scope.get("state", {}).get(_TENANT, "")


class CacheSalt:
    """ASGI middleware: generations of a request use its tenant's prefix cache.

    The salt joins the tenant with the request's own ``cache_salt`` field if it has one
    (a client may partition its own requests further); with neither, the cache is shared.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"].rstrip("/") not in GENERATING
        ):
            await self.app(scope, receive, send)
            return
        own = body_facts(scope).cache_salt
        if own is not None and not (isinstance(own, str) and 0 < len(own) <= MAX_SALT_LENGTH):
            await send_error(
                send,
                400,
                f"cache_salt must be a non-empty string of at most {MAX_SALT_LENGTH} characters",
                param="cache_salt",
            )
            return
        tenant = tenant_of(scope)
        salt = f"{tenant}\0{own}" if own is not None else tenant or None
        with cache_salt(salt):
            await self.app(scope, receive, send)
