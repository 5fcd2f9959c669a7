"""What a ClickHouse table looks like to a reader: columns, sorting key, ReplacingMergeTree parameters,
and how each column is selected so that it arrives as the Arrow type Spark expects. Column types are read with
clickhouse-connect's type registry (`types.parse_type`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamling.clickhouse.client import quote
from streamling.clickhouse.types import base_type, decimal_digits, parse_type, unwrap_nullable
from streamling.core.markers import I256, U256, WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from pyspark.sql import types as T


@functools.cache
def _int_types() -> dict[str, T.DataType]:
    from pyspark.sql import types as T

    return {
        "Int8": T.ByteType(),
        "Int16": T.ShortType(),
        "Int32": T.IntegerType(),
        "Int64": T.LongType(),
        "UInt8": T.ShortType(),
        "UInt16": T.IntegerType(),
        "UInt32": T.LongType(),
    }


_WIDE = {"Int128": "decimal(39,0)", "UInt128": "decimal(39,0)", "Int256": I256, "UInt256": U256}
"""Integers past Spark's 38 digits, read as exact decimal text with this marker (so a ``UInt256`` column
written back by a ClickHouse sink is a ``UInt256`` again)."""
_TEXT = ("String", "FixedString", "UUID", "Enum8", "Enum16", "IPv4", "IPv6")


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str

    @property
    def nullable(self) -> bool:
        """Whether the column itself is Nullable (not a member of it: ``Array(Nullable(T))`` is not)."""
        return unwrap_nullable(self.type)[1]

    @property
    def low_cardinality(self) -> bool:
        kind = parse_type(self.type)
        return kind is not None and kind.low_card

    @property
    def base(self) -> str:
        """The type without ``Nullable``/``LowCardinality``, as the registry spells it (``Decimal(18, 3)``)."""
        return unwrap_nullable(self.type)[0]

    @property
    def family(self) -> str:
        """The type's family: ``DateTime64`` for ``Nullable(DateTime64(3))``, ``Decimal`` for ``Decimal(40, 2)``."""
        return base_type(self.type)


def spark_field(column: ColumnInfo) -> T.StructField:
    from pyspark.sql import types as T

    kind = column.family
    metadata: dict[str, Any] = {}
    if kind in _int_types():
        data: T.DataType = _int_types()[kind]
    elif kind == "UInt64":
        data = T.DecimalType(20, 0)
    elif kind in _WIDE:
        data = T.StringType()
        metadata[WIDE_DECIMAL_KEY] = _WIDE[kind]
    elif kind in ("Float32",):
        data = T.FloatType()
    elif kind == "Float64":
        data = T.DoubleType()
    elif kind == "Bool":
        data = T.BooleanType()
    elif kind in _TEXT:
        data = T.StringType()
    elif kind in ("Date", "Date32"):
        data = T.DateType()
    elif kind in ("DateTime", "DateTime64"):
        data = T.TimestampType()
    elif digits := decimal_digits(column.type):
        precision, scale = digits
        if precision <= 38:
            data = T.DecimalType(precision, scale)
        else:
            data = T.StringType()
            metadata[WIDE_DECIMAL_KEY] = f"decimal({precision},{scale})"
    else:
        raise StreamlingError.user(
            f"column '{column.name}' has type {column.type}, which the ClickHouse source cannot read; "
            "leave it out with 'columns'"
        )
    return T.StructField(column.name, data, True, metadata)


def select_expression(column: ColumnInfo) -> str:
    """The column converted in ClickHouse to the Arrow type of its Spark field (no per-row Python)."""
    name = quote(column.name)
    kind = column.family
    if kind in ("UInt8", "UInt16", "UInt32"):
        target = {"UInt8": "Int16", "UInt16": "Int32", "UInt32": "Int64"}[kind]
        expr = f"CAST({name} AS Nullable({target}))"
    elif kind == "UInt64":
        expr = f"CAST({name} AS Nullable(Decimal(20, 0)))"
    elif kind in _WIDE or kind in _TEXT or column.low_cardinality:
        expr = f"toString({name})" if not column.nullable else f"CAST({name} AS Nullable(String))"
    elif kind in ("Date", "Date32"):
        expr = f"toDate32({name})"
    elif kind in ("DateTime", "DateTime64"):
        expr = f"toDateTime64({name}, 6, 'UTC')"
    elif (digits := decimal_digits(column.type)) and digits[0] > 38:
        # every fractional digit, as the marker's decimal(p,s) promises (toString drops trailing zeros)
        expr = f"toDecimalString({name}, {digits[1]})"
    else:
        return name
    return f"{expr} AS {name}"


@dataclass(frozen=True)
class TableInfo:
    database: str
    table: str
    columns: tuple[ColumnInfo, ...]
    sorting_key: tuple[str, ...]
    engine: str
    version: str | None
    is_deleted: str | None

    @property
    def replacing(self) -> bool:
        return "ReplacingMergeTree" in self.engine

    def column(self, name: str) -> ColumnInfo:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)


def inspect(client: Any, database: str, table: str, where: str) -> TableInfo:
    rows = client.query(
        "SELECT engine, engine_full, sorting_key FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        parameters={"db": database, "t": table},
    ).result_rows
    if not rows:
        raise StreamlingError.user(f"{where}: table {database}.{table} does not exist")
    engine, engine_full, sorting_key = rows[0]
    columns = client.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String} ORDER BY position",
        parameters={"db": database, "t": table},
    ).result_rows
    key_text = (sorting_key or "").strip()
    while key_text.startswith("(") and key_text.endswith(")"):
        key_text = key_text[1:-1].strip()
    keys = tuple(k.strip().strip("`") for k in _split(key_text)) if key_text else ()
    names = {name for name, _ in columns}
    odd = [k for k in keys if k not in names]
    if odd:
        raise StreamlingError.user(
            f"{where}: table {database}.{table} sorts by expression {odd[0]!r}; only plain columns are supported"
        )
    if not keys:
        raise StreamlingError.user(f"{where}: table {database}.{table} has no sorting key to page by")
    version, is_deleted = replacing_parameters(engine, engine_full)
    return TableInfo(
        database,
        table,
        tuple(ColumnInfo(n, t) for n, t in columns),
        keys,
        engine,
        version,
        is_deleted,
    )


def replacing_parameters(engine: str, engine_full: str) -> tuple[str | None, str | None]:
    """``ReplacingMergeTree(ver, is_deleted)`` (or the Replicated form with its path and replica first)."""
    if "ReplacingMergeTree" not in engine:
        return None, None
    match = re.search(r"ReplacingMergeTree\((.*?)\)(?:\s|$)", engine_full)
    args = [a.strip().strip("`") for a in _split(match.group(1))] if match and match.group(1).strip() else []
    args = [a for a in args if not a.startswith("'")]
    return (args[0] if args else None), (args[1] if len(args) > 1 else None)


def _split(text: str) -> list[str]:
    """Top-level comma split (commas inside parentheses or quotes stay)."""
    parts, depth, quote_char, current = [], 0, "", []
    for ch in text:
        if quote_char:
            current.append(ch)
            if ch == quote_char:
                quote_char = ""
            continue
        if ch in "'`":
            quote_char = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    if current:
        parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]
