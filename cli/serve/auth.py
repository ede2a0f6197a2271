"""API keys: every API route needs ``Authorization: Bearer KEY``.

The key a request came with also names its tenant: stored responses belong to it and
the prefix cache is partitioned by it (see :mod:`cli.serve.tenancy`).
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.error_response import send_error
from cli.serve.tenancy import set_tenant

# The health checks, and the playground page with its assets (the page asks for the key).
OPEN_PATHS = frozenset({"/health", "/ready", "/"})
OPEN_PREFIXES = ("/playground/",)


class ApiKeyAuth:
    """ASGI middleware checking the bearer token against the configured keys.

    Keys are compared as SHA-256 digests with ``hmac.compare_digest``, against every
    key each time, so neither a key's content nor its length shows in the timing.
    An authorized request's tenant (a hash of its key, never the key) goes in
    ``scope["state"]``.
    """

    def __init__(self, app: ASGIApp, keys: list[str]) -> None:
        self.app = app
        self.digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] in OPEN_PATHS
            or scope["path"].startswith(OPEN_PREFIXES)
            or scope["method"] == "OPTIONS"  # CORS preflight carries no credentials
        ):
            await self.app(scope, receive, send)
            return
        digest = self._match(scope)
        if digest is not None:
            set_tenant(scope, tenant_id(digest))
            await self.app(scope, receive, send)
            return
        await send_error(
            send,
            401,
            "missing or invalid API key: send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
            headers={"www-authenticate": "Bearer"},
        )

    def _match(self, scope: Scope) -> bytes | None:
        """The digest of the request's key if it is one of ours, else None."""
        header = dict(scope.get("headers", [])).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer":
            token = b""
        digest = hashlib.sha256(token.strip()).digest()
        matched = False
        for known in self.digests:
            matched |= hmac.compare_digest(digest, known)
        return digest if matched else None


def tenant_id(key_digest: bytes) -> str:
    """The tenant of a key, from its SHA-256 digest (what the store may keep)."""
    return hashlib.sha256(b"m-serve tenant\0" + key_digest).hexdigest()[:32]
