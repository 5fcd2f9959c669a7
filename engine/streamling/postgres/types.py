"""Arrow/Spark column types → Postgres column types, and whether an existing column can hold them.

The mapping is defined once, on Arrow types (what the writer actually sends); Spark schemas are
converted to Arrow first, carrying the wide-number marker that keeps 256-bit integers and wide decimals
exact: ``u256``/``i256`` → ``numeric(78,0)``, ``decimal(p,s)`` → ``numeric(p,s)`` (unconstrained ``numeric``
past Postgres' 1000 digits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from streamling.core.markers import WIDE_DECIMAL_KEY, wide_type

if TYPE_CHECKING:
    from pyspark.sql import types as T

WIDE_NUMERIC = "numeric(78,0)"
PG_MAX_PRECISION = 1000
"""Postgres' widest constrained ``numeric``; wider decimals go into an unconstrained ``numeric``."""
_INT_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}
_DECIMAL = re.compile(r"^(?:decimal|numeric)\((\d+),\s*(\d+)\)$")


@dataclass(frozen=True)
class Column:
    """One column as the sink writes it: name, Arrow type, Postgres type."""

    name: str
    arrow: pa.DataType
    pg: str

    @property
    def is_json(self) -> bool:
        return self.pg == "jsonb"


def pg_type(arrow: pa.DataType, wide_decimal: str | None = None) -> str:
    """The Postgres type for values of `arrow`; `wide_decimal` is the column's wide-number marker, if any."""
    if wide_decimal:
        wide = wide_type(wide_decimal)
        if wide is None or wide.integer:
            return WIDE_NUMERIC
        return f"numeric({wide.precision},{wide.scale})" if wide.precision <= PG_MAX_PRECISION else "numeric"
    if pa.types.is_int8(arrow) or pa.types.is_int16(arrow) or pa.types.is_uint8(arrow):
        return "smallint"
    if pa.types.is_int32(arrow) or pa.types.is_uint16(arrow):
        return "integer"
    if pa.types.is_int64(arrow) or pa.types.is_uint32(arrow):
        return "bigint"
    if pa.types.is_uint64(arrow):
        return "numeric(20,0)"
    if pa.types.is_float16(arrow) or pa.types.is_float32(arrow):
        return "real"
    if pa.types.is_float64(arrow):
        return "double precision"
    if pa.types.is_boolean(arrow):
        return "boolean"
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_null(arrow):
        return "text"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow) or pa.types.is_fixed_size_binary(arrow):
        return "bytea"
    if pa.types.is_date(arrow):
        return "date"
    if pa.types.is_timestamp(arrow):
        return "timestamp with time zone" if arrow.tz else "timestamp without time zone"
    if pa.types.is_time(arrow):
        return "time without time zone"
    if pa.types.is_decimal(arrow):
        return f"numeric({arrow.precision},{arrow.scale})"
    if pa.types.is_struct(arrow) or pa.types.is_list(arrow) or pa.types.is_large_list(arrow) or pa.types.is_map(arrow):
        return "jsonb"
    raise TypeError(f"no Postgres type for Arrow type {arrow}")


def columns_of(schema: T.StructType, skip: tuple[str, ...] = ()) -> list[Column]:
    """The sink's columns for a Spark input schema, in input order."""
    from pyspark.sql.pandas.types import to_arrow_type

    out = []
    for field in schema.fields:
        if field.name in skip:
            continue
        arrow = to_arrow_type(field.dataType, timezone="UTC")
        wide = (field.metadata or {}).get(WIDE_DECIMAL_KEY)
        out.append(Column(field.name, arrow, pg_type(arrow, wide)))
    return out


def _numeric(pg: str) -> tuple[int, int] | None:
    """``numeric(p,s)`` → (p, s); unconstrained ``numeric`` → (1000, 0) for comparisons."""
    if pg == "numeric":
        return (1000, 0)
    match = _DECIMAL.match(pg.replace(" ", ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def can_hold(existing: str, required: str) -> bool:
    """Whether a column of type `existing` (Postgres ``format_type`` text) stores every value of type
    `required` exactly. Strings into ``varchar(n)`` are accepted here; an over-long value fails its
    write with Postgres' own error naming the column."""
    existing = existing.lower()
    if existing == required:
        return True
    if required in _INT_DIGITS or required.startswith("numeric"):
        need = _numeric(required) or (_INT_DIGITS[required], 0)
        if existing in _INT_DIGITS:
            return need[1] == 0 and _INT_DIGITS[existing] >= need[0]
        have = _numeric(existing)
        if have is None:
            return False
        if existing == "numeric":
            return True
        return have[1] >= need[1] and have[0] - have[1] >= need[0] - need[1]
    if required == "real":
        return existing in ("double precision", "numeric")
    if required == "text":
        return existing.startswith(("character varying", "character", "citext", "text"))
    if required == "jsonb":
        return existing in ("json", "text")
    if required == "date":
        return existing.startswith("timestamp")
    if required.startswith("timestamp"):
        return existing.startswith("timestamp")  # sessions run in UTC, so either kind round-trips exactly
    return False
