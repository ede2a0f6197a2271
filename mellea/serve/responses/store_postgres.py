"""Stored responses in PostgreSQL, shared by server replicas on any number of machines.

The same records and rules as the SQLite store (:mod:`mellea.serve.responses.store`):
per-owner visibility, the count, age and byte bounds, a cancel that wins over a late
finish. What more there is to it:

- The schema is created and migrated at start, under an advisory lock (replicas may start
  together); a database with a newer schema than this code knows is a start error.
- Every write is one transaction, committed before the caller goes on: a response whose
  terminal event was sent is on disk, and no row is ever half-written.
- A response in progress holds a lease that the process running it renews; a process
  killed mid-generation stops renewing, and once the lease runs out any replica marks the
  response ``failed``.
- When the database stops answering, calls raise :class:`StoreUnavailable` at once (the
  request gets a 503) while a thread waits for it to come back; no restart is needed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from mellea.serve.responses.store_errors import StoreError, StoreUnavailable
from mellea.serve.responses.stored import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_COUNT,
    LEASE_SECONDS,
    ORPHAN_ERROR,
    StoredResponse,
)

log = logging.getLogger("mellea.serve")

SCHEMA_VERSION = 1
# Each version's statements, run once, in order, by the first server that finds them missing.
_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE mellea_responses (
            id text PRIMARY KEY,
            seq bigserial NOT NULL,
            status text NOT NULL,
            record json NOT NULL,
            created double precision NOT NULL,
            size integer NOT NULL,
            owner text NOT NULL DEFAULT '',
            lease_until timestamptz
        )""",
        "CREATE INDEX mellea_responses_created ON mellea_responses (created, seq)",
        "CREATE INDEX mellea_responses_running ON mellea_responses (lease_until) "
        "WHERE status = 'in_progress'",
    ],
}
_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS mellea_schema_version (version integer NOT NULL)"
# Advisory lock ids (any two numbers no other program of the database uses).
_MIGRATE_LOCK = 0x6D6C_0001
_EVICT_LOCK = 0x6D6C_0002
# Visible while young enough or still running, and to its owner (None: to anyone).
_LIVE = "(created >= %(oldest)s OR status = 'in_progress') AND (%(owner)s::text IS NULL OR owner = %(owner)s)"
PROBE_SECONDS = 0.5  # how often a store whose database is down tries it again
POOL_WAIT_SECONDS = 2.0  # how long a call waits for a working connection of the pool
# What means the database (or the way to it) is gone, rather than a mistake in a query.
_DOWN = (psycopg.OperationalError, psycopg.InterfaceError)


class PostgresStore:
    """Responses by id in a PostgreSQL database. Safe to use from any thread.

    ``url`` is a libpq connection URL (``postgresql://user:password@host:port/db``);
    ``None`` for a bound lifts it; ``lease`` is how long (seconds) a response in progress
    outlives the last sign of life of the process running it.
    """

    shared = True

    def __init__(
        self,
        url: str,
        max_count: int | None = DEFAULT_MAX_COUNT,
        max_age: float | None = DEFAULT_MAX_AGE,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        *,
        lease: float = LEASE_SECONDS,
        pool_size: int = 8,
    ) -> None:
        """Connect, create or migrate the schema, and start renewing leases.

        Raises :class:`StoreError` if the database cannot be reached or has a newer schema.
        """
        self.max_count = max_count
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.lease = lease
        self._url = url
        self._where = _describe(url)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": 5, "application_name": "m serve"},
            open=False,
            # A connection the database closed (it restarted) is replaced before use, so
            # the first call after a restart finds it, not a 503.
            check=ConnectionPool.check_connection,
            timeout=POOL_WAIT_SECONDS,
            name="mellea-responses",
        )
        try:
            # One plain connection first: it fails at once, with the server's reason.
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                migrate(conn)
            self._pool.open(wait=True, timeout=10.0)
        except psycopg.Error as exc:
            self._pool.close()
            raise StoreError(
                f"cannot open the responses database {self._where}: {_first_line(exc)}"
            ) from None
        except StoreError:
            self._pool.close()
            raise
        # Calls made through store_call run here, one connection each: while one waits
        # for a commit to reach the disk, the others go on (and PostgreSQL commits together).
        self.executor = ThreadPoolExecutor(pool_size, thread_name_prefix="responses-store")
        self._running: set[str] = set()  # responses in progress in this process
        self._running_lock = threading.Lock()
        self._down = threading.Event()
        self._closed = threading.Event()
        self._probe: threading.Thread | None = None
        self._leases = threading.Thread(target=self._keep_leases, name="responses-leases")
        self._leases.daemon = True
        self._leases.start()

    # -- the Store protocol ---------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`StoreUnavailable` at once while the database is known to be down."""
        if self._down.is_set():
            raise StoreUnavailable

    def close(self) -> None:
        """Stop renewing leases and probing, wait for those threads and the calls under
        way, and close the connections (calling it again does nothing more)."""
        self._closed.set()
        self.executor.shutdown(wait=True)
        self._leases.join()
        if self._probe is not None:  # read after the join: the lease thread may start one
            self._probe.join()
        self._pool.close()

    def create(self, record: StoredResponse, owner: str = "") -> None:
        """Store a new response of ``owner``, evicting what is past the bounds."""
        created = float(record.response.get("created_at") or time.time())
        text = _dump(record)
        running = record.status == "in_progress"
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO mellea_responses (id, status, record, created, size, owner, "
                "lease_until) VALUES (%s, %s, %s::json, %s, %s, %s, "
                "CASE WHEN %s THEN now() + make_interval(secs => %s) END)",
                (record.id, record.status, text, created, _size(text), owner, running, self.lease),
            )
            self._evict(conn)
        if running:
            with self._running_lock:
                self._running.add(record.id)

    def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The stored response, or None."""
        with self._transaction() as conn:
            return self._read(conn, response_id, owner)

    def items(self, item_ids: list[str], owner: str | None = None) -> dict[str, dict[str, Any]]:
        """The stored items with these ids (input or output items of the owner's live
        responses), by id; an id no such item has is left out."""
        wanted = list(dict.fromkeys(item_ids))
        if not wanted:
            return {}
        query = " UNION ALL ".join(
            f"SELECT item FROM mellea_responses, json_array_elements({where}) AS item "
            f"WHERE {_LIVE} AND item->>'id' = ANY(%(ids)s)"
            for where in ("record->'response'->'output'", "record->'input'")
        )
        with self._transaction() as conn:
            rows = conn.execute(query, {**self._live(owner), "ids": wanted}).fetchall()
        found: dict[str, dict[str, Any]] = {}
        for (item,) in rows:
            found.setdefault(item["id"], item)
        return found

    def status(self, response_id: str, owner: str | None = None) -> str | None:
        """Just the status of a stored response (cheap enough to poll)."""
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT status FROM mellea_responses WHERE id = %(id)s AND {_LIVE}",
                {"id": response_id, **self._live(owner)},
            ).fetchone()
        return row[0] if row else None

    def delete(self, response_id: str, owner: str | None = None) -> bool:
        """Forget a response; False if there was none."""
        with self._transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM mellea_responses WHERE id = %(id)s AND {_LIVE}",
                {"id": response_id, **self._live(owner)},
            )
        return cursor.rowcount > 0

    def finish(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Store a response's final state; returns what was stored (None if it was deleted).

        A cancel that got in first wins: the output is kept, the status stays ``cancelled``.
        """
        with self._running_lock:
            self._running.discard(response["id"])
        with self._transaction() as conn:
            record = self._read(conn, response["id"], lock=True)
            if record is None:
                return None
            if record.status == "cancelled" and response["status"] != "cancelled":
                response = {**response, "status": "cancelled", "completed_at": None}
                response["incomplete_details"] = None
            record.response = response
            self._write(conn, record)
            self._evict(conn)
        return response

    def cancel(
        self, response_id: str, owner: str | None = None
    ) -> tuple[str, dict[str, Any]] | None:
        """Mark an in-progress response ``cancelled`` (the process running it, whichever
        it is, notices by polling :meth:`status`).

        Returns (the status it had, the stored response), or None if there is no such
        response; only an ``in_progress`` one changes.
        """
        with self._transaction() as conn:
            record = self._read(conn, response_id, owner, lock=True)
            if record is None:
                return None
            before = record.status
            if before == "in_progress":
                record.response = {**record.response, "status": "cancelled"}
                self._write(conn, record)
        return before, record.response

    # -- leases ---------------------------------------------------------------------------

    def renew_and_reap(self) -> list[str]:
        """Renew the leases of this process's responses in progress, and mark ``failed``
        those whose lease ran out (their process died); returns the ids marked."""
        with self._running_lock:
            mine = list(self._running)
        with self._transaction() as conn:
            if mine:
                # Losing a renewal in a crash costs nothing: no need to wait for the disk.
                conn.execute("SET LOCAL synchronous_commit = off")
                conn.execute(
                    "UPDATE mellea_responses SET lease_until = now() + make_interval(secs => %s) "
                    "WHERE id = ANY(%s) AND status = 'in_progress'",
                    (self.lease, mine),
                )
        reaped = []
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT record FROM mellea_responses WHERE status = 'in_progress' "
                "AND lease_until < now() FOR UPDATE SKIP LOCKED LIMIT 100"
            ).fetchall()
            for (data,) in rows:
                record = _load(data)
                record.response = {**record.response, "status": "failed", "error": ORPHAN_ERROR}
                self._write(conn, record)
                reaped.append(record.id)
        if reaped:
            log.warning("marked %d orphaned response(s) failed: %s", len(reaped), reaped)
        return reaped

    def _keep_leases(self) -> None:
        while not self._closed.wait(self.lease / 3):
            if self._down.is_set():
                continue
            try:
                self.renew_and_reap()
            except StoreUnavailable:
                pass
            except Exception:  # never let the thread die: the next round tries again
                log.exception("renewing the leases of responses in progress failed")

    # -- connections ----------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction; a database that went away is a 503."""
        self.check()
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except _DOWN as exc:
            self._went_down(exc)
            raise StoreUnavailable from None

    def _went_down(self, exc: Exception) -> None:
        if self._down.is_set() or self._closed.is_set():
            return
        log.warning("the responses database %s stopped answering: %s", self._where, exc)
        self._down.set()
        self._probe = threading.Thread(target=self._wait_for_database, name="responses-probe")
        self._probe.daemon = True
        self._probe.start()

    def _wait_for_database(self) -> None:
        """Until the database answers again (a connection of our own, not the pool's, which
        backs off ever longer between tries); then drop the pool's broken connections."""
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                self._pool.check()
            except Exception:
                self._closed.wait(PROBE_SECONDS)
                continue
            log.info("the responses database %s answers again", self._where)
            self._down.clear()
            return

    # -- rows -----------------------------------------------------------------------------

    def _live(self, owner: str | None) -> dict[str, Any]:
        oldest = time.time() - self.max_age if self.max_age is not None else float("-inf")
        return {"oldest": oldest, "owner": owner}

    def _read(
        self,
        conn: psycopg.Connection[Any],
        response_id: str,
        owner: str | None = None,
        *,
        lock: bool = False,
    ) -> StoredResponse | None:
        row = conn.execute(
            f"SELECT record FROM mellea_responses WHERE id = %(id)s AND {_LIVE}"
            + (" FOR UPDATE" if lock else ""),
            {"id": response_id, **self._live(owner)},
        ).fetchone()
        return _load(row[0]) if row else None

    def _write(self, conn: psycopg.Connection[Any], record: StoredResponse) -> None:
        text = _dump(record)
        conn.execute(
            "UPDATE mellea_responses SET status = %s, record = %s::json, size = %s, "
            "lease_until = CASE WHEN %s = 'in_progress' THEN lease_until END WHERE id = %s",
            (record.status, text, _size(text), record.status, record.id),
        )

    def _evict(self, conn: psycopg.Connection[Any]) -> None:
        """Drop expired responses and, beyond ``max_count`` or ``max_bytes``, the oldest
        finished ones (a response in progress stays, and counts).

        One replica evicts at a time; another that finds it busy leaves the work to it.
        """
        locked = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_EVICT_LOCK,)).fetchone()
        if not (locked and locked[0]):
            return
        if self.max_age is not None:
            conn.execute(
                "DELETE FROM mellea_responses WHERE created < %s AND status != 'in_progress'",
                (time.time() - self.max_age,),
            )
        if self.max_count is not None:
            conn.execute(
                "DELETE FROM mellea_responses WHERE id IN (SELECT id FROM mellea_responses "
                "WHERE status != 'in_progress' ORDER BY created DESC, seq DESC OFFSET %s)",
                (self.max_count,),
            )
        if self.max_bytes is not None:
            row = conn.execute(
                "SELECT COALESCE(SUM(size), 0), "
                "COALESCE(SUM(size) FILTER (WHERE status = 'in_progress'), 0) "
                "FROM mellea_responses"
            ).fetchone()
            total, running = row if row else (0, 0)
            if total > self.max_bytes:
                conn.execute(
                    "DELETE FROM mellea_responses WHERE id IN (SELECT id FROM (SELECT id, "
                    "SUM(size) OVER (ORDER BY created DESC, seq DESC) AS kept "
                    "FROM mellea_responses WHERE status != 'in_progress') AS t WHERE kept > %s)",
                    (self.max_bytes - running,),
                )


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found before.

    Raises :class:`StoreError` for a schema newer than this code.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        conn.execute(_VERSION_TABLE)
        row = conn.execute("SELECT max(version) FROM mellea_schema_version").fetchone()
        found = (row[0] if row else None) or 0
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the responses database has schema version {found}, newer than the "
                f"{SCHEMA_VERSION} this m serve knows: upgrade m serve, or give it another database"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute("INSERT INTO mellea_schema_version (version) VALUES (%s)", (version,))
    return found


def _describe(url: str) -> str:
    """The database's host, port and name, without the password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unreadable URL)"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{info.get('dbname') or info.get('user') or ''}@{host}:{port}"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _dump(record: StoredResponse) -> str:
    data = {"response": record.response, "input": record.input, "history": record.history}
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only an escape can carry it to the database
        return json.dumps(data)
    return text


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _load(data: Any) -> StoredResponse:
    if isinstance(data, str):
        data = json.loads(data)
    return StoredResponse(data["response"], data["input"], data["history"])
