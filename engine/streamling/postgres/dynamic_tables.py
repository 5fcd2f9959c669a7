"""The Postgres backend: a table ``(value TEXT PRIMARY KEY)`` (the column named by `column`) that the pipeline
fills and anyone else may fill too; lookups read it on every batch, so external inserts show up without a
restart.

The driver creates the table and inserts a populating node's values. The executors look values up
through `PostgresLookup`, on a connection of the Python worker's pool (`postgres.connection`, outliving
batches and tasks; autocommit, so every lookup sees the latest committed rows) and, with ``cache_ttl_ms``,
reuse answers for that long.

With a `time_column` (a timestamp every append advances) and ``cache``, each Python worker instead holds the
whole table in memory: loaded once, then topped up with the rows newer than the largest `time_column` it has
seen, checked at most every ``cache_refresh_debounce_ms`` — and at once after this pipeline's own appends, which
the driver announces with a new `PostgresLookup.generation`. Appends take a transaction-scoped advisory lock on
``<schema>.<table>`` and stamp ``clock_timestamp()`` after it, so a later append always has a later time; other
writers must follow the same protocol for the cache to see their rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from streamling.config.model import PostgresSinkSettings
from streamling.errors import StreamlingError
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
    column: str = "value"
    time_column: str | None = None
    cache: bool = False
    """Hold the whole table in each worker (only with a `time_column`)."""
    refresh_ms: float = 1000
    """How long a worker trusts its cached table before asking for newer rows."""

    @property
    def where(self) -> str:
        return f"dynamic table '{self.node}'"

    @property
    def qualified(self) -> sql.Composed:
        return catalog.qualified(self.schema, self.table)

    @property
    def key(self) -> Hashable:
        """Identifies the table and the connection in a worker's answer cache (kept in memory only)."""
        where = (self.node, self.schema, self.table, self.column, self.time_column)
        return (*where, tuple(sorted(self.connection.conninfo().items())))

    @property
    def cached(self) -> bool:
        return self.cache and self.time_column is not None

    @property
    def lock_key(self) -> str:
        """The advisory-lock key every appender takes: the schema-qualified name, as the original's protocol."""
        return f"{self.schema}.{self.table}"

    def transact(self, work: Callable[[psycopg.Cursor], T]) -> T:
        """`work(cursor)` in one transaction; transient failures retry for ``retry_timeout_sec``, others fail at
        once, naming the node."""
        return transact(self.connection, self.where, work)


class PostgresWriter:
    """Driver side: creates the table on start and adds values (idempotently, so replays are harmless)."""

    def __init__(self, target: PostgresTable) -> None:
        self.target = target

    def create(self) -> None:
        """The table when missing: the value column as primary key and, with a `time_column`, that column stamped
        by ``clock_timestamp()``. An existing table must have both columns."""
        target = self.target
        columns = [sql.SQL("{} TEXT PRIMARY KEY").format(sql.Identifier(target.column))]
        if target.time_column is not None:
            stamp = sql.SQL("{} TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()")
            columns.append(stamp.format(sql.Identifier(target.time_column)))

        def create(cur: psycopg.Cursor) -> set[str]:
            from streamling.postgres import catalog

            catalog.lock_ddl(cur, target.schema, target.table)
            cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (target.schema,))
            if cur.fetchone() is None:  # CREATE SCHEMA IF NOT EXISTS needs CREATE even when it exists
                cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(target.schema)))
            cur.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(target.qualified, sql.SQL(", ").join(columns))
            )
            cur.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                (target.schema, target.table),
            )
            return {row[0] for row in cur.fetchall()}

        present = target.transact(create)
        missing = [c for c in (target.column, target.time_column) if c is not None and c not in present]
        if missing:
            raise StreamlingError.user(
                f"{target.where}: table {target.schema}.{target.table} has no column {', '.join(map(repr, missing))}; "
                f"it has {', '.join(sorted(present))} (set 'column' / 'time_column' to its columns)"
            )

    def add(self, values: Sequence[str]) -> None:
        """Insert `values` in one transaction, `max_batch_size` per statement; existing ones are skipped. With a
        `time_column`, under the table's advisory lock and stamped with ``clock_timestamp()`` after it."""
        target = self.target
        if target.time_column is None:
            insert = sql.SQL("INSERT INTO {} ({}) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING")
            statement = insert.format(target.qualified, sql.Identifier(target.column))
        else:
            insert = sql.SQL(
                "INSERT INTO {} ({}, {}) SELECT unnest(%s::text[]), clock_timestamp() ON CONFLICT DO NOTHING"
            )
            statement = insert.format(
                target.qualified, sql.Identifier(target.column), sql.Identifier(target.time_column)
            )

        def insert(cur: psycopg.Cursor) -> None:
            if target.time_column is not None:
                cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (target.lock_key,))
            for chunk in _chunks(values, target.max_batch_size):
                cur.execute(statement, (chunk,))

        if values:
            self.target.transact(insert)


@dataclass(frozen=True)
class PostgresLookup:
    """Executor side: the `udf.Lookup` of a Postgres dynamic table."""

    target: PostgresTable
    generation: int = 0
    """Counts the driver's appends: a cached table older than this is topped up before it answers."""

    def contains(self, values: list[str]) -> set[str]:
        if self.target.cached:
            return _from_cached_table(self, values)
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


@dataclass
class _Loaded:
    """A worker's copy of a cached table."""

    values: set[str]
    latest: Any
    """The largest `time_column` value read so far (None: the table was empty)."""
    checked: float
    generation: int


_LOADED: dict[Hashable, _Loaded] = {}
_LOADED_LOCK = threading.Lock()
"""One top-up at a time per worker: a second thread waits and then answers from the fresh copy."""


def _from_cached_table(lookup: PostgresLookup, values: list[str]) -> set[str]:
    target = lookup.target
    with _LOADED_LOCK:
        loaded = _LOADED.get(target.key)
        now = time.monotonic()
        stale = loaded is None or lookup.generation > loaded.generation
        if stale or now - loaded.checked >= target.refresh_ms / 1000:  # type: ignore[union-attr]
            loaded = _top_up(target, loaded)
            loaded.checked, loaded.generation = now, max(loaded.generation, lookup.generation)
            _LOADED[target.key] = loaded
        present = loaded.values
        return {v for v in values if v in present}


def _top_up(target: PostgresTable, loaded: _Loaded | None) -> _Loaded:
    """`loaded` with the rows stamped after its `latest` (every row when there is no copy yet), read in one
    snapshot together with the new largest stamp."""
    assert target.time_column is not None
    column, stamp = sql.Identifier(target.column), sql.Identifier(target.time_column)
    newest = sql.SQL("SELECT max({}) FROM {}").format(stamp, target.qualified)
    since = loaded.latest if loaded is not None else None
    rows = sql.SQL("SELECT {} FROM {} WHERE {} IS NOT NULL").format(column, target.qualified, column)
    if since is not None:
        rows = sql.SQL("{} AND {} > %s").format(rows, stamp)

    def read(cur: psycopg.Cursor) -> tuple[Any, set[str] | None]:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute(newest)
        latest = cur.fetchone()[0]  # type: ignore[index]
        if loaded is not None and latest == since:
            return latest, None
        cur.execute(rows, (since,) if since is not None else None)
        return latest, {row[0] for row in cur}

    latest, found = target.transact(read)
    if loaded is None:
        return _Loaded(found or set(), latest, 0.0, 0)
    if found is not None:
        loaded.values |= found
        loaded.latest = latest
    return loaded


def _query(target: PostgresTable, values: list[str]) -> set[str]:
    """One SELECT per `max_batch_size` distinct values."""
    column = sql.Identifier(target.column)
    statement = sql.SQL("SELECT {} FROM {} WHERE {} = ANY(%s)").format(column, target.qualified, column)

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
