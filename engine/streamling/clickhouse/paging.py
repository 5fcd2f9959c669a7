"""Reading a ClickHouse table page by page in sorting-key order: every row once, bounded memory, no OFFSET.

When the first sorting key is a number, date or date-time, pages are ranges of it: a range is counted
first and halved while it holds more than `page_size` rows (and widened after sparse ones); a single
key value holding more than a page — a hot key — is paged on the remaining sort keys with a full-tuple
cursor. Other first keys are paged by full-tuple cursor from the start. ``LIMIT … WITH TIES`` keeps
rows with equal sort tuples on one page.

Positions (JSON, committed to the state backend):
- range mode: ``{"from": n}`` — next rows have key ≥ n; ``{"from": n, "key": [...]}`` — inside hot key n,
  after that full sort-key tuple;
- tuple mode: ``{"key": [...] | null, "min": start_at | null}``.

ReplacingMergeTree tables are read with FINAL semantics per page: the latest version per sort key, a
delete winning a version tie, deleted keys dropped — whether or not the version column is selected.

Page and count queries run with ``max_execution_time`` = `timeout_sec` (``clickhouse_source.query_timeout_sec``):
a range that takes longer is read again at half the width; a page that cannot shrink (one key value, or
tuple mode) fails the run with a retriable error.

Every value that comes from outside ClickHouse — a cursor's key text, `start_at`, range bounds, the page size — is
a server-side query parameter (``{name:Type}``, `Params`), which clickhouse-connect binds for a server and the
embedded engine alike. What is written into the text is either ClickHouse's own (a column's type as
``system.columns`` gives it, a decimal column's scale) or an identifier, always quoted (`client.quote`), the
pager's own aliases included. A key holding quotes or backslashes is a value like any other.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import Any

import pyarrow as pa

from streamling.clickhouse.client import qualified, quote
from streamling.clickhouse.tables import ColumnInfo, TableInfo, select_expression
from streamling.config.model import BackfillRange
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError

log = logging.getLogger("streamling.clickhouse")

RANGE_TYPES = ("Int", "UInt", "Date", "DateTime")
_KEY = "__sl_key_"
"""A page's cursor columns, ``__sl_key_<i>``: the sort keys as text, dropped before the page is handed on."""
_DELETED = "__sl_deleted"
"""The latest version's ``is_deleted`` of a ReplacingMergeTree row (`Pager._final_rows`)."""
_ROWS = "__sl_t"
"""The table's alias inside `Pager._final_rows`, so arguments name its columns rather than the aggregates."""


class Params(dict[str, Any]):
    """One query's parameters, filled while its text is built: `bind` adds a value and returns its placeholder."""

    def bind(self, value: Any, kind: str) -> str:
        name = f"p{len(self)}"
        self[name] = value
        return f"{{{name}:{kind}}}"


def is_timeout(exc: BaseException) -> bool:
    """ClickHouse's TIMEOUT_EXCEEDED (code 159): the query ran past ``max_execution_time``."""
    text = str(exc)
    return "TIMEOUT_EXCEEDED" in text or "Code: 159." in text


def key_bounds(info: TableInfo, wanted: BackfillRange, where: str) -> tuple[int, int]:
    """`wanted` as [low, high) of the first sort key's ``toInt64`` value, the pager's range space: integers as
    they are, date-times as Unix seconds, dates as days (a date is in the range when its midnight is, in the
    range's own time zone). Numbers computed here, never text pasted into SQL."""
    key = info.sorting_key[0]
    base = info.column(key).base
    table = f"{info.database}.{info.table}"
    if not base.startswith(RANGE_TYPES):
        raise StreamlingError.user(
            f"{where}: backfill_range needs a first sort key of integer, date or date-time type; {table} is sorted "
            f"by {key} ({info.column(key).type})"
        )
    if wanted.column is not None and wanted.column != key:
        raise StreamlingError.user(
            f"{where}: backfill_range column '{wanted.column}' is not the first sort key of {table} ('{key}')"
        )
    timed = base.startswith("Date")
    if timed != wanted.by_time:
        kind = "date-times" if wanted.by_time else "integers"
        raise StreamlingError.user(
            f"{where}: backfill_range {wanted} holds {kind}, but {table} is sorted by {key} ({info.column(key).type})"
        )
    if not timed:
        return int(wanted.start), int(wanted.end)  # type: ignore[arg-type]
    assert isinstance(wanted.start, datetime) and isinstance(wanted.end, datetime)
    if base.startswith("DateTime"):
        return math.ceil(wanted.start.timestamp()), math.ceil(wanted.end.timestamp())
    return _day(wanted.start), _day(wanted.end)


def _day(moment: datetime) -> int:
    """The first date whose midnight (in `moment`'s zone) is at or after `moment`, as days since 1970-01-01."""
    day = moment.date() + (timedelta(days=1) if moment.time() != datetime.min.time() else timedelta())
    return (day - date(1970, 1, 1)).days


@dataclass
class Pager:
    """Pages of `columns` of the table `info` describes; both are fixed for the pager's life (what is derived from
    them, such as `range_mode` and the select list, is computed once)."""

    client: Any
    info: TableInfo
    columns: list[ColumnInfo]
    filter: str | None
    page_size: int
    width: int
    start_at: str | None = None
    max_num: int | None = field(default=None)
    timeout_sec: float | None = None
    bounds: tuple[int, int] | None = None
    """[low, high) of the first key's number (`key_bounds`): a backfill of that range only (range mode)."""

    @property
    def keys(self) -> tuple[str, ...]:
        return self.info.sorting_key

    @cached_property
    def range_mode(self) -> bool:
        return self.info.column(self.keys[0]).base.startswith(RANGE_TYPES)

    @cached_property
    def _outputs(self) -> str:
        """The selected columns, each converted to its Spark field's Arrow type (`select_expression`)."""
        return ", ".join(select_expression(c) for c in self.columns)

    def _num(self) -> str:
        return f"toInt64({quote(self.keys[0])})"

    def _key_type(self, name: str) -> str:
        return self.info.column(name).type

    # ------------------------------------------------------------ positions

    def initial(self) -> dict[str, Any]:
        if not self.range_mode:
            return {"key": None, "min": self.start_at}
        params = Params()
        if self.start_at is None:
            sql = f"SELECT min({self._num()}) FROM {self._table}{self._within(params)}"
            first = int(self._query(sql, params)[0][0] or 0)
        else:
            cast = f"CAST({params.bind(self.start_at, 'String')} AS {self._key_type(self.keys[0])})"
            first = int(self._query(f"SELECT toInt64({cast})", params)[0][0])
        return {"from": max(first, self.bounds[0]) if self.bounds else first}

    def snapshot(self) -> None:
        """The end of a bounded read: the largest first key now (rows added later past it are not read)."""
        if self.range_mode:
            params = Params()
            sql = f"SELECT max({self._num()}), count() FROM {self._table}{self._within(params)}"
            value = self._query(sql, params)[0]
            self.max_num = int(value[0]) if value[1] else None

    def _within(self, params: Params) -> str:
        if self.bounds is None:
            return ""
        return f" WHERE {self._range(params, self.bounds[0], self.bounds[1])}"

    def _range(self, params: Params, low: int, high: int) -> str:
        """[low, high) of the first key's number."""
        low_value, high_value = params.bind(int(low), "Int64"), params.bind(int(high), "Int64")
        return f"{self._num()} >= {low_value} AND {self._num()} < {high_value}"

    def _query(self, sql: str, params: Params, **settings: Any) -> list[Any]:
        return self.client.query(sql, parameters=params or None, settings=settings or None).result_rows

    def exhausted(self, position: Mapping[str, Any]) -> bool:
        if not self.range_mode:
            return bool(position.get("done"))
        return self.max_num is None or (int(position["from"]) > self.max_num and position.get("key") is None)

    # ------------------------------------------------------------ reading

    @property
    def _table(self) -> str:
        return qualified(self.info.database, self.info.table)

    def next_page(self, start: Mapping[str, Any]) -> tuple[pa.Table, dict[str, Any]] | None:
        """The next page after `start` and the position at its end; None when nothing is left."""
        params = Params()
        if not self.range_mode:
            table = self._read(params, self._lower(start, params), None, limit=self.page_size)
            if table.num_rows == 0:
                return None
            return self._output(table), {"key": self._last_key(table), "min": start.get("min")}
        if start.get("key") is not None:  # inside a hot key
            low = int(start["from"])
            inside = f"{self._num()} = {params.bind(low, 'Int64')}"
            table = self._read(params, self._lower(start, params), inside, limit=self.page_size)
            if table.num_rows >= self.page_size:
                return self._output(table), {"from": low, "key": self._last_key(table)}
            if table.num_rows:
                return self._output(table), {"from": low + 1}
            start = {"from": low + 1}
        low = int(start["from"])
        if self.max_num is None or low > self.max_num:
            return None
        width = self.width
        while low <= self.max_num:
            high = min(low + width, self.max_num + 1)
            try:
                count = self._count(low, high)
                if count == 0:
                    low, width = high, width * 2
                    continue
                if count <= self.page_size:
                    params = Params()
                    table = self._read(params, self._range(params, low, high), None)
                    self.width = width * 2 if count < self.page_size // 2 else width
                    return self._output(table), {"from": high}
            except Exception as exc:
                if not is_timeout(exc):
                    raise
                if high - low <= 1:
                    raise self._too_slow() from None
                width = max(1, (high - low) // 2)
                log.warning(
                    "%s: the range [%d, %d) took longer than query_timeout_sec (%gs); reading it at width %d",
                    self._table,
                    low,
                    high,
                    self.timeout_sec,
                    width,
                )
                continue
            if high - low > 1:
                width = max(1, (high - low) * self.page_size // count)
                continue
            # one key value holds more than a page: page through it on the remaining sort keys
            params = Params()
            table = self._read(params, f"{self._num()} = {params.bind(low, 'Int64')}", None, limit=self.page_size)
            if table.num_rows >= self.page_size:
                return self._output(table), {"from": low, "key": self._last_key(table)}
            return self._output(table), {"from": low + 1}
        return None

    def read_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> pa.Table:
        """Exactly the rows of an epoch that ran from `start` to `end` (a replay after a crash)."""
        params = Params()
        return self._output(self._read(params, self._lower(start, params), self._upper(end, params)))

    def _lower(self, start: Mapping[str, Any], params: Params) -> str | None:
        key = start.get("key")
        if not self.range_mode:
            if key is not None:
                return self._tuple_after(list(self.keys), key, params)
            if start.get("min") is not None:
                first = self.keys[0]
                return f"{quote(first)} >= CAST({params.bind(start['min'], 'String')} AS {self._key_type(first)})"
            return None
        low = params.bind(int(start["from"]), "Int64")
        if key is None:
            return f"{self._num()} >= {low}"
        inside = f"{self._num()} = {low} AND {self._tuple_after(list(self.keys), key, params)}"
        return f"(({inside}) OR {self._num()} > {low})"

    def _upper(self, end: Mapping[str, Any], params: Params) -> str | None:
        key = end.get("key")
        if not self.range_mode:
            return None if key is None else f"NOT ({self._tuple_after(list(self.keys), key, params)})"
        high = params.bind(int(end["from"]), "Int64")
        if key is None:
            return f"{self._num()} < {high}"
        inside = f"{self._num()} = {high} AND NOT ({self._tuple_after(list(self.keys), key, params)})"
        return f"(({inside}) OR {self._num()} < {high})"

    def _tuple_after(self, names: list[str], values: list[str], params: Params) -> str:
        """The sort tuple after a cursor's key (each value as ``toString`` printed it, cast back to its column's
        type in ClickHouse, so it compares in the column's own order)."""
        cols = ", ".join(quote(n) for n in names)
        vals = ", ".join(
            f"CAST({params.bind(v, 'String')} AS {self._key_type(n)})" for n, v in zip(names, values, strict=True)
        )
        return f"tuple({cols}) > tuple({vals})"

    def _settings(self) -> dict[str, Any]:
        return {"max_execution_time": self.timeout_sec} if self.timeout_sec else {}

    def _count(self, low: int, high: int) -> int:
        params = Params()
        sql = f"SELECT count() FROM {self._table} WHERE {self._range(params, low, high)}"
        return int(self._query(sql, params, **self._settings())[0][0])

    def _read(self, params: Params, lower: str | None, upper: str | None, limit: int | None = None) -> pa.Table:
        """Rows matching `lower` and `upper` (fragments whose values are in `params`), in sort-key order."""
        where = " AND ".join(c for c in (lower, upper) if c) or "1"
        keys = ", ".join(quote(k) for k in self.keys)
        inner = self._final_rows(where)
        # Quoted aliases name the same Arrow columns as bare ones would (`_last_key`, `_output`).
        cursor = [f"toString({quote(k)}) AS {quote(f'{_KEY}{i}')}" for i, k in enumerate(self.keys)]
        deleted = quote(_DELETED) if self.info.is_deleted else "0"
        sql = (
            f"SELECT {self._outputs}, if({deleted} = 1, 'd', 'i') AS {quote(GS_OP)}, {', '.join(cursor)} "
            f"FROM ({inner}) WHERE {deleted} = 0"
            + (f" AND ({self.filter})" if self.filter else "")
            + f" ORDER BY {keys}"
            + (f" LIMIT {params.bind(int(limit), 'UInt64')} WITH TIES" if limit else "")
        )
        try:
            return self.client.query_arrow(sql, parameters=params or None, settings=self._settings())
        except Exception as exc:
            if is_timeout(exc) and (limit or not self.range_mode):
                raise self._too_slow() from None
            raise

    def _too_slow(self) -> StreamlingError:
        return StreamlingError.retry(
            f"a page of {self._table} took longer than clickhouse_source.query_timeout_sec ({self.timeout_sec:g}s) "
            "and cannot be made smaller (one sort-key value, or a table paged by its full sort key); raise "
            "query_timeout_sec"
        )

    def _final_rows(self, where: str) -> str:
        """Rows of the range with ReplacingMergeTree FINAL semantics, all columns available to the filter."""
        keys = ", ".join(quote(k) for k in self.keys)
        if not self.info.replacing:
            return f"SELECT * FROM {self._table} WHERE {where}"
        if self.info.version is None:
            return f"SELECT * FROM {self._table} FINAL WHERE {where}"
        # Arguments name the table's columns (`__sl_t.x`), not the aggregates aliased with the same names.
        rows = quote(_ROWS)
        deleted = f"{rows}.{quote(self.info.is_deleted)}" if self.info.is_deleted else "0"
        order = f"({rows}.{quote(self.info.version)}, {deleted})"
        values = [
            f"argMax({rows}.{quote(c.name)}, {order}) AS {quote(c.name)}"
            for c in self.info.columns
            if c.name not in self.keys
        ]
        if self.info.is_deleted:
            values.append(f"argMax({deleted}, {order}) AS {quote(_DELETED)}")
        return f"SELECT {keys}, {', '.join(values)} FROM {self._table} AS {rows} WHERE {where} GROUP BY {keys}"

    def _last_key(self, table: pa.Table) -> list[str]:
        return [table.column(f"{_KEY}{i}")[-1].as_py() for i in range(len(self.keys))]

    def _output(self, table: pa.Table) -> pa.Table:
        return table.drop_columns([f"{_KEY}{i}" for i in range(len(self.keys))])
