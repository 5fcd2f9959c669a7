"""Arrow/Spark column types → ClickHouse column types, whether an existing column can hold them, and
the check that keeps a user-written type (``schema_override``) safe to put into DDL.

The mapping is defined on Arrow types (what the sink sends with ``FORMAT Arrow``); Spark schemas are
converted first, carrying the wide-decimal marker. Choices:

- timestamps (``TIMESTAMP`` and ``TIMESTAMP_NTZ``) → ``DateTime64(6, 'UTC')``: ClickHouse has no naive
  date-time type (``DateTime64(6)`` is an instant shown in the server's zone), so a wall-clock value
  written as UTC reads back unchanged on every server;
- numbers wider than Spark's 38 digits arrive as exact decimal strings marked with their type: ``u256``
  (``to_u256``, a ``UInt256`` source column) → ``UInt256``, ``i256`` → ``Int256``, ``decimal(p,s)`` (Avro,
  ``to_decimal_arb``) → ``Decimal(p,s)`` up to ClickHouse's 76 digits, else ``String`` (Avro's
  ``decimal(78,0)`` holds both the ``UInt256`` and the ``Int256`` range, which no single ClickHouse number
  type does, and ClickHouse wraps an out-of-range value silently instead of failing);
- struct/list/map → ``Tuple(name T, …)``/``Array(T)``/``Map(K, V)`` (sent natively by Arrow, queryable
  without JSON functions); such a column itself cannot be Nullable in ClickHouse, so a NULL becomes the
  empty value, while NULL members keep Nullable types inside;
- binary → ``String`` (ClickHouse strings are bytes); a nullable input column is ``Nullable(T)``, a key
  column never is.

ClickHouse type names (``system.columns.type``, ``schema_override``) are read with clickhouse-connect's type
registry (`parse_type`), the parser its own driver decodes columns with: wrappers, precision, scale and element
types come from one grammar instead of patterns of our own that drift from it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from streamling.clickhouse.client import quote
from streamling.core.markers import WIDE_DECIMAL_KEY, wide_type

if TYPE_CHECKING:
    from clickhouse_connect.datatypes.base import ClickHouseType
    from pyspark.sql import types as T

MAX_DECIMAL_DIGITS = 76
_TYPE_CHARS = re.compile(r"^[A-Za-z][A-Za-z0-9_ ,()'=.+/\-]*$")
_COMPOSITE = {"Array", "Map", "Tuple", "Nested", "JSON", "Object", "Variant", "Dynamic"}
_INTS = {f"{sign}Int{bits}": (sign == "", bits) for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256)}
"""Integer type → (signed, bits)."""


@dataclass(frozen=True)
class Column:
    """One column as the sink writes it: name, Arrow type, ClickHouse type."""

    name: str
    arrow: pa.DataType
    ch: str


def check_type_text(text: str) -> str:
    """`text` if it is a plausible ClickHouse type safe to put into DDL, else ValueError.

    Only letters, digits, ``_ , ( ) ' = . + - /`` and spaces; it starts with a letter, parentheses and
    quotes balance, and no ``--`` comment. This keeps statements out (no ``;``, backquotes, backslashes
    or comments); whether ClickHouse knows the type is its own check when the table is created."""
    value = " ".join(str(text).split())
    if not value or len(value) > 300:
        raise ValueError(f"'{text}' is not a ClickHouse type")
    if not _TYPE_CHARS.match(value) or "--" in value or value.count("'") % 2:
        raise ValueError(
            f"'{text}' is not a ClickHouse type (allowed: letters, digits, spaces and _ , ( ) ' = . + - /)"
        )
    depth = 0
    for char in re.sub(r"'[^']*'", "''", value):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
    if depth != 0:
        raise ValueError(f"'{text}' is not a ClickHouse type (unbalanced parentheses)")
    return value


@functools.lru_cache(maxsize=4096)
def parse_type(ch: str) -> ClickHouseType | None:
    """`ch` as clickhouse-connect's type registry reads it, or None for a name it does not know (a type newer than
    the driver, ``Object('json')``, a misspelling): callers then treat it as a type they cannot compare or read.

    Cached: a column's properties (`tables.ColumnInfo`) ask for its type every time, and parsing the name costs
    many times what a cache hit does. Sharing the answer is safe: the registry itself hands out one shared,
    never-changed instance per name (its ``type_cache``); the cache here also spares parsing the name first.

    Names the registry has no class for are told apart before asking it, because it logs an ERROR for each
    (a column the source rejects with its own message would otherwise log twice). Imported here, not at module
    level: every pipeline imports the sink to register it, and only ClickHouse pipelines need the driver."""
    from clickhouse_connect.datatypes.base import type_map
    from clickhouse_connect.datatypes.registry import get_from_name, parse_name

    text = " ".join(ch.split())
    try:
        if parse_name(text)[0] not in type_map:
            return None
        return get_from_name(text)
    except Exception:  # InternalError, ArithmeticError, IndexError: the registry's ways of saying "not a type"
        return None


def bare_name(kind: ClickHouseType) -> str:
    """`kind`'s canonical name without its ``Nullable``/``LowCardinality`` wrappers: the registry's `name` is the
    bare name wrapped in them, outermost first, so peeling them off in that order gives it exactly."""
    name = kind.name
    for wrapper in kind.wrappers:
        name = name[len(wrapper) + 1 : -1]
    return name


def _peeled(ch: str) -> tuple[str, tuple[str, ...]]:
    """For a name the registry has no class for: the text inside its wrappers, and the wrappers, peeled as the
    registry's own `parse_name` does (``LowCardinality`` outside ``Nullable``)."""
    text, wrappers = " ".join(ch.split()), ()
    for wrapper in ("LowCardinality", "Nullable"):
        if text.startswith(f"{wrapper}(") and text.endswith(")"):
            text, wrappers = text[len(wrapper) + 1 : -1].strip(), (*wrappers, wrapper)
    return text, wrappers


def base_type(ch: str) -> str:
    """The type's family (``Decimal`` for ``Decimal128(5)``, ``DateTime64`` for ``Nullable(DateTime64(3))``); for
    a name the registry does not know, the text before its arguments."""
    kind = parse_type(ch)
    if kind is not None and kind.base_type is not None:
        return kind.base_type
    return _peeled(ch)[0].partition("(")[0]


def normalize(ch: str) -> str:
    """Canonical spelling for comparisons: the registry's name, no LowCardinality (a name it does not know: as
    written, its whitespace collapsed)."""
    text, is_nullable = unwrap_nullable(ch)
    return f"Nullable({text})" if is_nullable else text


def unwrap_nullable(ch: str) -> tuple[str, bool]:
    """The canonical type inside ``Nullable``/``LowCardinality``, and whether it is Nullable."""
    kind = parse_type(ch)
    if kind is None:
        text, wrappers = _peeled(ch)
        return text, "Nullable" in wrappers
    return bare_name(kind), "Nullable" in kind.wrappers


def is_composite(ch: str) -> bool:
    return base_type(ch) in _COMPOSITE


def decimal_digits(ch: str) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type (any of ``Decimal(p, s)``, ``Decimal32(s)`` … ``Decimal256(s)``)."""
    kind = parse_type(ch)
    if kind is None or kind.base_type != "Decimal":
        return None
    return int(kind.prec), int(kind.scale)  # type: ignore[attr-defined]


def datetime_digits(ch: str) -> int | None:
    """Fractional-second digits of a ``DateTime`` (0) or ``DateTime64(n)`` (n) type; None for other types."""
    kind = parse_type(ch)
    if kind is None or kind.base_type not in ("DateTime", "DateTime64"):
        return None
    return int(kind.scale) if kind.base_type == "DateTime64" else 0  # type: ignore[attr-defined]


def nullable(ch: str, is_nullable: bool) -> str:
    """``Nullable(T)`` where ClickHouse allows it (not around arrays, maps, tuples)."""
    if not is_nullable or is_composite(ch) or unwrap_nullable(ch)[1]:
        return ch
    return f"Nullable({ch})"


def ch_type(arrow: pa.DataType, wide_decimal: str | None = None) -> str:
    """The ClickHouse type for values of `arrow` (without the outer Nullable)."""
    if wide_decimal:
        wide = wide_type(wide_decimal)
        if wide is not None and wide.integer:
            return {"u256": "UInt256", "i256": "Int256"}[wide.kind]
        if wide is not None and wide.precision <= MAX_DECIMAL_DIGITS:
            return f"Decimal({wide.precision}, {wide.scale})"
        return "String"
    for check, name in (
        (pa.types.is_int8, "Int8"),
        (pa.types.is_int16, "Int16"),
        (pa.types.is_int32, "Int32"),
        (pa.types.is_int64, "Int64"),
        (pa.types.is_uint8, "UInt8"),
        (pa.types.is_uint16, "UInt16"),
        (pa.types.is_uint32, "UInt32"),
        (pa.types.is_uint64, "UInt64"),
        (pa.types.is_float16, "Float32"),
        (pa.types.is_float32, "Float32"),
        (pa.types.is_float64, "Float64"),
        (pa.types.is_boolean, "Bool"),
    ):
        if check(arrow):
            return name
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_null(arrow):
        return "String"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow) or pa.types.is_fixed_size_binary(arrow):
        return "String"
    if pa.types.is_date(arrow):
        return "Date32"
    if pa.types.is_timestamp(arrow):
        return "DateTime64(6, 'UTC')"
    if pa.types.is_decimal(arrow):
        if arrow.precision > MAX_DECIMAL_DIGITS:
            return "String"
        return f"Decimal({arrow.precision}, {arrow.scale})"
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        item = arrow.value_field
        return f"Array({nullable(ch_type(item.type), item.nullable)})"
    if pa.types.is_map(arrow):
        item = arrow.item_field
        return f"Map({ch_type(arrow.key_type)}, {nullable(ch_type(item.type), item.nullable)})"
    if pa.types.is_struct(arrow):
        members = [f"{_tuple_name(f.name)} {nullable(ch_type(f.type), f.nullable)}" for f in arrow]
        return f"Tuple({', '.join(members)})"
    raise TypeError(f"no ClickHouse type for Arrow type {arrow}")


def _tuple_name(name: str) -> str:
    """A bare word as it is (how ClickHouse prints tuple members), anything else quoted."""
    if name.isascii() and name.isidentifier():
        return name
    return quote(name)


def columns_of(
    schema: T.StructType,
    keys: list[str],
    overrides: dict[str, str] | None = None,
    skip: tuple[str, ...] = (),
) -> list[Column]:
    """The sink's columns for a Spark input schema, in input order; `overrides` win per column."""
    from pyspark.sql.pandas.types import to_arrow_type

    out = []
    for field in schema.fields:
        if field.name in skip:
            continue
        arrow = to_arrow_type(field.dataType, timezone="UTC")
        override = (overrides or {}).get(field.name)
        if override:
            ch = override
        else:
            wide = (field.metadata or {}).get(WIDE_DECIMAL_KEY)
            ch = nullable(ch_type(arrow, wide), field.nullable and field.name not in keys)
        out.append(Column(field.name, arrow, ch))
    return out


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20, 128: 39, 256: 78}


def can_hold(existing: str, required: str) -> bool:
    """Whether a column of type `existing` (``system.columns.type``) stores every value of `required`
    (this sink's type for the input) exactly. Nullability is not compared here: NULL into a non-Nullable
    column becomes the type's default, which the sink reports separately."""
    have, _ = unwrap_nullable(existing)
    need, _ = unwrap_nullable(required)
    if have == need:
        return True
    have_base, need_base = base_type(have), base_type(need)
    if need_base in ("UInt256", "Int256") and have_base == "String":
        return True  # the exact decimal text, as tables made before 256-bit columns were typed hold it
    need_int, have_int = _INTS.get(need_base), _INTS.get(have_base)
    have_dec = decimal_digits(have)
    if need_int:
        signed, bits = need_int
        if have_int:
            if have_int[0] == signed:
                return have_int[1] >= bits
            return have_int[0] and have_int[1] > bits  # unsigned into a wider signed
        return bool(have_dec and have_dec[1] == 0 and have_dec[0] >= _INT_DIGITS[bits])
    if need_base == "Float32":
        return have_base == "Float64"
    if need_base == "Bool":
        return have_int is not None and have_int[1] >= 8
    need_dec = decimal_digits(need)
    if need_dec:
        return bool(have_dec and have_dec[1] >= need_dec[1] and have_dec[0] - have_dec[1] >= need_dec[0] - need_dec[1])
    if need_base == "String":
        # Strings also go into FixedString/Enum/UUID and, as exact decimal text, into wide numbers;
        # a value that does not fit fails its insert with ClickHouse's message naming the column.
        wide = ("FixedString", "Enum8", "Enum16", "UUID", "Int128", "Int256", "UInt128", "UInt256")
        return have_base in wide or have_dec is not None
    if need_base == "Date32":
        return have_base == "Date32" or have_base == "DateTime64"
    if need_base == "DateTime64":
        return have_base == "DateTime64" and (datetime_digits(have) or 0) >= 6
    return False
