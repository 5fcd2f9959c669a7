"""SQLite state: a local file, created on start; suits single-node runs."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path

from streamling.errors import StreamlingError
from streamling.state.base import JsonDoc, StateBackend

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


class SqliteStateBackend(StateBackend):
    def __init__(self, namespace: str, database_path: str) -> None:
        super().__init__(namespace)
        self.path = Path(database_path)
        try:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._conn.execute(DDL)
        except (OSError, sqlite3.Error) as exc:
            raise StreamlingError.user(f"sqlite state backend '{self.path}': cannot open: {exc}") from exc
        self._lock = threading.Lock()

    def get(self, key: str) -> JsonDoc | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT data FROM state WHERE namespace = ? AND key = ?", (self.namespace, key)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put_many(self, items: Mapping[str, JsonDoc]) -> None:
        if not items:
            return
        rows = [(self.namespace, k, json.dumps(v, separators=(",", ":"))) for k, v in items.items()]
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(UPSERT, rows)
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StreamlingError.retry(f"sqlite state backend '{self.path}': write failed: {exc}") from exc

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

    def close(self) -> None:
        with self._lock:
            self._conn.close()
