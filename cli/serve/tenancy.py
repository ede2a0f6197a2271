"""Tenants: who a request belongs to, and the prefix-cache salt of its generations.

With API keys, each key is a tenant (:class:`cli.serve.auth.ApiKeyAuth` names it);
without, every request belongs to the one anonymous tenant ``""``. Stored responses
are visible to their tenant only, and each tenant's prompts share cached KV blocks
only among themselves: a client cannot learn from ``cached_tokens`` what another sent.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.request_body import is_generating, typed_body
from mellea.backends.cache_salt import cache_salt

_TENANT = "tenant"


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
    The typed request checked the field (``mellea.serve.bounds.check_cache_salt``); a body
    that did not validate goes on unsalted to the route, which answers it with a 400.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_generating(scope):
            await self.app(scope, receive, send)
            return
        body = typed_body(scope)
        own = body.cache_salt if body is not None else None
        tenant = tenant_of(scope)
        salt = f"{tenant}\0{own}" if own is not None else tenant or None
        with cache_salt(salt):
            await self.app(scope, receive, send)
