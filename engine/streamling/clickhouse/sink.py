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
  Per epoch, the last change per key wins; the epoch's keys are loaded into a small staging table of the
  run's own, one synchronous mutation ``ALTER TABLE … DELETE WHERE (key) IN (SELECT … FROM staging)``
  (``mutations_sync = 2``) removes every old row of those keys, and the ``i``/``u`` rows are inserted.
  So an update never leaves its old row behind, a delete removes the key, and a replay converges.

Append-only inserts carry deterministic ``insert_deduplication_token``s, so a replayed epoch is a no-op on a
Replicated table or one with a deduplication window (which the sink gives the tables it creates). A server that
cannot be reached is waited out for ``clickhouse_sink.retry_timeout_sec``, as the Postgres sink does.

Tables made for the original Streamling are written as they are: the version is the ReplacingMergeTree's own
column (``insert_time DateTime DEFAULT now()`` among them), stamped per insert at that column's precision
where it is coarser than microseconds (equal versions: the later insert wins); without an ``is_deleted`` engine
parameter, deletes are applied as the same synchronous mutation after the epoch's other rows. With
``version_column_name`` the version is an input column instead. ``deduplicate`` (default on) keeps only the
last change per key of each epoch; off, every row is written in order (delta tables such as
``SummingMergeTree``). ``parallelism`` splits each epoch into that many key-hashed streams inserted at once,
each on its own connection (servers only; the embedded engine takes one writer).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PositiveInt, field_validator, model_validator

from streamling.arrow_keys import int64_array, key_codes, last_rows
from streamling.clickhouse.client import describe, get_client, qualified, quote, redact
from streamling.clickhouse.objects import named_table_object
from streamling.clickhouse.tables import replacing_parameters
from streamling.clickhouse.types import (
    Column,
    can_hold,
    check_type_text,
    columns_of,
    datetime_digits,
    is_composite,
    normalize,
    unwrap_nullable,
)
from streamling.config.units import Milliseconds
from streamling.core.outage import Outage, wait_out
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, StreamlingUnavailableError, first_line
from streamling.plugin import Epoch, ExternalObject, RunContext, Sink, Written, rows_of
from streamling.spec import SinkSpec, flush_interval, ignored_field
from streamling.types import select_exact

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.clickhouse")
IS_DELETED = "is_deleted"
INSERT_TIME = "insert_time"
VERSION_TYPE = "DateTime64(6, 'UTC')"
DEDUPLICATION_WINDOW = 1000
"""Insert tokens a non-replicated table the sink creates remembers (``non_replicated_deduplication_window``): a
replayed epoch's inserts carry the tokens of their first attempt and are dropped."""
Compression = Literal["none", "gzip", "zstd", "lz4"]


class ClickHouseSinkSpec(SinkSpec):
    type: Literal["clickhouse"]
    identity_labels: ClassVar[tuple[str, ...]] = ("table",)
    table: str = Field(min_length=1)
    append_only_mode: bool = True
    schema_override: dict[str, str] | None = None
    """Also spelled ``schema_overrides``, as the original accepts."""
    compression: Compression | None = None
    """The inserts' wire compression; unset: ``clickhouse_sink.compression`` (default ``none``)."""
    compression_level: int | None = Field(default=None, ge=0, le=9)
    """Its level; unset: ``clickhouse_sink.compression_level`` (default 6)."""
    batch_size: PositiveInt | None = None
    """Rows per insert; default ``clickhouse_sink.batch_size``."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait; default ``clickhouse_sink.batch_flush_interval``."""
    version_column_name: str | None = Field(default=None, min_length=1)
    """An input column that is the ReplacingMergeTree version, instead of the ``insert_time`` the sink stamps."""
    deduplicate: bool = True
    """Only the last change per key of each insert batch is written; off: every row, in order."""
    parallelism: PositiveInt | None = None
    """Key-hashed insert streams per epoch, each on its own connection (a server url only)."""

    @model_validator(mode="before")
    @classmethod
    def _plural_override(cls, data: Any) -> Any:
        if isinstance(data, dict) and "schema_overrides" in data:
            if "schema_override" in data:
                raise ValueError("give 'schema_override' or 'schema_overrides' (the same field), not both")
            data = {("schema_override" if k == "schema_overrides" else k): v for k, v in data.items()}
        return data

    @field_validator("compression", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None:
            return None
        if value is False:
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


class ClickHouseSink(Sink[ClickHouseSinkSpec]):
    spec_model: ClassVar[type[ClickHouseSinkSpec]] = ClickHouseSinkSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = self.settings.clickhouse_sink
        self.keys: list[str] = []
        self.columns: list[Column] = []
        self.send: list[str] = []
        """Input columns the table has, in input order: what every insert carries."""
        self._client: Any = None
        self._clients: list[Any] = []
        """One client per insert stream beyond the first (`parallelism` against a server)."""
        self._last_version = 0
        self._lock = threading.Lock()
        self.version = self.spec.version_column_name or INSERT_TIME
        """The ReplacingMergeTree version column: the sink stamps it unless it is an input column."""
        self.version_unit = 1
        """Microseconds per step of a stamped version: 1 for DateTime64(6+), coarser columns get one value per
        insert."""
        self.deleted: str | None = IS_DELETED
        """The column marking deletes; None: deletes are applied as mutations."""
        self.run_key = uuid.uuid4().hex[:12]
        """Names this run's staging tables: two pipelines (or two runs) writing one table never share one."""
        self._outage = Outage(self.label, "ClickHouse", self.connection.retry_timeout_sec, log)

    @property
    def label(self) -> str:
        return f"clickhouse sink '{self.name}'"

    def writes(self) -> list[ExternalObject]:
        return [named_table_object(self.spec.table, self.database, "clickhouse_sink")]

    @property
    def flush_interval_sec(self) -> float | None:
        interval = self.spec.batch_flush_interval
        return flush_interval(interval if interval is not None else self.connection.batch_flush_interval)

    @property
    def batch_size(self) -> int | None:
        return self.spec.batch_size or self.connection.batch_size

    @property
    def streams(self) -> int:
        """Insert streams per epoch: `parallelism`, against a server; the embedded engine takes one writer."""
        return (self.spec.parallelism or 1) if self.connection.url else 1

    @property
    def stamps_version(self) -> bool:
        return self.spec.append_only_mode and self.version not in self.send

    def warnings(self) -> list[str]:
        out = []
        if self.spec.version_column_name is not None and not self.spec.append_only_mode:
            meaning = "with append_only_mode: false the table holds only current rows and has no version"
            out.append(ignored_field(self.label, "version_column_name", self.spec.version_column_name, meaning))
        if (self.spec.parallelism or 1) > 1 and not self.connection.url:
            meaning = "the embedded engine takes one writer; each epoch is inserted by one stream"
            out.append(ignored_field(self.label, "parallelism", self.spec.parallelism, meaning))
        if GS_OP in (self.spec.schema_override or {}):
            meaning = (
                f"the sink consumes {GS_OP} (inserts and updates become rows, deletes is_deleted rows or DELETE "
                f"mutations) and writes no {GS_OP} column to the table"
            )
            out.append(ignored_field(self.label, f"schema_override.{GS_OP}", self.spec.schema_override[GS_OP], meaning))
        return out

    @property
    def database(self) -> str:
        return self.connection.database

    @property
    def target(self) -> str:
        return qualified(self.database, self.spec.table)

    @property
    def staging_name(self) -> str:
        return f"_streamling_keys_{self.spec.table}_{self.run_key}"

    @property
    def staging(self) -> str:
        return qualified(self.database, self.staging_name)

    @property
    def compression(self) -> str:
        """The node's `compression`, else ``clickhouse_sink.compression`` (the original's global default)."""
        return self.spec.compression if self.spec.compression is not None else self.connection.compression

    @property
    def compression_level(self) -> int:
        level = self.spec.compression_level
        return level if level is not None else self.connection.compression_level

    @property
    def wire_compression(self) -> str | None:
        """The HTTP body encoding of inserts; None for the embedded engine (no wire) and ``none``."""
        if self.connection.url and self.compression != "none":
            return self.compression
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
        version = self.spec.version_column_name
        if self.spec.append_only_mode:
            if version is not None and version not in available:
                errors.append(
                    f"{self.label}: version_column_name '{version}' is not in the input; available columns: "
                    f"{', '.join(available)}"
                )
            for reserved in (IS_DELETED, INSERT_TIME):
                if reserved in available and reserved != version:
                    errors.append(
                        f"{self.label}: the input has a column '{reserved}', which append_only_mode adds itself; "
                        "rename it in a transform"
                    )
        # `_gs_op` is consumed (deletes become is_deleted rows or mutations), never written: its override is
        # accepted for the original's pipelines and reported by `warnings`.
        overrides = {c: t for c, t in (self.spec.schema_override or {}).items() if c != GS_OP}
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
        """Run a client call. A server that cannot be reached (refused, reset, timed out: a restart or a failover)
        is waited out for ``clickhouse_sink.retry_timeout_sec``, as the Postgres sink does, with one WARNING when
        the waiting starts and one INFO when it ends; then the error is retriable. Everything else is the user's.
        Every call is safe to repeat: inserts carry deduplication tokens or converge on the same rows, deletes and
        staging loads are idempotent."""
        return wait_out(
            lambda: self._call_once(what, fn),
            self._outage,
            lambda exc: isinstance(exc, StreamlingUnavailableError),
            lambda exc: exc.message.split(" failed: ", 1)[-1] if isinstance(exc, StreamlingError) else first_line(exc),
        )

    def _call_once(self, what: str, fn: Callable[[], Any]) -> Any:
        from clickhouse_connect.driver.exceptions import OperationalError

        try:
            return fn()
        except StreamlingError:
            raise
        except OperationalError as exc:
            raise StreamlingError.unavailable(
                f"{self.label}: {what} on {describe(self.connection)} failed: {self._scrub(first_line(exc))}"
            ) from None
        except Exception as exc:
            raise StreamlingError.user(f"{self.label}: {what} failed: {self._scrub(first_line(exc))}") from None

    def _scrub(self, text: str) -> str:
        return redact(text, self.connection)

    def initialize(self, ctx: RunContext) -> None:
        compress = self.wire_compression or False
        if self.compression != "none" and not self.connection.url:
            log.info(
                "%s: compression %s does not apply to the embedded engine (nothing goes over a wire)",
                self.label,
                self.compression,
            )
        self._client = get_client(self.connection, self.label, compress=compress)
        existing = self._describe()
        if not existing:
            self._call(f"creating table {self.target}", lambda: self._client.command(self._create_ddl()))
            existing = self._describe()
            log.info("%s created table %s", self.label, self.target)
        self._verify(existing, *self._engine())
        if self.stamps_version:
            latest = self._call(
                f"reading max({self.version}) of {self.target}",
                lambda: self._client.command(
                    f"SELECT toUnixTimestamp64Micro(toDateTime64(max({quote(self.version)}), 6)) FROM {self.target}"
                ),
            )
            self._last_version = int(latest or 0)
        self._clients = [get_client(self.connection, self.label, compress=compress) for _ in range(1, self.streams)]
        if not self.spec.append_only_mode or self.deleted is None:
            types = {c["name"]: unwrap_nullable(c["type"])[0] for c in existing}
            members = ", ".join(f"{quote(k)} {types[k]}" for k in self.keys)
            for stream in range(self.streams):
                staging = qualified(self.database, self._staging_name(stream))
                self._call(
                    f"creating staging table {staging}",
                    lambda s=staging: self._client.command(
                        f"CREATE TABLE IF NOT EXISTS {s} ({members}) ENGINE = Memory"
                    ),
                )
        mode = "mutations"
        if self.spec.append_only_mode:
            stamped = "" if self.stamps_version else ", input version"
            deletes = "" if self.deleted else ", deletes as mutations"
            mode = f"append-only ReplacingMergeTree by {self.version}{stamped}{deletes}"
        log.info("%s writes to %s (%s, key %s)", self.label, self.target, mode, ", ".join(self.keys))

    def _engine(self) -> tuple[str, str]:
        """The table's engine and full engine clause, from ``system.tables`` (empty when not told)."""
        query = "SELECT engine, engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}"
        raw = self._call(
            f"describing table {self.target}",
            lambda: self._client.raw_query(query, parameters=self._table_parameters, fmt="JSONEachRow"),
        )
        text = raw.decode() if isinstance(raw, bytes | bytearray) else str(raw)
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return (rows[0].get("engine", ""), rows[0].get("engine_full", "")) if rows else ("", "")

    @property
    def _table_parameters(self) -> dict[str, str]:
        """The target's names as query parameters of the ``system`` tables' look-ups (values, never SQL text)."""
        return {"db": self.database, "t": self.spec.table}

    def _describe(self) -> list[dict[str, Any]]:
        query = (
            "SELECT name, type, default_kind, is_in_sorting_key FROM system.columns "
            "WHERE database = {db:String} AND table = {t:String} ORDER BY position"
        )
        raw = self._call(
            f"describing table {self.target}",
            lambda: self._client.raw_query(query, parameters=self._table_parameters, fmt="JSONEachRow"),
        )
        text = raw.decode() if isinstance(raw, bytes | bytearray) else str(raw)
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _create_ddl(self) -> str:
        columns = [f"{quote(c.name)} {c.ch}" for c in self.columns]
        order = ", ".join(quote(k) for k in self.keys)
        if self.spec.append_only_mode:
            columns.append(f"{quote(IS_DELETED)} UInt8")
            if self.spec.version_column_name is None:
                columns.append(f"{quote(INSERT_TIME)} {VERSION_TYPE}")
            engine = f"ReplacingMergeTree({quote(self.version)}, {quote(IS_DELETED)})"
            settings = f" SETTINGS non_replicated_deduplication_window = {DEDUPLICATION_WINDOW}"
        else:
            engine, settings = "MergeTree", ""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.target} ({', '.join(columns)}) ENGINE = {engine} ORDER BY ({order})"
            + settings
        )

    def _verify(self, existing: list[dict[str, Any]], engine: str = "", engine_full: str = "") -> None:
        """Match the input with an existing table: extra input columns are dropped (logged), key and mode
        columns must exist, types must hold the input's. A ReplacingMergeTree names the version and delete
        columns itself."""
        table = {c["name"]: c for c in existing}
        where = f"table {self.database}.{self.spec.table}"
        problems = []
        for key in self.keys:
            if key not in table:
                problems.append(f"{where} has no column '{key}' (primary key)")
        if self.spec.append_only_mode:
            problems += self._version_problems(table, where, engine, engine_full)
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
        stamped = {self.version, self.deleted} if self.spec.append_only_mode else set()
        for name, info in table.items():
            if name not in sent and info.get("is_in_sorting_key") and name not in stamped:
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
        own = {c.name for c in self.columns} | stamped
        unfilled = [n for n, i in table.items() if n not in own and not i.get("default_kind")]
        if unfilled:
            log.info("%s: %s columns %s get their type's default", self.label, where, ", ".join(unfilled))

    def _version_problems(self, table: dict[str, Any], where: str, engine: str, engine_full: str) -> list[str]:
        """Settle the version and delete columns of an append-only table; what does not fit."""
        version, is_deleted = replacing_parameters(engine, engine_full)
        problems = []
        wanted = self.spec.version_column_name
        if wanted is not None and version is not None and version != wanted:
            problems.append(f"{where} is versioned by '{version}', but version_column_name is '{wanted}'")
        if wanted is not None and wanted not in table:
            problems.append(f"{where} has no column '{wanted}' (version_column_name)")
        self.version = wanted or version or INSERT_TIME
        replacing = "ReplacingMergeTree" in engine
        self.deleted = is_deleted if replacing and is_deleted else (None if replacing else IS_DELETED)
        if self.deleted is not None:
            have = table.get(self.deleted)
            if have is None:
                problems.append(f"{where} has no column '{self.deleted}', which append_only_mode writes")
            elif normalize(have["type"]) != "UInt8":
                kind = have["type"]
                problems.append(f"{where} column '{self.deleted}' has type {kind}; append_only_mode needs UInt8")
        if wanted is None and self.version not in {c.name for c in self.columns}:
            have = table.get(self.version)
            digits = datetime_digits(have["type"]) if have else None
            if have is None:
                problems.append(f"{where} has no column '{self.version}', which append_only_mode writes")
            elif digits is None:
                problems.append(
                    f"{where} column '{self.version}' has type {have['type']}; append_only_mode stamps a DateTime or "
                    "DateTime64 version (or set version_column_name to an input column)"
                )
            else:
                self.version_unit = 10 ** max(0, 6 - digits)
        return problems

    # ---- writing ----

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Collect the epoch as Arrow now (Spark); insert it on the committer thread (driver)."""
        assert self._client is not None, "initialize() opens the client"
        table = select_exact(df, [*self.send, GS_OP]).toArrow()
        return lambda: self.deliver(table, epoch)

    def deliver(self, table: pa.Table, epoch: Epoch | None = None) -> Written:
        """Insert the epoch's rows; returns the rows received by operation (with ``deduplicate`` more than the
        last change per key that is applied). `epoch` names the inserts' deduplication tokens."""
        if table.num_rows == 0:
            return Written()
        for key in self.keys:
            nulls = table.column(key).null_count
            if nulls:
                raise StreamlingError.user(f"{self.label}: {nulls} rows have NULL in primary key column '{key}'")
        with self._lock:
            streams = self._split(self._stamped(table) if self.stamps_version else table)
            clients = [self._client, *self._clients]
            if len(streams) == 1:
                self._write(streams[0], clients[0], 0, epoch)
            else:
                with ThreadPoolExecutor(len(streams), thread_name_prefix=f"streamling-ch-{self.name}") as pool:
                    done = [pool.submit(self._write, rows, clients[i], i, epoch) for i, rows in enumerate(streams)]
                    for future in done:
                        future.result()
        return Written.of(table)

    def _stamped(self, table: pa.Table) -> pa.Table:
        """`table` with its version column: strictly increasing microseconds (``max(now, previous + 1)``) for a
        microsecond column; for a coarser one (``DateTime``) one non-decreasing value per epoch, in the column's
        unit, since ClickHouse keeps the later insert of equal versions."""
        n, unit = table.num_rows, self.version_unit
        now = time.time_ns() // 1000
        if unit == 1:
            base = max(now, self._last_version + 1)
            stamps = base + np.arange(n, dtype=np.int64)
            self._last_version = base + n - 1
            return table.append_column(self.version, pa.array(stamps).cast(pa.timestamp("us", tz="UTC")))
        stamp = max(now // unit * unit, self._last_version)
        self._last_version = stamp
        arrow = pa.timestamp("s", tz="UTC") if unit == 1_000_000 else pa.timestamp("us", tz="UTC")
        value = stamp // 1_000_000 if unit == 1_000_000 else stamp
        return table.append_column(self.version, pa.array(np.full(n, value, dtype=np.int64)).cast(arrow))

    def _split(self, table: pa.Table) -> list[pa.Table]:
        """`parallelism` streams, hashed by key (each key's rows stay in one stream, in order)."""
        n = self.streams
        if n == 1 or table.num_rows == 0:
            return [table]
        text = [pc.cast(table.column(k).combine_chunks(), pa.string()) for k in self.keys]
        joined = text[0] if len(text) == 1 else pc.binary_join_element_wise(*text, "\x1f")
        stream = pc.dictionary_encode(joined).indices.to_numpy(zero_copy_only=False) % n
        return [table.filter(pa.array(stream == i)) for i in range(n) if (stream == i).any()]

    def _chunks(self, table: pa.Table) -> Iterator[pa.Table]:
        size = self.batch_size or table.num_rows
        for start in range(0, table.num_rows, size):
            yield table.slice(start, size)

    def _write(self, rows: pa.Table, client: Any, stream: int, epoch: Epoch | None) -> None:
        """One stream's part of the epoch. With ``deduplicate``, the last change per key of the whole epoch; then
        at most one mutation for the epoch (not one per insert batch), and the inserts in `batch_size` chunks."""
        if self.spec.deduplicate:
            by_version = self.spec.append_only_mode and self.spec.version_column_name is not None
            rows = _last_per_key(rows, self.keys, self.version if by_version else None)
        if not self.spec.append_only_mode and not self.spec.deduplicate:
            for chunk in self._chunks(rows):
                self._in_order(chunk, client, stream)
            return
        is_delete = pc.fill_null(pc.equal(rows.column(GS_OP), "d"), False)
        if self.spec.append_only_mode and self.deleted is not None:
            # Inserts only, each an atomic block: a replay repeats them with the same tokens.
            data = rows.select(self.send).append_column(self.deleted, is_delete.cast(pa.uint8()))
            if self.stamps_version:
                data = data.append_column(self.version, rows.column(self.version))
            for index, chunk in enumerate(self._chunks(data)):
                self._insert(self.spec.table, chunk, client, token=self._token(epoch, stream, index, chunk))
            return
        upserts = rows.filter(pc.invert(is_delete))
        if self.spec.append_only_mode:
            # No is_deleted column: the changes go in as rows, then the keys whose last change is a delete go.
            columns = self.send + ([self.version] if self.stamps_version else [])
            for chunk in self._chunks(upserts.select(columns)):
                self._insert(self.spec.table, chunk, client)
            last = rows if self.spec.deduplicate else _last_per_key(rows, self.keys)
            gone = last.filter(pc.fill_null(pc.equal(last.column(GS_OP), "d"), False))
            if gone.num_rows:
                self._delete_keys(gone, client, stream)
            return
        # A plain MergeTree: every old row of the epoch's keys goes in one mutation, then the i/u rows go in.
        self._delete_keys(rows, client, stream)
        for chunk in self._chunks(upserts.select(self.send)):
            self._insert(self.spec.table, chunk, client)

    def _token(self, epoch: Epoch | None, stream: int, index: int, chunk: pa.Table) -> str | None:
        """A deterministic ``insert_deduplication_token``: application, sink, table, source, epoch, stream and chunk,
        and a digest of the chunk's rows but its stamped version (a replay stamps newer ones). A replay that reads
        the same rows gets the same tokens, so a Replicated table, or one with a deduplication window (the tables
        the sink creates), drops it; one whose rows differ is written, never lost."""
        if epoch is None:
            return None
        content = chunk.drop_columns([self.version]) if self.stamps_version else chunk
        digest = hashlib.blake2b(_arrow_file(content), digest_size=12).hexdigest()
        where = f"{self.settings.application_id}:{self.name}:{self.target}"
        return f"streamling:{where}:{epoch.source}:{epoch.id}:{stream}:{index}:{digest}"

    def _in_order(self, chunk: pa.Table, client: Any, stream: int) -> None:
        """``deduplicate: false``: runs of deletes remove their keys, runs of ``i``/``u`` rows are inserted as
        they are, in input order."""
        is_delete = pc.fill_null(pc.equal(chunk.column(GS_OP), "d"), False).to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(is_delete[1:] != is_delete[:-1]) + 1).tolist(), chunk.num_rows]
        for start, end in itertools.pairwise(cuts):
            run = chunk.slice(start, end - start)
            if is_delete[start]:
                self._delete_keys(run, client, stream)
            else:
                self._insert(self.spec.table, run.select(self.send), client)

    def _staging_name(self, stream: int) -> str:
        return self.staging_name if stream == 0 else f"{self.staging_name}_{stream}"

    def _delete_keys(self, rows: pa.Table, client: Any, stream: int) -> None:
        """One synchronous mutation deleting every row of `rows`' keys, the keys loaded into a staging table."""
        keys = ", ".join(quote(k) for k in self.keys)
        match = f"({keys})" if len(self.keys) > 1 else keys
        staging = qualified(self.database, self._staging_name(stream))
        self._call(f"clearing {staging}", lambda: client.command(f"TRUNCATE TABLE {staging}"))
        self._insert(self._staging_name(stream), rows.select(self.keys), client)
        self._call(
            f"deleting keys from {self.target}",
            lambda: client.command(
                f"ALTER TABLE {self.target} DELETE WHERE {match} IN (SELECT {keys} FROM {staging})",
                settings={"mutations_sync": 2},
            ),
        )

    def _insert(self, name: str, rows: pa.Table, client: Any = None, token: str | None = None) -> None:
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
            body = _compress(body, codec, self.compression_level)
        settings = {"insert_deduplication_token": token} if token else None
        self._call(
            f"inserting into {target}",
            lambda: (client or self._client).raw_insert(
                target, names, body, fmt="Arrow", compression=codec, settings=settings
            ),
        )

    def terminate(self) -> None:
        if self._client is not None and (not self.spec.append_only_mode or self.deleted is None):
            for stream in range(self.streams):  # this run's staging tables; best effort (Memory tables)
                staging = qualified(self.database, self._staging_name(stream))
                try:
                    self._client.command(f"DROP TABLE IF EXISTS {staging}")
                except Exception as exc:
                    log.debug("%s: cannot drop %s: %s", self.label, staging, self._scrub(first_line(exc)))
        if self.connection.url:
            for client in [self._client, *self._clients]:
                try:
                    if client is not None:
                        client.close()
                except Exception:
                    pass
        self._client, self._clients = None, []  # the embedded client is shared by the process and stays open


def _last_per_key(table: pa.Table, keys: list[str], version: str | None = None) -> pa.Table:
    """The last row of every key, in input order; with a `version` column, the row with the highest version
    (the last of equal ones), as the ReplacingMergeTree would keep."""
    if version is not None:
        ranked = pa.table({"v": table.column(version), "o": int64_array(np.arange(table.num_rows))})
        order = pc.sort_indices(ranked, sort_keys=[("v", "ascending", "at_start"), ("o", "ascending", "at_start")])
        table = table.take(order)
    return table.take(int64_array(last_rows(key_codes(table, keys))))


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
