"""The Postgres backend: a table ``(value TEXT PRIMARY KEY)`` that the pipeline fills and anyone else may
fill too; lookups read it on every batch, so external inserts show up without a restart.

The driver creates the table and inserts a populating node's values. The executors look values up
through `PostgresLookup`, on a connection of the Python worker's pool (`postgres.connection`, outliving
batches and tasks; autocommit, so every lookup sees the latest committed rows) and, with ``cache_ttl_ms``,
reuse answers for that long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg import sql

from streamling.config.model import PostgresSinkSettings
from streamling.postgres import catalog
from streamling.postgres.connection import connection, transact, with_retries

T = TypeVar("T")
MAX_CACHED_ANSWERS = 200_000
"""Per table and worker; past this, expired answers are dropped (and all of them, if none expired)."""


@dataclass(frozen=True)
class PostgresTable:
    """Where a dynamic table lives and how to reach it; picklable, so it travels inside the UDF."""

    node: str
    connection: PostgresSinkSettings
    schema: str
    table: str
    max_batch_size: int = 1000
    cache_ttl_ms: float = 0

    @property
    def where(self) -> str:
        return f"dynamic table '{self.node}'"

    @property
    def qualified(self) -> sql.Composed:
        return catalog.qualified(self.schema, self.table)

    @property
    def key(self) -> Hashable:
        """Identifies the table and the connection in a worker's answer cache (kept in memory only)."""
        return (self.node, self.schema, self.table, tuple(sorted(self.connection.conninfo().items())))

    def transact(self, work: Callable[[psycopg.Cursor], T]) -> T:
        """`work(cursor)` in one transaction; transient failures retry for ``retry_timeout_sec``, others fail at
        once, naming the node."""
        return transact(self.connection, self.where, work)


class PostgresWriter:
    """Driver side: creates the table on start and adds values (idempotently, so replays are harmless)."""

    def __init__(self, target: PostgresTable) -> None:
        self.target = target

    def create(self) -> None:
        target = self.target

        def create(cur: psycopg.Cursor) -> None:
            cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (target.schema,))
            if cur.fetchone() is None:  # CREATE SCHEMA IF NOT EXISTS needs CREATE even when it exists
                cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(target.schema)))
            cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (value TEXT PRIMARY KEY)").format(target.qualified))

        target.transact(create)

    def add(self, values: Sequence[str]) -> None:
        """Insert `values` in one transaction, `max_batch_size` per statement; existing ones are skipped."""
        statement = sql.SQL("INSERT INTO {} (value) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING").format(
            self.target.qualified
        )

        def insert(cur: psycopg.Cursor) -> None:
            for chunk in _chunks(values, self.target.max_batch_size):
                cur.execute(statement, (chunk,))

        if values:
            self.target.transact(insert)


@dataclass(frozen=True)
class PostgresLookup:
    """Executor side: the `udf.Lookup` of a Postgres dynamic table."""

    target: PostgresTable

    def contains(self, values: list[str]) -> set[str]:
        ttl = self.target.cache_ttl_ms / 1000
        if ttl <= 0:
            return _query(self.target, values)
        now = time.monotonic()
        with _ANSWERS_LOCK:
            answers = _ANSWERS.setdefault(self.target.key, {})
            found = {v for v in values if (a := answers.get(v)) is not None and a[1] > now and a[0]}
            missing = [v for v in values if (a := answers.get(v)) is None or a[1] <= now]
        if missing:
            present = _query(self.target, missing)
            with _ANSWERS_LOCK:
                _forget_expired(answers, now)
                expires = now + ttl
                answers.update({v: (v in present, expires) for v in missing})
            found |= present
        return found


_ANSWERS: dict[Hashable, dict[str, tuple[bool, float]]] = {}
"""value → (present, expires at) per table, used only when ``cache_ttl_ms`` > 0."""
_ANSWERS_LOCK = threading.Lock()


def _query(target: PostgresTable, values: list[str]) -> set[str]:
    """One SELECT per `max_batch_size` distinct values."""
    statement = sql.SQL("SELECT value FROM {} WHERE value = ANY(%s)").format(target.qualified)

    def attempt() -> set[str]:
        # Autocommit: every lookup reads the latest committed rows, and no transaction stays open.
        found: set[str] = set()
        with connection(target.connection, target.where) as conn, conn.cursor() as cur:
            for chunk in _chunks(values, target.max_batch_size):
                cur.execute(statement, (chunk,))
                found.update(row[0] for row in cur.fetchall())
        return found

    return with_retries(attempt, target.where, target.connection.retry_timeout_sec)


def _forget_expired(answers: dict[str, tuple[bool, float]], now: float) -> None:
    if len(answers) < MAX_CACHED_ANSWERS:
        return
    for value in [v for v, (_, expires) in answers.items() if expires <= now]:
        del answers[value]
    if len(answers) >= MAX_CACHED_ANSWERS:
        answers.clear()


def _chunks(values: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])
