"""The errors of a responses store, raised by every store and by :func:`open_store`."""

from __future__ import annotations

from mellea.serve.errors import OpenAIError

UNAVAILABLE_MESSAGE = (
    "the store of responses cannot be reached right now; try again in a few seconds"
)


class StoreError(Exception):
    """A store that cannot open (unreachable, or a schema this server does not know);
    the message is one line meant for the user."""


class StoreUnavailable(OpenAIError):
    """The store's database stopped answering: a 503 for the request that needed it."""

    def __init__(self) -> None:
        super().__init__(503, UNAVAILABLE_MESSAGE, code="store_unavailable")
