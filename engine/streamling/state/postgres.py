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
from streamling.errors import LeaseLostError, StreamlingError
from streamling.postgres.connection import connection, reason, transact
from streamling.state.base import Fence, JsonDoc, LeaseHolder, StateBackend

DDL = (
    "CREATE SCHEMA IF NOT EXISTS streamling",
    """CREATE TABLE IF NOT EXISTS streamling.state (
        namespace TEXT,
        key TEXT,
        data JSONB NOT NULL,
        created_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY(namespace, key)
    )""",
    """CREATE TABLE IF NOT EXISTS streamling.leases (
        namespace TEXT,
        name TEXT,
        token TEXT NOT NULL,
        holder JSONB NOT NULL,
        renewals BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY(namespace, name)
    )""",
    # Leases written before they had generations.
    "ALTER TABLE streamling.leases ADD COLUMN IF NOT EXISTS generation BIGINT NOT NULL DEFAULT 0",
)
UPSERT = (
    "INSERT INTO streamling.state(namespace, key, data) VALUES (%s, %s, %s) "
    "ON CONFLICT (namespace, key) DO UPDATE SET data = EXCLUDED.data"
)
# Expiry is on the database's clock, so hosts with skewed clocks agree on it.
ACQUIRE_LEASE = (
    "INSERT INTO streamling.leases AS l (namespace, name, token, holder, renewals, expires_at, generation) "
    "VALUES (%(ns)s, %(name)s, %(token)s, %(holder)s, 0, clock_timestamp() + make_interval(secs => %(ttl)s), 1) "
    "ON CONFLICT (namespace, name) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder, renewals = 0, "
    "expires_at = EXCLUDED.expires_at, "
    "generation = l.generation + CASE WHEN l.token = EXCLUDED.token THEN 0 ELSE 1 END "
    "WHERE l.expires_at <= clock_timestamp() OR l.token = EXCLUDED.token OR l.token = %(replace)s "
    "RETURNING l.token"
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

    def put_many(self, items: Mapping[str, JsonDoc], fence: Fence | None = None) -> None:
        """With `fence`, the lease row is read `FOR SHARE` in the same transaction: a takeover (which updates the
        row) waits for this commit, and a commit after a takeover — a retry landing minutes late — is refused."""
        if not items:
            return
        rows = [(self.namespace, k, Jsonb(v)) for k, v in items.items()]

        def write(cur: psycopg.Cursor) -> None:
            if fence is not None:
                cur.execute(
                    "SELECT 1 FROM streamling.leases WHERE namespace = %s AND name = %s AND token = %s "
                    "AND expires_at > clock_timestamp() FOR SHARE",
                    (self.namespace, fence.name, fence.token),
                )
                if cur.fetchone() is None:
                    raise LeaseLostError(self.fence_refusal(fence.name), retriable=True)
            cur.executemany(UPSERT, rows)

        self._run(write)

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

    def acquire_lease(
        self, name: str, token: str, holder: JsonDoc, ttl_sec: float, replace: str | None = None
    ) -> LeaseHolder | None:
        """One INSERT … ON CONFLICT DO UPDATE … WHERE: concurrent callers queue on the row, and only one of
        them finds it free."""
        params = {"ns": self.namespace, "name": name, "token": token, "holder": Jsonb(holder), "ttl": ttl_sec}
        params["replace"] = replace

        def take(cur: psycopg.Cursor) -> LeaseHolder | None:
            for _ in range(2):  # the holder may release between the two statements: then try once more
                cur.execute(ACQUIRE_LEASE, params)
                if cur.fetchone() is not None:
                    return None
                cur.execute(
                    "SELECT token, holder, renewals FROM streamling.leases WHERE namespace = %s AND name = %s",
                    (self.namespace, name),
                )
                row = cur.fetchone()
                if row is not None:
                    return LeaseHolder(row[0], row[1], row[2])
            raise StreamlingError.retry(f"{self._where}: lease '{name}' changed hands twice while being taken")

        return self._run(take)

    def renew_lease(self, name: str, token: str, ttl_sec: float) -> bool:
        """One attempt, not the commits' retries: the heartbeat tries again at its next beat, so a renewal lands
        within a beat of the database taking writes again. Retried with backoff (up to 10 s between attempts), a
        renewal stuck behind a 10 s read-only failover came back 25 s later and the run lost its 30 s lease."""
        try:
            with connection(self._settings, self._where) as conn, conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    "UPDATE streamling.leases SET renewals = renewals + 1, "
                    "expires_at = clock_timestamp() + make_interval(secs => %s) "
                    "WHERE namespace = %s AND name = %s AND token = %s",
                    (ttl_sec, self.namespace, name, token),
                )
                return cur.rowcount == 1
        except psycopg.Error as exc:
            raise StreamlingError.retry(f"{self._where}: {reason(exc)}") from None

    def release_lease(self, name: str, token: str) -> None:
        self._run(
            lambda cur: cur.execute(
                "UPDATE streamling.leases SET expires_at = '-infinity' WHERE namespace = %s AND name = %s "
                "AND token = %s",
                (self.namespace, name, token),
            )
        )

    def lease_generation(self, name: str, token: str) -> int | None:
        def fetch(cur: psycopg.Cursor) -> int | None:
            cur.execute(
                "SELECT generation FROM streamling.leases WHERE namespace = %s AND name = %s AND token = %s",
                (self.namespace, name, token),
            )
            row = cur.fetchone()
            return int(row[0]) if row else None

        return self._run(fetch)
