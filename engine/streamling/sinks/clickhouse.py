"""The ClickHouse sink: a change stream (``_gs_op``) into a ClickHouse table, sent as Arrow.

Writes run on the driver: the micro-batch collects the epoch as Arrow (`stage`), the committer thread
inserts it (the embedded engine exists only in the driver process). Two modes:

- ``append_only_mode: true`` (default): every row is inserted into a
  ``ReplacingMergeTree(insert_time, is_deleted) ORDER BY (<key>)`` with ``is_deleted = 1`` for
  ``_gs_op = 'd'``. ``insert_time`` is a ``DateTime64(6, 'UTC')`` version the sink assigns: the insert
  time in microseconds, raised where needed so it grows strictly from row to row and epoch to epoch
  (``max(now, previous + 1µs)``, seeded from the table's ``max(insert_time)`` at start), so the latest
  change of a key wins even within one insert; ``SELECT … FINAL`` shows the current state. A replayed
  epoch (at-least-once) inserts the same changes again with newer versions, which ends in the same state.
- ``append_only_mode: false``: a plain ``MergeTree ORDER BY (<key>)`` holding exactly the current rows.
  Per insert batch, the last change per key wins; the batch's keys are loaded into a small staging
  table, one synchronous mutation ``ALTER TABLE … DELETE WHERE (key) IN (SELECT … FROM staging)``
  (``mutations_sync = 2``) removes every old row of those keys, and the ``i``/``u`` rows are inserted.
  So an update never leaves its old row behind, a delete removes the key, and a replay converges.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PositiveInt, field_validator
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from streamling.clickhouse.client import describe, get_client, qualified, quote, redact
from streamling.clickhouse.types import (
    Column,
    can_hold,
    check_type_text,
    columns_of,
    is_composite,
    normalize,
    unwrap_nullable,
)
from streamling.config.units import Milliseconds
from streamling.errors import StreamlingError, first_line
from streamling.operators import Epoch, RunContext, Sink, Written, rows_of
from streamling.plugins.registry import operator
from streamling.topology.spec import SinkSpec
from streamling.types import GS_OP, exact_columns

log = logging.getLogger("streamling.clickhouse")
IS_DELETED = "is_deleted"
INSERT_TIME = "insert_time"
VERSION_TYPE = "DateTime64(6, 'UTC')"
Compression = Literal["none", "gzip", "zstd", "lz4"]


class ClickHouseSinkSpec(SinkSpec):
    type: Literal["clickhouse"]
    identity_labels: ClassVar[tuple[str, ...]] = ("table",)
    table: str = Field(min_length=1)
    append_only_mode: bool = True
    schema_override: dict[str, str] | None = None
    compression: Compression = "none"
    compression_level: int = Field(default=6, ge=0, le=9)
    batch_size: PositiveInt | None = None
    batch_flush_interval: Milliseconds | None = None

    @field_validator("compression", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None or value is False:
            return "none"
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("schema_override")
    @classmethod
    def _safe_types(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if not value:
            return value
        checked = {}
        for column, text in value.items():
            try:
                checked[column] = check_type_text(text)
            except ValueError as exc:
                raise ValueError(f"column '{column}': {exc}") from None
        return checked


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@operator("clickhouse", ClickHouseSinkSpec)
class ClickHouseSink(Sink[ClickHouseSinkSpec]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = self.settings.clickhouse_sink
        self.keys: list[str] = []
        self.columns: list[Column] = []
        self.send: list[str] = []
        """Input columns the table has, in input order: what every insert carries."""
        self._client: Any = None
        self._last_version = 0
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"clickhouse sink '{self.name}'"

    @property
    def flush_interval_sec(self) -> float | None:
        interval = self.spec.batch_flush_interval
        return interval / 1000 if interval else None

    @property
    def database(self) -> str:
        return self.connection.database

    @property
    def target(self) -> str:
        return qualified(self.database, self.spec.table)

    @property
    def staging_name(self) -> str:
        return f"_streamling_keys_{self.spec.table}"

    @property
    def staging(self) -> str:
        return qualified(self.database, self.staging_name)

    @property
    def wire_compression(self) -> str | None:
        """The HTTP body encoding of inserts; None for the embedded engine (no wire) and ``none``."""
        if self.connection.url and self.spec.compression != "none":
            return self.spec.compression
        return None

    # ---- validation (never touches ClickHouse) ----

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        if not primary_key:
            return [f"{self.label} requires a primary key"]
        available = [f.name for f in schema.fields if f.name != GS_OP]
        missing = [k for k in primary_key if k not in available]
        if missing:
            return [f"{self.label}: primary key columns {missing} are not in the input"]
        errors = []
        if self.spec.append_only_mode:
            for reserved in (IS_DELETED, INSERT_TIME):
                if reserved in available:
                    errors.append(
                        f"{self.label}: the input has a column '{reserved}', which append_only_mode adds itself; "
                        "rename it in a transform"
                    )
        overrides = self.spec.schema_override or {}
        for column, text in overrides.items():
            if column not in available:
                errors.append(
                    f"{self.label}: schema_override column '{column}' is not in the input; "
                    f"available columns: {', '.join(available)}"
                )
            elif column in primary_key and unwrap_nullable(text)[1]:
                errors.append(
                    f"{self.label}: schema_override makes key column '{column}' {text}; keys cannot be Nullable"
                )
        if errors:
            return errors
        try:
            self.columns = columns_of(schema, primary_key, overrides, skip=(GS_OP,))
        except TypeError as exc:
            return [f"{self.label}: {exc}"]
        for column in self.columns:
            if column.name in primary_key and is_composite(column.ch):
                errors.append(f"{self.label}: key column '{column.name}' has type {column.ch}, which cannot be a key")
        self.keys = list(primary_key)
        return errors

    # ---- start ----

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run a client call; connection problems are retriable, everything else is the user's."""
        from clickhouse_connect.driver.exceptions import OperationalError

        try:
            return fn()
        except StreamlingError:
            raise
        except OperationalError as exc:
            raise StreamlingError.retry(
                f"{self.label}: {what} on {describe(self.connection)} failed: {self._scrub(first_line(exc))}"
            ) from None
        except Exception as exc:
            raise StreamlingError.user(f"{self.label}: {what} failed: {self._scrub(first_line(exc))}") from None

    def _scrub(self, text: str) -> str:
        return redact(text, self.connection)

    def initialize(self, ctx: RunContext) -> None:
        compress = self.wire_compression or False
        if self.spec.compression != "none" and not self.connection.url:
            log.info(
                "%s: compression %s does not apply to the embedded engine (nothing goes over a wire)",
                self.label,
                self.spec.compression,
            )
        self._client = get_client(self.connection, self.label, compress=compress)
        existing = self._describe()
        if not existing:
            self._call(f"creating table {self.target}", lambda: self._client.command(self._create_ddl()))
            existing = self._describe()
            log.info("%s created table %s", self.label, self.target)
        self._verify(existing)
        if self.spec.append_only_mode:
            latest = self._call(
                f"reading max({INSERT_TIME}) of {self.target}",
                lambda: self._client.command(
                    f"SELECT toUnixTimestamp64Micro(max({quote(INSERT_TIME)})) FROM {self.target}"
                ),
            )
            self._last_version = int(latest or 0)
        else:
            types = {c["name"]: unwrap_nullable(c["type"])[0] for c in self._describe()}
            members = ", ".join(f"{quote(k)} {types[k]}" for k in self.keys)
            self._call(
                f"creating staging table {self.staging}",
                lambda: self._client.command(f"CREATE TABLE IF NOT EXISTS {self.staging} ({members}) ENGINE = Memory"),
            )
        log.info(
            "%s writes to %s (%s, key %s)",
            self.label,
            self.target,
            "append-only ReplacingMergeTree" if self.spec.append_only_mode else "mutations",
            ", ".join(self.keys),
        )

    def _describe(self) -> list[dict[str, Any]]:
        query = (
            "SELECT name, type, default_kind, is_in_sorting_key FROM system.columns "
            f"WHERE database = {_literal(self.database)} AND table = {_literal(self.spec.table)} ORDER BY position"
        )
        raw = self._call(f"describing table {self.target}", lambda: self._client.raw_query(query, fmt="JSONEachRow"))
        text = raw.decode() if isinstance(raw, bytes | bytearray) else str(raw)
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _create_ddl(self) -> str:
        columns = [f"{quote(c.name)} {c.ch}" for c in self.columns]
        order = ", ".join(quote(k) for k in self.keys)
        if self.spec.append_only_mode:
            columns += [f"{quote(IS_DELETED)} UInt8", f"{quote(INSERT_TIME)} {VERSION_TYPE}"]
            engine = f"ReplacingMergeTree({quote(INSERT_TIME)}, {quote(IS_DELETED)})"
        else:
            engine = "MergeTree"
        return f"CREATE TABLE IF NOT EXISTS {self.target} ({', '.join(columns)}) ENGINE = {engine} ORDER BY ({order})"

    def _verify(self, existing: list[dict[str, Any]]) -> None:
        """Match the input with an existing table: extra input columns are dropped (logged), key and mode
        columns must exist, types must hold the input's."""
        table = {c["name"]: c for c in existing}
        where = f"table {self.database}.{self.spec.table}"
        problems = []
        for key in self.keys:
            if key not in table:
                problems.append(f"{where} has no column '{key}' (primary key)")
        if self.spec.append_only_mode:
            for name, kind in ((IS_DELETED, "UInt8"), (INSERT_TIME, VERSION_TYPE)):
                have = table.get(name)
                if have is None:
                    problems.append(f"{where} has no column '{name}', which append_only_mode writes")
                elif name == INSERT_TIME and not can_hold(have["type"], kind):
                    problems.append(f"{where} column '{name}' has type {have['type']}; append_only_mode needs {kind}")
                elif name == IS_DELETED and normalize(have["type"]) != "UInt8":
                    problems.append(f"{where} column '{name}' has type {have['type']}; append_only_mode needs UInt8")
        overridden = set(self.spec.schema_override or {})
        nulls_to_default = []
        for column in self.columns:
            have = table.get(column.name)
            if have is None or column.name in overridden:
                continue
            if not can_hold(have["type"], column.ch):
                problems.append(
                    f"{where} column '{column.name}' has type {have['type']}, which cannot hold the input's {column.ch}"
                )
            elif unwrap_nullable(column.ch)[1] and not unwrap_nullable(have["type"])[1]:
                nulls_to_default.append(column.name)
        sent = {c.name for c in self.columns}
        for name, info in table.items():
            if name not in sent and info.get("is_in_sorting_key") and name not in (IS_DELETED, INSERT_TIME):
                problems.append(f"{where} column '{name}' is in the sorting key but not in the input")
        if problems:
            raise StreamlingError.user(f"{self.label}: {'; '.join(problems)}")
        self.send = [c.name for c in self.columns if c.name in table]
        dropped = [c.name for c in self.columns if c.name not in table]
        if dropped:
            log.warning("%s: %s has no columns %s; they are not written", self.label, where, ", ".join(dropped))
        if nulls_to_default:
            log.warning(
                "%s: %s columns %s are not Nullable; NULLs in them are stored as the type's default",
                self.label,
                where,
                ", ".join(nulls_to_default),
            )
        own = {c.name for c in self.columns} | {IS_DELETED, INSERT_TIME}
        unfilled = [n for n, i in table.items() if n not in own and not i.get("default_kind")]
        if unfilled:
            log.info("%s: %s columns %s get their type's default", self.label, where, ", ".join(unfilled))

    # ---- writing ----

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Collect the epoch as Arrow now (Spark); insert it on the committer thread (driver)."""
        assert self._client is not None, "initialize() opens the client"
        table = df.select(*exact_columns([*self.send, GS_OP])).toArrow()
        return lambda: self.deliver(table)

    def deliver(self, table: pa.Table) -> Written:
        """Insert the epoch's rows; returns the rows received by operation (with ``append_only_mode: false``
        more than the last change per key that is applied)."""
        if table.num_rows == 0:
            return Written()
        for key in self.keys:
            nulls = table.column(key).null_count
            if nulls:
                raise StreamlingError.user(f"{self.label}: {nulls} rows have NULL in primary key column '{key}'")
        with self._lock:
            if self.spec.append_only_mode:
                self._append(table)
            else:
                self._mutate(table)
        return Written.of(table)

    def _chunks(self, table: pa.Table):  # type: ignore[no-untyped-def]
        size = self.spec.batch_size or table.num_rows
        for start in range(0, table.num_rows, size):
            yield table.slice(start, size)

    def _append(self, table: pa.Table) -> None:
        n = table.num_rows
        base = max(time.time_ns() // 1000, self._last_version + 1)
        versions = pa.array(base + np.arange(n, dtype=np.int64), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        deleted = pc.fill_null(pc.equal(table.column(GS_OP), "d"), False).cast(pa.uint8())
        rows = table.select(self.send).append_column(IS_DELETED, deleted).append_column(INSERT_TIME, versions)
        for chunk in self._chunks(rows):
            self._insert(self.spec.table, chunk)
        self._last_version = base + n - 1

    def _mutate(self, table: pa.Table) -> None:
        latest = _last_per_key(table, self.keys)
        keys = ", ".join(quote(k) for k in self.keys)
        match = f"({keys})" if len(self.keys) > 1 else keys
        for chunk in self._chunks(latest):
            self._call(f"clearing {self.staging}", lambda: self._client.command(f"TRUNCATE TABLE {self.staging}"))
            self._insert(self.staging_name, chunk.select(self.keys))
            self._call(
                f"deleting changed keys from {self.target}",
                lambda: self._client.command(
                    f"ALTER TABLE {self.target} DELETE WHERE {match} IN (SELECT {keys} FROM {self.staging})",
                    settings={"mutations_sync": 2},
                ),
            )
            upserts = chunk.filter(pc.fill_null(pc.not_equal(chunk.column(GS_OP), "d"), True))
            if upserts.num_rows:
                self._insert(self.spec.table, upserts.select(self.send))

    def _insert(self, name: str, rows: pa.Table) -> None:
        """Table and column names go to the driver quoted: it would pass a dotted table name (`a.b`) or a name
        already in backquotes unquoted into the INSERT."""
        target = qualified(self.database, name)
        names = [quote(c) for c in rows.schema.names]
        body = _arrow_file(rows)
        codec = self.wire_compression
        if codec is not None:
            # clickhouse-connect's insert_arrow sends a gzip client's Arrow uncompressed (it compresses only
            # zstd/lz4 Arrow buffers, at a fixed level), so the sink compresses the Arrow payload itself at the
            # configured level and sends it with Content-Encoding, as the ClickHouse HTTP interface accepts for any
            # format.
            body = _compress(body, codec, self.spec.compression_level)
        self._call(
            f"inserting into {target}",
            lambda: self._client.raw_insert(target, names, body, fmt="Arrow", compression=codec),
        )

    def terminate(self) -> None:
        if self._client is not None and self.connection.url:
            try:
                self._client.close()
            except Exception:
                pass
        self._client = None  # the embedded client is shared by the process and stays open


def _last_per_key(table: pa.Table, keys: list[str]) -> pa.Table:
    """The last row of every key, in input order."""
    order = "__streamling_row"
    indexed = table.select(keys).append_column(order, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = indexed.group_by(keys, use_threads=False).aggregate([(order, "max")]).column(f"{order}_max")
    return table.take(pc.take(last, pc.sort_indices(last)))


def _arrow_file(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


def _compress(data: bytes, codec: str, level: int) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, compresslevel=level, mtime=0)
    if codec == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+
        except ImportError:
            from backports import zstd

        return zstd.compress(data, level=level) if level else zstd.compress(data)
    if codec == "lz4":
        import lz4.frame

        return lz4.frame.compress(data, compression_level=level)
    raise ValueError(codec)
