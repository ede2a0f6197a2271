"""What every responses store offers, and :func:`open_store`, which picks one by location.

Two stores satisfy :class:`Store`: SQLite (:mod:`mellea.serve.responses.store`, in memory
or one file, for one machine) and PostgreSQL (:mod:`mellea.serve.responses.store_postgres`,
for replicas on several machines). The PostgreSQL driver is imported only when a
``postgresql://`` location is given.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from mellea.serve.responses.store import ResponseStore
from mellea.serve.responses.store_errors import StoreError
from mellea.serve.responses.stored import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_COUNT,
    StoredResponse,
)

T = TypeVar("T")
DATABASE_SCHEMES = ("postgresql://", "postgres://")


class Store(Protocol):
    """Stored responses by id, each belonging to an owner (a tenant id, ``""`` for none).

    Methods taking ``owner`` act only on that owner's responses (``None``: on any). Any
    method may raise :class:`StoreUnavailable` when the database does not answer.
    """

    shared: bool  # other processes see the same responses (a cancel may come from them)
    executor: Executor | None  # the threads its calls run on (None: the caller's, at once)

    def check(self) -> None:
        """Raise :class:`StoreUnavailable` at once if the database is known to be down."""

    def create(self, record: StoredResponse, owner: str = "") -> None:
        """Store a new response of ``owner``, evicting what is past the bounds."""

    def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The stored response, or None."""

    def items(self, item_ids: list[str], owner: str | None = None) -> dict[str, dict[str, Any]]:
        """The stored input or output items with these ids, by id."""

    def status(self, response_id: str, owner: str | None = None) -> str | None:
        """Just the status of a stored response (cheap enough to poll)."""

    def delete(self, response_id: str, owner: str | None = None) -> bool:
        """Forget a response; False if there was none."""

    def finish(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Store a response's final state (a cancel that came first keeps its status)."""

    def cancel(
        self, response_id: str, owner: str | None = None
    ) -> tuple[str, dict[str, Any]] | None:
        """Mark an in-progress response ``cancelled``: (the status it had, the response)."""

    def close(self) -> None:
        """Let the database go."""


def store_call(store: Store, method: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``method(*args)`` of ``store`` as a future: on the store's own threads where it has
    some (a database's round trips and commits never hold up the event loop), else done
    at once. Once called, the work goes on even if nobody awaits the future."""
    loop = asyncio.get_running_loop()
    if store.executor is not None:
        return loop.run_in_executor(store.executor, functools.partial(method, *args))
    future: asyncio.Future[T] = loop.create_future()
    try:
        future.set_result(method(*args))
    except Exception as exc:
        future.set_exception(exc)
    return future


def is_database_url(location: str | None) -> bool:
    """Whether ``location`` names a PostgreSQL database rather than a SQLite file."""
    return location is not None and location.startswith(DATABASE_SCHEMES)


def open_store(
    location: str | None,
    max_count: int | None = DEFAULT_MAX_COUNT,
    max_age: float | None = DEFAULT_MAX_AGE,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    lease: float | None = None,
) -> Store:
    """The store at ``location``: a ``postgresql://`` URL, a SQLite file, or ``None`` (memory).

    ``lease`` (a file or a database) is how many seconds a response stays ``in_progress``
    without the server running it renewing it; then any process or replica sharing the
    store marks it ``failed``. Raises :class:`StoreError` when the database cannot be opened.
    """
    options = {} if lease is None else {"lease": lease}
    if not is_database_url(location):
        return ResponseStore(location, max_count, max_age, max_bytes, **options)
    assert location is not None
    try:  # psycopg is optional: imported only for a database that needs it
        from mellea.serve.responses.store_postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs psycopg 3 and its pool ({exc.name} is missing): "
            "pip install 'mellea[postgres]'"
        ) from None
    return PostgresStore(location, max_count, max_age, max_bytes, **options)
