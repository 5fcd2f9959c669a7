"""PostgreSQL state: shared, durable, the production choice. Schema and table are created on start.

Every operation is one transaction on a connection of the process's pool (`postgres.connection`), so the
committer threads of several sources commit concurrently without sharing a connection. Transient failures
(restart, failover, read-only switch) are retried for ``retry_timeout_sec``, like the sinks' writes. A retry
after a lost connection may repeat a transaction that did commit: every write is an upsert or a delete of the
same keys to the same values, so repeating it changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
from psycopg.types.json import Jsonb

from streamling.config.model import PostgresConnectionSettings
from streamling.postgres.connection import transact
from streamling.state.base import JsonDoc, StateBackend

DDL = (
    "CREATE SCHEMA IF NOT EXISTS streamling",
    """CREATE TABLE IF NOT EXISTS streamling.state (
        namespace TEXT,
        key TEXT,
        data JSONB NOT NULL,
        created_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY(namespace, key)
    )""",
)
UPSERT = (
    "INSERT INTO streamling.state(namespace, key, data) VALUES (%s, %s, %s) "
    "ON CONFLICT (namespace, key) DO UPDATE SET data = EXCLUDED.data"
)


class PostgresStateBackend(StateBackend):
    def __init__(self, namespace: str, settings: PostgresConnectionSettings) -> None:
        super().__init__(namespace)
        self._settings = settings
        self._where = f"postgres state backend {settings.host}:{settings.port}/{settings.database}"

        def create(cur: psycopg.Cursor) -> None:
            # Serialise concurrent first starts: CREATE ... IF NOT EXISTS races on the catalog.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('streamling.state'))")
            for statement in DDL:
                cur.execute(statement)

        self._run(create)

    def _run(self, fn):  # type: ignore[no-untyped-def]
        return transact(self._settings, self._where, fn)

    def get(self, key: str) -> JsonDoc | None:
        def fetch(cur: psycopg.Cursor) -> JsonDoc | None:
            cur.execute("SELECT data FROM streamling.state WHERE namespace = %s AND key = %s", (self.namespace, key))
            row = cur.fetchone()
            return row[0] if row else None

        return self._run(fetch)

    def put_many(self, items: Mapping[str, JsonDoc]) -> None:
        if items:
            rows = [(self.namespace, k, Jsonb(v)) for k, v in items.items()]
            self._run(lambda cur: cur.executemany(UPSERT, rows))

    def remove(self, key: str) -> None:
        self._run(
            lambda cur: cur.execute(
                "DELETE FROM streamling.state WHERE namespace = %s AND key = %s", (self.namespace, key)
            )
        )

    def clear(self) -> None:
        self._run(lambda cur: cur.execute("DELETE FROM streamling.state WHERE namespace = %s", (self.namespace,)))

    def items(self, prefix: str = "") -> dict[str, JsonDoc]:
        def fetch(cur: psycopg.Cursor) -> dict[str, JsonDoc]:
            cur.execute(
                "SELECT key, data FROM streamling.state WHERE namespace = %s AND left(key, %s) = %s ORDER BY key",
                (self.namespace, len(prefix), prefix),
            )
            return {key: data for key, data in cur.fetchall()}

        return self._run(fetch)
