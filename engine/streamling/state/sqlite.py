"""SQLite state: a local file, created on start; suits single-node runs."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from tenacity import retry_if_exception

from streamling.core.retry import RetryPolicy
from streamling.errors import LeaseLostError, StreamlingError
from streamling.state.base import Fence, JsonDoc, LeaseHolder, StateBackend

T = TypeVar("T")

DDL = """
CREATE TABLE IF NOT EXISTS state (
    namespace TEXT,
    key TEXT,
    data TEXT NOT NULL,
    created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY(namespace, key)
)
"""
UPSERT = (
    "INSERT INTO state(namespace, key, data) VALUES (?, ?, ?) "
    "ON CONFLICT(namespace, key) DO UPDATE SET data = excluded.data"
)
LEASE_DDL = """
CREATE TABLE IF NOT EXISTS leases (
    namespace TEXT,
    name TEXT,
    token TEXT NOT NULL,
    holder TEXT NOT NULL,
    renewals INTEGER NOT NULL,
    expires_at REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(namespace, name)
)
"""


BUSY_TIMEOUT_MS = 10_000
WAL_RETRY_SEC = 0.05
"""The longest wait between two attempts to switch to WAL while another connection holds the lock."""


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


class SqliteStateBackend(StateBackend):
    def __init__(self, namespace: str, database_path: str) -> None:
        super().__init__(namespace)
        self.path = Path(database_path)
        try:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._use_wal()
            self._conn.execute(DDL)
            self._conn.execute(LEASE_DDL)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(leases)")}
            if "generation" not in columns:  # a file written before leases had generations
                self._conn.execute("ALTER TABLE leases ADD COLUMN generation INTEGER NOT NULL DEFAULT 0")
        except (OSError, sqlite3.Error) as exc:
            raise StreamlingError.user(f"sqlite state backend '{self.path}': cannot open: {exc}") from exc
        self._lock = threading.Lock()

    def _use_wal(self) -> None:
        """Switch the file to WAL once. Switching takes an exclusive lock without waiting on the busy timeout, so
        a second run opening the file while another writes (two pipelines on one engine, two CLI runs) would fail
        with "database is locked": the mode is read first (a file already in WAL is left alone) and a switch that
        meets a lock is retried."""

        def switch() -> None:
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._conn.execute("PRAGMA journal_mode=WAL")

        policy = RetryPolicy(None, BUSY_TIMEOUT_MS / 1000, WAL_RETRY_SEC, WAL_RETRY_SEC)
        policy.retrying(retry_if_exception(_locked))(switch)

    def get(self, key: str) -> JsonDoc | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT data FROM state WHERE namespace = ? AND key = ?", (self.namespace, key)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put_many(self, items: Mapping[str, JsonDoc], fence: Fence | None = None) -> None:
        if not items:
            return
        rows = [(self.namespace, k, json.dumps(v, separators=(",", ":"))) for k, v in items.items()]

        def write(conn: sqlite3.Connection) -> None:
            if fence is not None:
                held = conn.execute(
                    "SELECT 1 FROM leases WHERE namespace = ? AND name = ? AND token = ? AND expires_at > ?",
                    (self.namespace, fence.name, fence.token, time.time()),
                ).fetchone()
                if held is None:
                    raise LeaseLostError(self.fence_refusal(fence.name), retriable=True)
            conn.executemany(UPSERT, rows)

        self._write("write", write)

    def remove(self, key: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM state WHERE namespace = ? AND key = ?", (self.namespace, key))

    def clear(self) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM state WHERE namespace = ?", (self.namespace,))

    def items(self, prefix: str = "") -> dict[str, JsonDoc]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT key, data FROM state WHERE namespace = ? AND substr(key, 1, ?) = ? ORDER BY key",
                (self.namespace, len(prefix), prefix),
            ).fetchall()
        return {key: json.loads(data) for key, data in rows}

    def _write(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` in one write transaction: BEGIN IMMEDIATE takes the database's write lock first, so what it
        reads cannot change before it writes, whichever process asks."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                result = fn(self._conn)
                self._conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise StreamlingError.retry(f"sqlite state backend '{self.path}': {what} failed: {exc}") from exc
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def acquire_lease(
        self, name: str, token: str, holder: JsonDoc, ttl_sec: float, replace: str | None = None
    ) -> LeaseHolder | None:
        def take(conn: sqlite3.Connection) -> LeaseHolder | None:
            now = time.time()
            row = conn.execute(
                "SELECT token, holder, renewals, expires_at FROM leases WHERE namespace = ? AND name = ?",
                (self.namespace, name),
            ).fetchone()
            if row is not None and row[3] > now and row[0] not in (token, replace):
                return LeaseHolder(row[0], json.loads(row[1]), row[2])
            conn.execute(
                "INSERT INTO leases(namespace, name, token, holder, renewals, expires_at, generation) "
                "VALUES (?, ?, ?, ?, 0, ?, 1) ON CONFLICT(namespace, name) DO UPDATE SET token = excluded.token, "
                "holder = excluded.holder, renewals = 0, expires_at = excluded.expires_at, "
                "generation = generation + (token != excluded.token)",
                (self.namespace, name, token, json.dumps(holder, separators=(",", ":")), now + ttl_sec),
            )
            return None

        return self._write("lease", take)

    def renew_lease(self, name: str, token: str, ttl_sec: float) -> bool:
        def renew(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE leases SET renewals = renewals + 1, expires_at = ? WHERE namespace = ? AND name = ? "
                "AND token = ?",
                (time.time() + ttl_sec, self.namespace, name, token),
            )
            return cur.rowcount == 1

        return self._write("lease renewal", renew)

    def release_lease(self, name: str, token: str) -> None:
        self._write(
            "lease release",
            lambda conn: conn.execute(
                "UPDATE leases SET expires_at = 0 WHERE namespace = ? AND name = ? AND token = ?",
                (self.namespace, name, token),
            ),
        )

    def lease_generation(self, name: str, token: str) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT generation FROM leases WHERE namespace = ? AND name = ? AND token = ?",
                (self.namespace, name, token),
            ).fetchone()
        return int(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
