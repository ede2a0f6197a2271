"""The Host allow-list: a web page cannot reach a local server through DNS rebinding.

A page on ``attacker.example`` whose name is made to resolve to ``127.0.0.1`` sends its
requests with ``Host: attacker.example``; answering only known names stops it. IP
addresses are always allowed (rebinding needs a name), and so are ``localhost``, the
name the server was bound to and, bound to every interface, this machine's own names.
"""

from __future__ import annotations

import ipaddress
import socket

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.error_response import send_error

WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


def default_allowed_hosts(bound: str) -> list[str]:
    """The names allowed when none are configured, for a server bound to ``bound``."""
    names = ["localhost", "*.localhost"]
    if bound in WILDCARD_BINDS:
        names += [socket.gethostname(), socket.getfqdn()]
    elif not _is_ip(bound):
        names.append(bound)
    return names


class AllowedHosts:
    """ASGI middleware: a request whose ``Host`` is not allowed gets 400.

    ``hosts`` are names, ``*.example.com`` for a domain's subdomains, or ``*`` for any.
    A request without a ``Host`` header (HTTP/1.0; no browser sends one) passes.
    """

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.any = "*" in hosts
        self.exact = {h.lower().rstrip(".") for h in hosts if not h.startswith("*")}
        self.suffixes = tuple(h[1:].lower() for h in hosts if h.startswith("*."))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.any:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers", [])).get(b"host")
        name = _hostname(header.decode("latin-1")) if header is not None else None
        if name is None or self._allowed(name):
            await self.app(scope, receive, send)
            return
        shown = name if len(name) <= 100 else name[:100] + "..."
        await send_error(
            send,
            400,
            f"host {shown!r} is not served here; start the server with "
            f"--allowed-host {shown} to allow it",
            code="host_not_allowed",
            param="Host",
        )

    def _allowed(self, name: str) -> bool:
        return name in self.exact or name.endswith(self.suffixes) or _is_ip(name)


def _hostname(header: str) -> str:
    """The name in a ``Host`` header, without its port, brackets or trailing dot."""
    text = header.strip().lower()
    if text.startswith("["):  # [v6]:port
        return text[1 : text.find("]")] if "]" in text else text
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
