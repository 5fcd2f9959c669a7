"""Applying one epoch's rows for one write stream: dedupe, COPY into a staging table, one merge per round.

Everything for a stream and epoch happens in one transaction together with its progress row, so the
epoch is either fully applied and recorded or not at all; a retry after a lost connection (or a
replay after a crash) finds the progress row and skips. Runs wherever the rows are: on the driver
for a single stream, inside ``mapInArrow`` tasks for key-hashed parallel streams.

Rows are sent as CSV produced by Arrow's vectorised writer (no per-row Python for scalar columns);
within a batch a key appears at most once per merge round, so ``ON CONFLICT`` never meets the same
row twice ("cannot affect row a second time").
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import sql

from streamling.arrow_keys import int64_array, key_codes, last_rows, occurrences
from streamling.config.model import PostgresSinkSettings
from streamling.core.faults import crash_point
from streamling.core.rows import GS_OP, json_default
from streamling.dead_letters import DeadLetter, DeadLetterTarget, row_letter
from streamling.errors import StreamlingError
from streamling.plugin import Epoch, Written
from streamling.postgres import catalog
from streamling.postgres.connection import connection, reason, with_retries
from streamling.postgres.progress import ProgressKey, already_applied, record
from streamling.postgres.types import Column
from streamling.telemetry.tasks import OFF, NodeRecorder

log = logging.getLogger("streamling.postgres")
EPOCH_COLUMN = "_gs_checkpoint_epoch"
ORDER_COLUMN = "__sl_order"
_ORDER = ORDER_COLUMN


@dataclass(frozen=True)
class WritePlan:
    """Everything a writer needs, built once per run on the driver and shipped to executors."""

    label: str
    connection: PostgresSinkSettings
    schema: str
    table: str
    columns: tuple[Column, ...]
    staging_types: tuple[str, ...]
    keys: tuple[str, ...]
    mode: Literal["upsert", "landing"]
    on_conflict: Literal["update", "nothing"]
    update_where: tuple[tuple[str, str], ...]
    deduplicate: bool
    batch_size: int | None
    progress: ProgressKey
    dead_letter: DeadLetterTarget | None = None
    """With ``on_error: dead_letter``: rows Postgres rejects go there, in the transaction that applies the rest."""
    recorder: NodeRecorder = OFF
    """Where retried writes and rejected rows are reported."""

    @property
    def target(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(self.table))

    @property
    def staging(self) -> sql.Identifier:
        digest = hashlib.sha1(f"{self.schema}.{self.table}".encode()).hexdigest()[:16]
        return sql.Identifier(f"_sl_stage_{digest}")

    @property
    def conflict_keys(self) -> tuple[str, ...]:
        return (*self.keys, GS_OP) if self.mode == "landing" else self.keys


# ---------------------------------------------------------------- preparing rows (pure Arrow)


def merge_rounds(table: pa.Table, keys: tuple[str, ...], deduplicate: bool) -> list[pa.Table]:
    """Split the batch into rounds in which each key occurs once, keeping input order per key.

    With `deduplicate` only the last row per key survives (one round). Without it, round r holds every
    key's r-th occurrence, so applying the rounds in order replays each key's history faithfully."""
    if table.num_rows == 0:
        return []
    codes = key_codes(table, keys)
    if deduplicate:
        return [table.take(int64_array(last_rows(codes)))]
    rank = occurrences(codes)
    if not rank.any():
        return [table]
    return [table.take(int64_array(np.flatnonzero(rank == r))) for r in range(int(rank.max()) + 1)]


def check_keys(table: pa.Table, keys: tuple[str, ...], label: str) -> None:
    for key in keys:
        nulls = table.column(key).null_count
        if nulls:
            raise StreamlingError.user(f"{label}: primary key column '{key}' is NULL in {nulls} row(s)")


def to_csv(table: pa.Table, columns: tuple[Column, ...]) -> bytes:
    """The rows as Postgres CSV: unquoted empty = NULL, quoted empty = ''."""
    arrays = []
    names = []
    for column in columns:
        array = table.column(column.name)
        arrays.append(_csv_ready(array, column))
        names.append(column.name)
    arrays.append(table.column(GS_OP).cast(pa.string()))
    names.append(GS_OP)
    out = io.BytesIO()
    pacsv.write_csv(pa.table(arrays, names=names), out, pacsv.WriteOptions(include_header=False))
    return out.getvalue()


def _csv_ready(array: pa.ChunkedArray, column: Column) -> pa.ChunkedArray | pa.Array:
    if column.is_json:
        values = array.to_pylist()
        return pa.array(
            [None if v is None else json.dumps(_plain(v, column.arrow), default=json_default) for v in values],
            pa.string(),
        )
    if _as_micros(column):
        unit = array.type.unit if isinstance(array.type, pa.TimestampType) else "us"
        micros = array.cast(pa.timestamp("us", array.type.tz)) if unit != "us" else array
        return micros.cast(pa.int64())
    if column.pg == "bytea":
        return pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()], pa.string())
    return array


def _plain(value: Any, arrow: pa.DataType) -> Any:
    """Arrow's Python values → JSON-shaped values (maps become objects)."""
    if value is None:
        return None
    if pa.types.is_map(arrow):
        return {str(k): _plain(v, arrow.item_type) for k, v in value}
    if pa.types.is_struct(arrow):
        return {f.name: _plain(value.get(f.name), f.type) for f in arrow}
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return [_plain(v, arrow.value_type) for v in value]
    return value


# ---------------------------------------------------------------- SQL


def _as_micros(column: Column) -> bool:
    """Timestamps travel as integer microseconds: Arrow formats them as text ~10x slower than integers,
    and Postgres turns them back exactly with ``'epoch' + n * 1µs``."""
    return pa.types.is_timestamp(column.arrow)


def staging_ddl(plan: WritePlan) -> sql.Composed:
    cols = [
        sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL("bigint" if _as_micros(c) else t))
        for c, t in zip(plan.columns, plan.staging_types, strict=True)
    ]
    cols.append(sql.SQL("{} TEXT").format(sql.Identifier(GS_OP)))
    return sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} ({}) ON COMMIT DELETE ROWS").format(
        plan.staging, sql.SQL(", ").join(cols)
    )


def copy_statement(plan: WritePlan) -> sql.Composed:
    names = [c.name for c in plan.columns] + [GS_OP]
    return sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
        plan.staging, sql.SQL(", ").join(map(sql.Identifier, names))
    )


def _value(plan: WritePlan, name: str, alias: str | None = None) -> sql.Composable:
    """A staging column as the target column's value."""
    ref = sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(name)) if alias else sql.Identifier(name)
    for column, target in zip(plan.columns, plan.staging_types, strict=True):
        if column.name == name and _as_micros(column):
            epoch = "TIMESTAMPTZ" if "with time zone" in target else "TIMESTAMP"
            return sql.SQL("{} 'epoch' + {} * INTERVAL '1 microsecond'").format(sql.SQL(epoch), ref)
    return ref


def merge_statements(
    plan: WritePlan, epoch_id: int, has_deletes: bool = True
) -> list[tuple[sql.Composable, tuple[Any, ...]]]:
    ident = sql.Identifier
    names = [c.name for c in plan.columns]
    cols = sql.SQL(", ").join(map(ident, names))
    values = sql.SQL(", ").join(_value(plan, n) for n in names)
    conflict = sql.SQL(", ").join(map(ident, plan.conflict_keys))
    settable = [n for n in names if n not in plan.conflict_keys]
    if plan.mode == "landing":
        insert = sql.SQL(
            "INSERT INTO {t} ({cols}, {op}, {ep}) SELECT {values}, COALESCE({op}, 'i'), %s FROM {s} "
            "ON CONFLICT ({conflict}) DO UPDATE SET {sets}"
        ).format(
            t=plan.target,
            cols=cols,
            values=values,
            op=ident(GS_OP),
            ep=ident(EPOCH_COLUMN),
            s=plan.staging,
            conflict=conflict,
            sets=sql.SQL(", ").join(
                sql.SQL("{c} = EXCLUDED.{c}").format(c=ident(n)) for n in [*settable, EPOCH_COLUMN]
            ),
        )
        return [(counting_upsert(insert), (epoch_id,))]
    matches = sql.SQL(" AND ").join(sql.SQL("t.{} = {}").format(ident(k), _value(plan, k, "s")) for k in plan.keys)
    delete = sql.SQL("DELETE FROM {t} AS t USING {s} AS s WHERE s.{op} = 'd' AND {m}").format(
        t=plan.target, s=plan.staging, op=ident(GS_OP), m=matches
    )
    if plan.on_conflict == "nothing" or not settable:
        action = sql.SQL("DO NOTHING")
    else:
        action = sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=ident(n)) for n in settable)
        )
        if plan.update_where:
            conditions = sql.SQL(" AND ").join(
                sql.SQL("EXCLUDED.{c} {op} t.{c}").format(c=ident(c), op=sql.SQL(op)) for c, op in plan.update_where
            )
            action = sql.SQL("{} WHERE {}").format(action, conditions)
    upsert = sql.SQL("INSERT INTO {t} AS t ({cols}) SELECT {values} FROM {s} {where} ON CONFLICT ({c}) {a}").format(
        t=plan.target,
        cols=cols,
        values=values,
        s=plan.staging,
        where=sql.SQL("WHERE {} IS DISTINCT FROM 'd'").format(ident(GS_OP)) if has_deletes else sql.SQL(""),
        c=conflict,
        a=action,
    )
    upsert = counting_upsert(upsert)
    return [(counting_delete(delete), ()), (upsert, ())] if has_deletes else [(upsert, ())]


def counting_upsert(statement: sql.Composed) -> sql.Composed:
    """The upsert, answering one row ``(inserted, updated, 0)``: a row that ``ON CONFLICT … DO UPDATE`` updated
    has the updating transaction in its ``xmax``, a new row has 0. So the counts are what Postgres did — a
    re-run over rows already there reports updates — and a conflict left alone (``DO NOTHING``, a false
    ``update_where``) is in neither; one row comes back, not one per upserted row."""
    return sql.SQL(
        "WITH changed AS ({} RETURNING (xmax = 0) AS inserted) "
        "SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted), 0 FROM changed"
    ).format(statement)


def counting_delete(statement: sql.Composed) -> sql.Composed:
    """The delete, answering ``(0, 0, deleted)``: a delete of a key that is not there counts nothing."""
    return sql.SQL("WITH changed AS ({} RETURNING 1) SELECT 0, 0, count(*) FROM changed").format(statement)


# ---------------------------------------------------------------- writing


def write_stream(table: pa.Table, plan: WritePlan, epoch: Epoch, stream: int = 0, streams: int = 1) -> Written:
    """Apply `table` (the stream's rows of the epoch, in input order) and record the epoch; returns what Postgres
    did with them (`Written`: the rows it did not change are `unchanged`; for a landing table, the rows by
    ``_gs_op`` as received), nothing when this stream had already applied the epoch."""
    if table.num_rows == 0:
        return Written()
    started = time.perf_counter()
    check_keys(table, plan.keys, plan.label)
    chunks = []
    for round_rows in merge_rounds(table, plan.conflict_keys, plan.deduplicate):
        size = plan.batch_size or round_rows.num_rows
        for i in range(0, round_rows.num_rows, size):
            rows = round_rows.slice(i, size)
            deletes = "d" in pc.unique(rows.column(GS_OP)).to_pylist()  # no Python scalar: see arrow_keys
            chunks.append(Chunk(rows, to_csv(rows, plan.columns), merge_statements(plan, epoch.id, deletes)))
    prepared = time.perf_counter()

    def attempt() -> Written:
        with connection(plan.connection, plan.label) as conn:
            return _write(conn, plan, epoch, stream, streams, chunks, table.num_rows)

    applied = with_retries(
        attempt, plan.label, plan.connection.retry_timeout_sec, on_retry=lambda: plan.recorder.count("retries")
    )
    if plan.mode == "landing" and applied.rows:
        # The aggregate sink's landing table is its staging: what the user's aggregate took in is the changes as
        # received, not how often a landing row was rewritten.
        applied = Written.of(table)
    log.debug(
        "%s: epoch %d stream %d: %d rows, %d chunks; prepared in %.3fs, applied in %.3fs",
        plan.label,
        epoch.id,
        stream,
        table.num_rows,
        len(chunks),
        prepared - started,
        time.perf_counter() - prepared,
    )
    return applied


def _write(
    conn: psycopg.Connection,
    plan: WritePlan,
    epoch: Epoch,
    stream: int,
    streams: int,
    chunks: list[Chunk],
    rows: int,
) -> Written:
    """One attempt on a connection of this thread's own: the chunks and the progress row in one transaction."""
    try:
        with conn.transaction(), conn.cursor() as cur:
            if _skip(cur, plan, epoch, stream, streams):
                return Written()
            cur.execute(staging_ddl(plan))
            done = sum((_apply(cur, plan, chunk.payload, chunk.statements) for chunk in chunks), Written())
            crash_point("during_write", epoch.id)
            record(cur, plan.progress, epoch, stream, streams, rows)
        return done.received(rows)
    except psycopg.Error as exc:
        if not is_row_error(exc):
            raise
    # Some row cannot be stored: find it (and with dead letters every such row) in a new transaction.
    with conn.transaction(), conn.cursor() as cur:
        if _skip(cur, plan, epoch, stream, streams):
            return Written()
        cur.execute(staging_ddl(plan))
        rejected: list[DeadLetter] = []
        done = sum((_apply_isolating(cur, plan, chunk.rows, chunk.statements, rejected) for chunk in chunks), Written())
        if plan.dead_letter is not None:
            plan.dead_letter.deliver(rejected, cur)
            log.warning(
                "%s: epoch %d: %d row(s) rejected by Postgres went to dead-letter %s; first: %s",
                plan.label,
                epoch.id,
                len(rejected),
                plan.dead_letter.where,
                rejected[0].error if rejected else "-",
            )
        crash_point("during_write", epoch.id)
        record(cur, plan.progress, epoch, stream, streams, rows)
    if rejected:  # committed: counted once
        plan.recorder.count("rejected", len(rejected))
        plan.recorder.count("dead_lettered", len(rejected))
    return done.received(rows)


@dataclass(frozen=True)
class Chunk:
    """Rows merged with one COPY and one set of statements."""

    rows: pa.Table
    payload: bytes
    statements: list[tuple[sql.Composable, tuple[Any, ...]]]


def is_row_error(exc: psycopg.Error) -> bool:
    """A data exception (class 22) or an integrity violation (23): some row's values cannot be stored. The
    upsert's own key conflicts never raise (``ON CONFLICT``), so a 23 comes from another constraint."""
    return (exc.sqlstate or "").startswith(("22", "23"))


def _skip(cur: psycopg.Cursor, plan: WritePlan, epoch: Epoch, stream: int, streams: int) -> bool:
    if not already_applied(cur, plan.progress, epoch, stream, streams):
        return False
    log.info("%s: epoch %d of '%s' already applied (stream %d); skipped", plan.label, epoch.id, epoch.source, stream)
    return True


def _apply(cur: psycopg.Cursor, plan: WritePlan, payload: bytes, statements: list) -> Written:  # type: ignore[type-arg]
    """Stage one chunk and merge it; returns what the merge statements did (`counting_upsert`)."""
    cur.execute(sql.SQL("TRUNCATE {}").format(plan.staging))
    with cur.copy(copy_statement(plan)) as copy:
        copy.write(payload)
    done = Written()
    for statement, params in statements:
        cur.execute(statement, params)
        inserts, updates, deletes = cur.fetchone() or (0, 0, 0)
        done += Written(inserts, updates, deletes)
    return done


def _apply_isolating(
    cur: psycopg.Cursor,
    plan: WritePlan,
    rows: pa.Table,
    statements: list,  # type: ignore[type-arg]
    rejected: list[DeadLetter],
) -> Written:
    """Apply `rows` under a savepoint; when Postgres rejects one, retry the halves until single rows fail.
    Without a dead-letter target the first rejected row (in input order) fails the run, naming it."""
    try:
        with cur.connection.transaction():
            return _apply(cur, plan, to_csv(rows, plan.columns), statements)
    except psycopg.Error as exc:
        if not is_row_error(exc):
            raise
        if rows.num_rows > 1:
            half = rows.num_rows // 2
            first = _apply_isolating(cur, plan, rows.slice(0, half), statements, rejected)
            return first + _apply_isolating(cur, plan, rows.slice(half), statements, rejected)
        row = rows.to_pylist()[0]
        problem = rejected_row(plan, row, exc)
        if plan.dead_letter is None:
            table = catalog.qualified(plan.schema, plan.table).as_string()
            raise StreamlingError.user(f"{plan.label} (table {table}): {problem}") from None
        rejected.append(row_letter(problem, row, plan.keys))
        return Written()


EXCERPT = 40
_COPY_COLUMN = re.compile(r"^COPY [^,]+, line \d+, column (.+?): ")


def rejected_row(plan: WritePlan, row: dict[str, Any], exc: psycopg.Error) -> str:
    """Why Postgres rejected `row`, naming the column (when Postgres says which), its type and the row's key;
    the value itself only as a short excerpt, never the whole row."""
    key = ", ".join(f"{k}={_excerpt(row.get(k))}" for k in plan.keys)
    diag = exc.diag
    primary = (diag.message_primary or reason(exc)).strip()
    detail = (diag.message_detail or "").strip()
    if detail and not detail.startswith("Failing row contains"):  # that one repeats the whole row
        primary += f" ({detail})"
    column = diag.column_name
    if column is None:
        found = _COPY_COLUMN.match((diag.context or "").strip())
        column = found.group(1) if found else None
    types = {c.name: t for c, t in zip(plan.columns, plan.staging_types, strict=True)}
    if column not in types:
        return f"row {key}: {primary}"
    value = row.get(column)
    if exc.sqlstate == "22001" and isinstance(value, str):
        holds = f"cannot hold a {len(value)}-character value"
    else:
        holds = f"cannot hold the value {_excerpt(value)}"
    return f'column "{column}" ({types[column]}) {holds} (row {key}): {primary}'


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=json_default)
    return text if len(text) <= EXCERPT else f"{text[:EXCERPT]}… ({len(text)} characters)"


def write_partition(batches: Iterator[pa.RecordBatch], plan: WritePlan, epoch: Epoch, streams: int):  # type: ignore[no-untyped-def]
    """mapInArrow body for parallel streams: this task's partition is stream number `partitionId`; reports
    what the stream applied, as `write_stream` counts it."""
    from pyspark import TaskContext

    context = TaskContext.get()
    stream = context.partitionId() if context is not None else 0
    collected = list(batches)
    if collected:
        table = pa.Table.from_batches(collected).sort_by(_ORDER).drop_columns([_ORDER])
        written = write_stream(table, plan, epoch, stream, streams)
    else:
        written = Written()
    yield pa.RecordBatch.from_pydict({op: [count] for op, count in written.as_dict().items()})
