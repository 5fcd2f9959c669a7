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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from streamling.core.markers import WIDE_DECIMAL_KEY, wide_type

MAX_DECIMAL_DIGITS = 76
_TYPE_CHARS = re.compile(r"^[A-Za-z][A-Za-z0-9_ ,()'=.+/\-]*$")
_COMPOSITE = ("Array(", "Map(", "Tuple(", "Nested(", "JSON", "Object(", "Variant(", "Dynamic")
_INT = re.compile(r"^(U?)Int(8|16|32|64|128|256)$")
_DEC = re.compile(r"^Decimal(?:32|64|128|256)?\((\d+)(?:,(\d+))?\)$")
_DT64 = re.compile(r"^DateTime64\((\d+)(?:,'[^']*')?\)$")


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


def normalize(ch: str) -> str:
    """Canonical spelling for comparisons: no spaces after commas/parentheses, no LowCardinality."""
    text = " ".join(ch.split())
    text = re.sub(r"\s*([(),])\s*", r"\1", text)
    changed = True
    while changed:
        changed = False
        match = re.match(r"^LowCardinality\((.*)\)$", text)
        if match:
            text, changed = match.group(1), True
        if text.startswith("LowCardinality(Nullable(") and text.endswith("))"):
            text, changed = "Nullable(" + text[len("LowCardinality(Nullable(") : -2] + ")", True
    return text


def unwrap_nullable(ch: str) -> tuple[str, bool]:
    text = normalize(ch)
    if text.startswith("Nullable(") and text.endswith(")"):
        return text[len("Nullable(") : -1], True
    return text, False


def is_composite(ch: str) -> bool:
    return normalize(ch).startswith(_COMPOSITE)


def nullable(ch: str, is_nullable: bool) -> str:
    """``Nullable(T)`` where ClickHouse allows it (not around arrays, maps, tuples)."""
    if not is_nullable or is_composite(ch) or ch.startswith("Nullable("):
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
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def columns_of(
    schema: T.StructType,
    keys: list[str],
    overrides: dict[str, str] | None = None,
    skip: tuple[str, ...] = (),
) -> list[Column]:
    """The sink's columns for a Spark input schema, in input order; `overrides` win per column."""
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


def _int(ch: str) -> tuple[bool, int] | None:
    match = _INT.match(ch)
    return (match.group(1) == "", int(match.group(2))) if match else None


def _dec(ch: str) -> tuple[int, int] | None:
    match = _DEC.match(ch)
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20, 128: 39, 256: 78}


def can_hold(existing: str, required: str) -> bool:
    """Whether a column of type `existing` (``system.columns.type``) stores every value of `required`
    (this sink's type for the input) exactly. Nullability is not compared here: NULL into a non-Nullable
    column becomes the type's default, which the sink reports separately."""
    have, _ = unwrap_nullable(existing)
    need, _ = unwrap_nullable(required)
    if have == need:
        return True
    if need in ("UInt256", "Int256") and have == "String":
        return True  # the exact decimal text, as tables made before 256-bit columns were typed hold it
    need_int, have_int = _int(need), _int(have)
    if need_int:
        signed, bits = need_int
        if have_int:
            if have_int[0] == signed:
                return have_int[1] >= bits
            return have_int[0] and have_int[1] > bits  # unsigned into a wider signed
        have_dec = _dec(have)
        return bool(have_dec and have_dec[1] == 0 and have_dec[0] >= _INT_DIGITS[bits])
    if need == "Float32":
        return have == "Float64"
    if need == "Bool":
        return have == "UInt8" or (have_int is not None and have_int[1] >= 8)
    need_dec = _dec(need)
    if need_dec:
        have_dec = _dec(have)
        return bool(have_dec and have_dec[1] >= need_dec[1] and have_dec[0] - have_dec[1] >= need_dec[0] - need_dec[1])
    if need == "String":
        # Strings also go into FixedString/Enum/UUID and, as exact decimal text, into wide numbers;
        # a value that does not fit fails its insert with ClickHouse's message naming the column.
        wide = ("FixedString(", "Enum8(", "Enum16(", "UUID", "Int128", "Int256", "UInt128", "UInt256")
        return have.startswith(wide) or _dec(have) is not None
    if need == "Date32":
        return have == "Date32" or bool(_DT64.match(have))
    if _DT64.match(need):
        match = _DT64.match(have)
        return bool(match and int(match.group(1)) >= 6)
    return False
