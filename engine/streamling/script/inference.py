"""The output columns of a script transform without ``schema``, inferred at validation.

The original Streamling keeps the input's columns and takes whatever keys a script adds (its README's own example
adds ``tier`` with no schema). Spark needs the output schema before any data moves, so the script is run here, on
the driver, in a sandbox like the executors' (same runner, same row objects), on a few rows built from the input
schema: typical non-NULL values, other non-NULL values, and NULLs. The keys of the objects it returns give the
columns; their JavaScript values give the types:

- a number is ``double``, never ``bigint``: JavaScript has one number type (IEEE double), and a sample that
  happens to be integral (``amount * 2`` of a sample ``1.5``) says nothing of later rows, which an integer column
  would silently truncate (``2.9`` → 2, the coercion a declared ``bigint`` column applies). A double holds every
  JavaScript number exactly; declare ``bigint`` in ``schema`` to get integers.
- a ``BigInt`` is ``bigint``, a string ``string``, a boolean ``boolean``, a ``Date`` ``timestamp``, a
  ``Uint8Array`` ``binary``;
- an object or an array is a ``string`` holding its JSON text (the codec's coercion of an object to a string
  column): a struct or array type read off one sample would fix keys and element types that later rows need
  not follow, and the codec converts nested values strictly, so the first row that differs would stop the run;
- values of different kinds across the sample (a number here, a string there) make a ``string``, which the codec
  fills from numbers, booleans, dates and objects alike.

Input columns keep their input types (and their values are coerced to them, as without inference). A new column
that is NULL or missing on every sample row, a value of no convertible kind (a function, a symbol), or a script
that throws on every sample row is rejected at validation with the fix: declare ``schema``. A script that returns
no row for any sample row (a filter the samples do not pass) shows nothing to infer from: the output is the
input's columns, as before, and a warning says so; its first row with another key still fails the run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.script import codec
from streamling.script.sandbox import Limits, Sandbox, SandboxError, clean_stack

if TYPE_CHECKING:
    from pyspark.sql import types as T


@functools.cache
def value_kinds() -> dict[str, T.DataType]:
    """A JavaScript value's kind (runner.js `kindOf`) → the column type inferred when it is the only kind seen."""
    from pyspark.sql import types as T

    return {
        "number": T.DoubleType(),
        "bigint": T.LongType(),
        "string": T.StringType(),
        "boolean": T.BooleanType(),
        "Date": T.TimestampType(),
        "binary": T.BinaryType(),
        "json": T.StringType(),
    }


@dataclass(frozen=True)
class Inferred:
    """The output columns (without ``_gs_op``), and a warning when the sample showed nothing to infer from."""

    fields: list[T.StructField]
    warning: str | None = None


def infer_columns(label: str, script: str, input_schema: T.StructType, limits: Limits) -> Inferred:
    """The input's columns plus those the script adds, typed from the sample's values; `StreamlingError.user`
    (naming the node, the columns and the fix) when a column's type cannot be told."""
    from pyspark.sql import types as T

    inputs = codec.columns_of(input_schema)
    batch = sample_batch(input_schema)
    sandbox = Sandbox(limits)
    try:
        sandbox.load(script)
        rows = sandbox.probe(codec.spec_of(inputs, [], False), codec.encode(batch, inputs))
    except SandboxError as exc:
        raise StreamlingError.user(
            f"{label}: cannot infer its output columns: running the script on sample rows built from the input "
            f"schema failed: {exc}; {_fix(input_schema, [])}"
        ) from None
    finally:
        sandbox.close()
    kept = [T.StructField(f.name, f.dataType, True, f.metadata) for f in input_schema.fields if f.name != GS_OP]
    known = {f.name for f in input_schema.fields} | {GS_OP}
    objects = [obj for row in rows for obj in row.get("objects", [])]
    failures = [_failure(row) for row in rows if "objects" not in row]
    if not objects:
        if failures:
            raise StreamlingError.user(
                f"{label}: cannot infer its output columns: the script failed on every sample row built from the "
                f"input schema (first: {failures[0]}); {_fix(input_schema, [])}"
            )
        return Inferred(
            kept,
            f"{label}: the script returned no row for the sample rows built from the input schema, so the columns it "
            "may add could not be inferred at validation; its output keeps the input's columns (declare 'schema' if "
            "it adds any)",
        )
    kinds: dict[str, set[str]] = {}
    for obj in objects:
        for name, kind in obj:
            if name not in known:
                kinds.setdefault(name, set())
                if kind not in ("null", "undefined"):
                    kinds[name].add(kind)
    untyped = [name for name, seen in kinds.items() if not seen]
    odd = {name: seen - set(value_kinds()) for name, seen in kinds.items() if seen - set(value_kinds())}
    if untyped:
        what = _names(untyped)
        raise StreamlingError.user(
            f"{label}: cannot infer the type of {what}, which the script adds: "
            f"{'it is' if len(untyped) == 1 else 'they are'} null on every sample row built from the input schema; "
            f"{_fix(input_schema, list(kinds))}"
        )
    if odd:
        name, seen = next(iter(odd.items()))
        values = " or ".join(sorted("a " + k for k in seen))
        raise StreamlingError.user(
            f"{label}: cannot infer the type of column '{name}', which the script adds: its value is {values}, "
            f"which no column type holds; {_fix(input_schema, list(kinds))}"
        )
    added = [T.StructField(name, _type_of(seen), True) for name, seen in kinds.items()]
    return Inferred(kept + added)


def _type_of(seen: set[str]) -> T.DataType:
    from pyspark.sql import types as T

    if len(seen) == 1:
        return value_kinds()[next(iter(seen))]
    if seen == {"number", "bigint"}:
        return T.DoubleType()
    return T.StringType()


def _failure(row: dict[str, Any]) -> str:
    if "shape" in row:
        return f"it {row['shape']}"
    name, message, stack = row["error"]
    frames = clean_stack(stack)
    text = f"{name}: {message}" if name else message
    return text + (f"; stack: {' / '.join(frames)}" if frames else "")


def _names(names: list[str]) -> str:
    quoted = ", ".join(f"'{n}'" for n in names)
    return f"column {quoted}" if len(names) == 1 else f"columns {quoted}"


def _fix(input_schema: T.StructType, added: list[str]) -> str:
    """The fix, with the schema to write: the input's columns with their types, the added ones to be typed."""
    columns = [f"{f.name}: {f.dataType.simpleString()}" for f in input_schema.fields if f.name != GS_OP]
    columns += [f"{name}: <type>" for name in added] or ["…"]
    return f"declare every output column in 'schema' on the node, e.g. schema: {{{', '.join(columns)}}}"


# ---------------------------------------------------------------- sample rows


def sample_batch(schema: T.StructType) -> pa.RecordBatch:
    """Three rows of `schema`: typical values, other values, then NULLs (a non-nullable column keeps the first
    row's value). Values are plausible (small positive numbers, text, recent times) so that a script's arithmetic
    and string calls work on them."""
    from pyspark.sql.pandas.types import to_arrow_type

    arrays = []
    fields = []
    for field in schema.fields:
        arrow_type = to_arrow_type(field.dataType, timezone="UTC")
        values = [_sample(field.dataType, 0), _sample(field.dataType, 1), None]
        if not field.nullable:
            values[2] = values[0]
        if field.name == GS_OP:
            values = ["i", "i", "i"]
        try:
            array = pa.array(values, type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            array = pa.nulls(3, type=arrow_type)
        arrays.append(array)
        fields.append(pa.field(field.name, arrow_type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


@functools.cache
def _integer_ranges() -> dict[type[T.DataType], tuple[int, int]]:
    from pyspark.sql import types as T

    return {
        T.ByteType: (1, 100),
        T.ShortType: (1, 1000),
        T.IntegerType: (1, 100_000),
        T.LongType: (1, 1_000_000),
    }


def _sample(data_type: T.DataType, variant: int) -> Any:
    from pyspark.sql import types as T

    kind = type(data_type)
    if kind in _integer_ranges():
        return _integer_ranges()[kind][variant]
    if isinstance(data_type, (T.DoubleType, T.FloatType)):
        return (1.5, 1234.25)[variant]
    if isinstance(data_type, T.DecimalType):
        digits = data_type.precision - data_type.scale
        whole = (1, 1234)[variant] if digits >= (1, 4)[variant] else (1 if digits >= 1 else 0)
        fraction = Decimal("0.5") if data_type.scale else Decimal(0)
        return (Decimal(whole) + fraction).quantize(Decimal(1).scaleb(-data_type.scale))
    if isinstance(data_type, (T.StringType, T.CharType, T.VarcharType)):
        return ("sample", "Sample text 2")[variant]
    if isinstance(data_type, T.BooleanType):
        return variant == 0
    if isinstance(data_type, T.BinaryType):
        return (b"sample", b"\x00\x01\x02")[variant]
    if isinstance(data_type, T.TimestampType):
        return (datetime(2025, 1, 1, 12, tzinfo=UTC), datetime(2026, 6, 30, 23, 59, 59, 123456, tzinfo=UTC))[variant]
    if isinstance(data_type, T.TimestampNTZType):
        return (datetime(2025, 1, 1, 12), datetime(2026, 6, 30, 23, 59, 59, 123456))[variant]
    if isinstance(data_type, T.DateType):
        return (date(2025, 1, 1), date(2026, 6, 30))[variant]
    if isinstance(data_type, T.ArrayType):
        return [_sample(data_type.elementType, variant)]
    if isinstance(data_type, T.MapType):
        return [(_sample(data_type.keyType, variant), _sample(data_type.valueType, variant))]
    if isinstance(data_type, T.StructType):
        return {f.name: _sample(f.dataType, variant) for f in data_type.fields}
    return None
