"""Stored responses: one SQLite table of JSON records, shared by worker processes via a file.

Without a file the database lives in memory, private to the process. A record holds the
response object, the request's own input items, and the items of the conversation
before it (so ``previous_response_id`` chains without walking back).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    record TEXT NOT NULL
)
"""


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

    def __init__(self, path: str | None = None) -> None:
        """Open (and create if needed) the database."""
        self.shared = path is not None
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            path or ":memory:", check_same_thread=False, timeout=10.0, isolation_level=None
        )
        if self.shared:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def create(self, record: StoredResponse) -> None:
        """Store a new response."""
        with self._lock:
            self._db.execute(
                "INSERT INTO responses (id, status, record) VALUES (?, ?, ?)",
                (record.id, record.status, _dump(record)),
            )

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response, or None."""
        with self._lock:
            return self._read(response_id)

    def status(self, response_id: str) -> str | None:
        """Just the status of a stored response (cheap enough to poll)."""
        with self._lock:
            row = self._db.execute(
                "SELECT status FROM responses WHERE id = ?", (response_id,)
            ).fetchone()
        return row[0] if row else None

    def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return cursor.rowcount > 0

    def finish(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Store a response's final state; returns what was stored (None if it was deleted).

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
            "SELECT record FROM responses WHERE id = ?", (response_id,)
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
