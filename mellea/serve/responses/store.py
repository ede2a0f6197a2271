"""Stored responses: one SQLite table of JSON records, shared by worker processes via a file.

Without a file the database lives in memory, private to the process. A record holds the
response object, the request's own input items, and the items of the conversation
before it (so ``previous_response_id`` chains without walking back).

The store is bounded: responses older than ``max_age`` seconds are gone, and beyond
``max_count`` responses or ``max_bytes`` of records the oldest finished ones are evicted
as new ones arrive. The history a record keeps is only what a continuing program reads.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mellea.serve.responses.stored import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_COUNT,
    LEASE_SECONDS,
    ORPHAN_ERROR,
    StoredResponse,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    record TEXT NOT NULL,
    created REAL NOT NULL DEFAULT 0,
    size INTEGER NOT NULL DEFAULT 0,
    owner TEXT NOT NULL DEFAULT '',
    lease_until REAL
)
"""
# Files written before a column existed get it, filled from the records.
_ADD_COLUMNS = {
    "created": (
        "ALTER TABLE responses ADD COLUMN created REAL NOT NULL DEFAULT 0",
        "UPDATE responses SET created = COALESCE(json_extract(record, '$.response.created_at'), 0)",
    ),
    "size": (
        "ALTER TABLE responses ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
        "UPDATE responses SET size = length(CAST(record AS BLOB))",
    ),
    "owner": ("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''",),
    # Left in progress by a server without leases: its processes are gone (they would
    # have this column), so the first lease round marks them failed.
    "lease_until": (
        "ALTER TABLE responses ADD COLUMN lease_until REAL",
        "UPDATE responses SET lease_until = 0 WHERE status = 'in_progress'",
    ),
}
_INDEX = "CREATE INDEX IF NOT EXISTS responses_created ON responses (created)"
# A response is visible while young enough, or while still running, and to its owner
# (the parameters: the expiry time, then the owner twice; a None owner sees all).
_LIVE = "(created >= ? OR status = 'in_progress') AND (? IS NULL OR owner = ?)"
_IDS_PER_QUERY = 200  # item ids looked up in one query (SQLite bounds its parameters)
log = logging.getLogger("mellea.serve")


class ResponseStore:
    """Responses by id. Safe to use from any thread; the methods are short transactions.

    ``path`` is a database file (several processes may share it) or ``None`` for an
    in-memory database. Each response has an owner (a tenant id, ``""`` for none); the
    methods taking ``owner`` act only on that owner's responses (``None``: on any).

    In a file, a response in progress holds a lease its process renews every third of
    ``lease`` seconds; once a lease runs out (its process was killed), any process of
    the file marks the response ``failed``. In memory, responses die with the process.
    """

    executor = None  # short local transactions: called right on the event loop

    def __init__(
        self,
        path: str | None = None,
        max_count: int | None = DEFAULT_MAX_COUNT,
        max_age: float | None = DEFAULT_MAX_AGE,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        *,
        lease: float = LEASE_SECONDS,
    ) -> None:
        """Open (and create if needed) the database; ``None`` lifts a bound.

        ``max_bytes`` bounds the records' JSON text (UTF-8), all responses together.
        """
        self.shared = path is not None
        self.max_count = max_count
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.lease = lease
        self._lock = threading.Lock()
        self._running: set[str] = set()  # responses in progress in this process
        self._closed = threading.Event()
        self._leases: threading.Thread | None = None
        self._db = sqlite3.connect(
            path or ":memory:", check_same_thread=False, timeout=10.0, isolation_level=None
        )
        if self.shared:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        with _transaction(self._db):
            self._db.execute(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
            for column, statements in _ADD_COLUMNS.items():
                if column not in columns:
                    for statement in statements:
                        self._db.execute(statement)
            self._db.execute(_INDEX)
        if self.shared:
            self._leases = threading.Thread(target=self._keep_leases, name="responses-leases")
            self._leases.daemon = True
            self._leases.start()

    def check(self) -> None:
        """Nothing to check: SQLite is a file (or memory) of this machine, never away."""

    def close(self) -> None:
        """Stop renewing leases and close the database connection."""
        self._closed.set()
        if self._leases is not None:
            self._leases.join()
        with self._lock:
            self._db.close()

    def create(self, record: StoredResponse, owner: str = "") -> None:
        """Store a new response of ``owner``, evicting what is past the bounds."""
        created = float(record.response.get("created_at") or time.time())
        text = _dump(record)
        running = record.status == "in_progress"
        lease_until = time.time() + self.lease if running else None
        with self._lock, _transaction(self._db):
            self._db.execute(
                "INSERT INTO responses (id, status, record, created, size, owner, lease_until) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.id, record.status, text, created, _size(text), owner, lease_until),
            )
            self._evict()
            if running:
                self._running.add(record.id)

    def _evict(self) -> None:
        """Drop expired responses and, beyond ``max_count`` or ``max_bytes``, the oldest
        finished ones (a response in progress stays, and counts)."""
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
        if self.max_bytes is not None:
            (total,) = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()
            if total > self.max_bytes:
                (running,) = self._db.execute(
                    "SELECT COALESCE(SUM(size), 0) FROM responses WHERE status = 'in_progress'"
                ).fetchone()
                self._db.execute(
                    "DELETE FROM responses WHERE id IN (SELECT id FROM (SELECT id, SUM(size) "
                    "OVER (ORDER BY created DESC, rowid DESC) AS kept FROM responses "
                    "WHERE status != 'in_progress') WHERE kept > ?)",
                    (self.max_bytes - running,),
                )

    def _oldest(self) -> float:
        """The creation time before which a response has expired."""
        return time.time() - self.max_age if self.max_age is not None else float("-inf")

    def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The stored response, or None."""
        with self._lock:
            return self._read(response_id, owner)

    def items(self, item_ids: list[str], owner: str | None = None) -> dict[str, dict[str, Any]]:
        """The stored items with these ids (input or output items of the owner's live
        responses), by id; an id no such item has is left out."""
        found: dict[str, dict[str, Any]] = {}
        wanted = list(dict.fromkeys(item_ids))
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            batch = wanted[start : start + _IDS_PER_QUERY]
            marks = ", ".join("?" * len(batch))
            query = " UNION ALL ".join(
                f"SELECT item.value FROM responses, json_each(record, '{where}') AS item "
                f"WHERE {_LIVE} AND json_extract(item.value, '$.id') IN ({marks})"
                for where in ("$.response.output", "$.input")
            )
            with self._lock:
                rows = self._db.execute(query, (*self._live(owner), *batch) * 2).fetchall()
            for (text,) in rows:
                item = json.loads(text)
                found.setdefault(item["id"], item)
        return found

    def status(self, response_id: str, owner: str | None = None) -> str | None:
        """Just the status of a stored response (cheap enough to poll)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT status FROM responses WHERE id = ? AND {_LIVE}",
                (response_id, *self._live(owner)),
            ).fetchone()
        return row[0] if row else None

    def delete(self, response_id: str, owner: str | None = None) -> bool:
        """Forget a response; False if there was none."""
        with self._lock:
            cursor = self._db.execute(
                f"DELETE FROM responses WHERE id = ? AND {_LIVE}",
                (response_id, *self._live(owner)),
            )
        return cursor.rowcount > 0

    def finish(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Store a response's final state; returns what was stored (None if it was deleted).
        Finished, it counts towards ``max_count``: the oldest beyond it are evicted.

        A cancel that got in first wins: the output is kept, the status stays ``cancelled``.
        """
        with self._lock, _transaction(self._db):
            self._running.discard(response["id"])
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

    def cancel(
        self, response_id: str, owner: str | None = None
    ) -> tuple[str, dict[str, Any]] | None:
        """Mark an in-progress response ``cancelled``.

        Returns (the status it had, the stored response), or None if there is no such
        response; only an ``in_progress`` one changes.
        """
        with self._lock, _transaction(self._db):
            record = self._read(response_id, owner)
            if record is None:
                return None
            before = record.status
            if before == "in_progress":
                record.response = {**record.response, "status": "cancelled"}
                self._write(record)
        return before, record.response

    def renew_and_reap(self) -> list[str]:
        """Renew the leases of this process's responses in progress, and mark ``failed``
        those whose lease ran out (their process died); returns the ids marked."""
        now = time.time()
        with self._lock, _transaction(self._db):
            mine = list(self._running)
            for start in range(0, len(mine), _IDS_PER_QUERY):
                batch = mine[start : start + _IDS_PER_QUERY]
                self._db.execute(
                    "UPDATE responses SET lease_until = ? WHERE status = 'in_progress' "
                    f"AND id IN ({', '.join('?' * len(batch))})",
                    (now + self.lease, *batch),
                )
            rows = self._db.execute(
                "SELECT record FROM responses WHERE status = 'in_progress' AND lease_until < ?",
                (now,),
            ).fetchall()
            reaped = []
            for (text,) in rows:
                record = _load(text)
                record.response = {**record.response, "status": "failed", "error": ORPHAN_ERROR}
                self._write(record)
                reaped.append(record.id)
        if reaped:
            log.warning("marked %d orphaned response(s) failed: %s", len(reaped), reaped)
        return reaped

    def _keep_leases(self) -> None:
        while not self._closed.wait(self.lease / 3):
            try:
                self.renew_and_reap()
            except Exception:  # never let the thread die: the next round tries again
                log.exception("renewing the leases of responses in progress failed")

    def _live(self, owner: str | None) -> tuple[float, str | None, str | None]:
        return self._oldest(), owner, owner

    def _read(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        row = self._db.execute(
            f"SELECT record FROM responses WHERE id = ? AND {_LIVE}",
            (response_id, *self._live(owner)),
        ).fetchone()
        return _load(row[0]) if row else None

    def _write(self, record: StoredResponse) -> None:
        text = _dump(record)
        self._db.execute(
            "UPDATE responses SET status = ?, record = ?, size = ? WHERE id = ?",
            (record.status, text, _size(text), record.id),
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


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _load(text: str) -> StoredResponse:
    data = json.loads(text)
    return StoredResponse(data["response"], data["input"], data["history"])
