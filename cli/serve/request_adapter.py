"""A request whose ``model`` names a ``--lora`` adapter: run with it, and reply as it.

The program's local sessions that pick no adapter of their own generate with it for
that request (:mod:`mellea.backends.request_adapter`), so a program written without
routing serves ``/v1/models``' adapters as it serves its own name. The reply's
``model`` then names the adapter; a request naming the program, nothing, or a name
that selects nothing is served by the program alone and its reply names the program.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.request_body import is_generating, typed_body
from cli.serve.settings import ServeSettings
from mellea.backends.request_adapter import current_request_adapter, request_adapter


class RequestAdapter:
    """ASGI middleware: a generating request whose ``model`` is one of ``adapters`` runs
    inside :func:`~mellea.backends.request_adapter.request_adapter` of that name."""

    def __init__(self, app: ASGIApp, adapters: Iterable[str]) -> None:
        self.app = app
        self.adapters = frozenset(adapters)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_generating(scope):
            await self.app(scope, receive, send)
            return
        body = typed_body(scope)
        model = body.model if body is not None else None
        with request_adapter(model if model in self.adapters else None):
            await self.app(scope, receive, send)


def reply_model(settings: ServeSettings) -> str:
    """The ``model`` the reply to the request being served names: the ``--lora`` adapter
    its ``model`` named, else the program (``--model-name``, default its file name)."""
    return current_request_adapter() or settings.served_model_name
