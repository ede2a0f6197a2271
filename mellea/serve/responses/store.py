"""Stored responses: one SQLite table of JSON records, shared by worker processes via a file.

Without a file the database lives in memory, private to the process. A record holds the
response object, the request's own input items, and the items of the conversation
before it (so ``previous_response_id`` chains without walking back).

The store is bounded: responses older than ``max_age`` seconds are gone, and beyond
``max_count`` the oldest finished ones are evicted as new ones arrive.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    record TEXT NOT NULL,
    created REAL NOT NULL DEFAULT 0
)
"""
# Files written before ``created`` existed get the column, filled from the records.
_ADD_CREATED = (
    "ALTER TABLE responses ADD COLUMN created REAL NOT NULL DEFAULT 0",
    "UPDATE responses SET created = COALESCE(json_extract(record, '$.response.created_at'), 0)",
)
_INDEX = "CREATE INDEX IF NOT EXISTS responses_created ON responses (created)"
# A response is visible while young enough, or while still running.
_LIVE = "(created >= ? OR status = 'in_progress')"
DEFAULT_MAX_COUNT = 10_000
DEFAULT_MAX_AGE = 30 * 24 * 3600.0  # seconds


@dataclass
class StoredResponse:
    """One stored response with the conversation that led to it."""

    response: dict[str, Any]
    input: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The response id."""
        return self.response["id"]

    @property
    def status(self) -> str:
        """The response status (``in_progress`` until it ends)."""
        return self.response["status"]

    def conversation(self) -> list[dict[str, Any]]:
        """What a response continuing this one sees: history, input, then output."""
        return [*self.history, *self.input, *self.response.get("output", [])]


class ResponseStore:
    """Responses by id. Safe to use from any thread; the methods are short transactions.

    ``path`` is a database file (several processes may share it) or ``None`` for an
    in-memory database.
    """

    def __init__(
        self,
        path: str | None = None,
        max_count: int | None = DEFAULT_MAX_COUNT,
        max_age: float | None = DEFAULT_MAX_AGE,
    ) -> None:
        """Open (and create if needed) the database; ``None`` lifts a bound."""
        self.shared = path is not None
        self.max_count = max_count
        self.max_age = max_age
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            path or ":memory:", check_same_thread=False, timeout=10.0, isolation_level=None
        )
        if self.shared:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        with _transaction(self._db):
            self._db.execute(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
            if "created" not in columns:
                for statement in _ADD_CREATED:
                    self._db.execute(statement)
            self._db.execute(_INDEX)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def create(self, record: StoredResponse) -> None:
        """Store a new response, evicting what is past the bounds."""
        created = float(record.response.get("created_at") or time.time())
        with self._lock, _transaction(self._db):
            self._db.execute(
                "INSERT INTO responses (id, status, record, created) VALUES (?, ?, ?, ?)",
                (record.id, record.status, _dump(record), created),
            )
            self._evict()

    def _evict(self) -> None:
        """Drop expired responses and, beyond ``max_count``, the oldest finished ones."""
        if self.max_age is not None:
            self._db.execute(
                "DELETE FROM responses WHERE created < ? AND status != 'in_progress'",
                (self._oldest(),),
            )
        if self.max_count is not None:
            self._db.execute(
                "DELETE FROM responses WHERE id IN (SELECT id FROM responses "
                "WHERE status != 'in_progress' ORDER BY created DESC, rowid DESC "
                "LIMIT -1 OFFSET ?)",
                (self.max_count,),
            )

    def _oldest(self) -> float:
        """The creation time before which a response has expired."""
        return time.time() - self.max_age if self.max_age is not None else float("-inf")

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response, or None."""
        with self._lock:
            return self._read(response_id)

    def status(self, response_id: str) -> str | None:
        """Just the status of a stored response (cheap enough to poll)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT status FROM responses WHERE id = ? AND {_LIVE}",
                (response_id, self._oldest()),
            ).fetchone()
        return row[0] if row else None

    def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none."""
        with self._lock:
            cursor = self._db.execute(
                f"DELETE FROM responses WHERE id = ? AND {_LIVE}", (response_id, self._oldest())
            )
        return cursor.rowcount > 0

    def finish(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Store a response's final state; returns what was stored (None if it was deleted).
        Finished, it counts towards ``max_count``: the oldest beyond it are evicted.

        A cancel that got in first wins: the output is kept, the status stays ``cancelled``.
        """
        with self._lock, _transaction(self._db):
            record = self._read(response["id"])
            if record is None:
                return None
            if record.status == "cancelled" and response["status"] != "cancelled":
                response = {**response, "status": "cancelled", "completed_at": None}
                response["incomplete_details"] = None
            record.response = response
            self._write(record)
            self._evict()
        return response

    def cancel(self, response_id: str) -> tuple[str, dict[str, Any]] | None:
        """Mark an in-progress response ``cancelled``.

        Returns (the status it had, the stored response), or None if there is no such
        response; only an ``in_progress`` one changes.
        """
        with self._lock, _transaction(self._db):
            record = self._read(response_id)
            if record is None:
                return None
            before = record.status
            if before == "in_progress":
                record.response = {**record.response, "status": "cancelled"}
                self._write(record)
        return before, record.response

    def _read(self, response_id: str) -> StoredResponse | None:
        row = self._db.execute(
            f"SELECT record FROM responses WHERE id = ? AND {_LIVE}",
            (response_id, self._oldest()),
        ).fetchone()
        return _load(row[0]) if row else None

    def _write(self, record: StoredResponse) -> None:
        self._db.execute(
            "UPDATE responses SET status = ?, record = ? WHERE id = ?",
            (record.status, _dump(record), record.id),
        )


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: a read-modify-write other processes cannot split."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _dump(record: StoredResponse) -> str:
    return json.dumps(
        {"response": record.response, "input": record.input, "history": record.history},
        ensure_ascii=False,
    )


def _load(text: str) -> StoredResponse:
    data = json.loads(text)
    return StoredResponse(data["response"], data["input"], data["history"])
