"""Arrow batches into the sandbox and its replies back into Arrow.

Numbers and booleans cross as raw bytes (float64 values plus a validity mask; one byte per boolean with 2 for
NULL), which saves the JSON encoding and parsing that dominates otherwise. Everything else crosses as one JSON
text of column arrays: strings as they are, timestamps as ISO-8601 UTC text with microseconds, dates as
``YYYY-MM-DD``, decimals as exact decimal text, binary as base64, nested values as JSON. On the way back the
sandbox has already coerced numbers, booleans and strings (runner.js); temporal, decimal and binary text is
parsed here, vectorised first and value by value only to find and name a bad value.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamling.core.rows import GS_OP, json_default

if TYPE_CHECKING:
    from pyspark.sql import types as T


@functools.cache
def numeric_kinds() -> dict[type[T.DataType], str]:
    from pyspark.sql import types as T

    return {
        T.ByteType: "int8",
        T.ShortType: "int16",
        T.IntegerType: "int32",
        T.LongType: "int64",
        T.FloatType: "float",
        T.DoubleType: "double",
    }


@functools.cache
def text_kinds() -> dict[type[T.DataType], str]:
    from pyspark.sql import types as T

    return {
        T.StringType: "string",
        T.TimestampType: "timestamp",
        T.TimestampNTZType: "timestamp_ntz",
        T.DateType: "date",
        T.DecimalType: "decimal",
        T.BinaryType: "binary",
    }


@dataclass(frozen=True)
class Column:
    """One column as the sandbox sees it: `kind` is how it crosses (num, bool, json), `type` how the runner
    coerces output values, `slot` its index among the JSON-carried columns."""

    name: str
    kind: str
    type: str
    slot: int = -1
    same: int = -1
    """For an output column: the input column of the same name and type, whose unchanged values are reused."""


def columns_of(schema: T.StructType) -> list[Column]:
    from pyspark.sql import types as T

    columns = []
    slot = 0
    for field in schema.fields:
        data_type = type(field.dataType)
        if data_type in numeric_kinds():
            columns.append(Column(field.name, "num", numeric_kinds()[data_type]))
        elif data_type is T.BooleanType:
            columns.append(Column(field.name, "bool", "boolean"))
        else:
            columns.append(Column(field.name, "json", text_kinds().get(data_type, "any"), slot))
            slot += 1
    return columns


def outputs_of(schema: T.StructType, input_schema: T.StructType) -> list[Column]:
    """The output columns; a JSON-carried one that exists in the input with the same type is marked `same`, so
    values a script passes through unchanged never cross as text."""
    inputs = {f.name: (k, f.dataType) for k, f in enumerate(input_schema.fields)}
    columns = []
    for column, field in zip(columns_of(schema), schema.fields, strict=True):
        found = inputs.get(column.name)
        if column.kind == "json" and found is not None and found[1] == field.dataType:
            column = Column(column.name, column.kind, column.type, column.slot, found[0])
        columns.append(column)
    return columns


def spec_of(inputs: list[Column], outputs: list[Column], strict: bool) -> dict[str, Any]:
    """What the runner's setup needs: names and kinds in, names, kinds and types out."""
    return {
        "inputs": [{"name": c.name, "kind": c.kind, "slot": c.slot} for c in inputs],
        "outputs": [{"name": c.name, "kind": c.kind, "type": c.type, "same": c.same} for c in outputs],
        "strict": strict,
    }


# ---------------------------------------------------------------- into the sandbox


def encode(batch: pa.RecordBatch, columns: list[Column]) -> dict[str, Any]:
    """``{"n", "json", "bin", "at"}``: numbers (float64 values, validity bytes when there are NULLs) and booleans
    (a byte each, 2 for NULL) in one buffer, each part padded to 8 bytes; ``at`` holds each column's value and
    mask offsets (-1: none). Few values means few guest crossings, which cost ~8 µs each."""
    n = batch.num_rows
    parts: list[bytes] = []
    at: list[int] = []
    size = 0

    def add(data: bytes) -> int:
        nonlocal size
        offset = size
        parts.append(data + b"\0" * (_pad(len(data)) - len(data)))
        size += _pad(len(data))
        return offset

    texts: list[list[Any]] = []
    for column in columns:
        values = batch.column(column.name)
        if column.kind == "num":
            floats = pc.cast(values, pa.float64(), safe=False) if values.type != pa.float64() else values
            at.append(add(floats.fill_null(0).to_numpy(zero_copy_only=False).tobytes()))
            at.append(add(_valid(values).tobytes()) if values.null_count else -1)
        elif column.kind == "bool":
            flags = values.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
            if values.null_count:
                flags[~_valid(values).astype(bool)] = 2
            at += [add(flags.tobytes()), -1]
        else:
            texts.append(_texts(values, column.type))
            at += [-1, -1]
    return {"n": n, "json": _dumps(texts) if texts else "", "bin": b"".join(parts), "at": at}


def _pad(size: int) -> int:
    return (size + 7) & ~7


def _valid(values: pa.Array) -> np.ndarray:
    return values.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8)


def _texts(values: pa.Array, kind: str) -> list[Any]:
    if kind == "string":
        return values.to_pylist()
    if kind in ("timestamp", "timestamp_ntz"):  # numpy formats ISO text ~5x faster than Arrow's strftime
        moments = pc.cast(values, pa.timestamp("us", tz=values.type.tz)).to_numpy(zero_copy_only=False)
        text = np.datetime_as_string(moments, unit="us", timezone="UTC" if kind == "timestamp" else "naive")
        if values.null_count:
            text = text.astype(object)
            text[~_valid(values).astype(bool)] = None
        return text.tolist()
    if kind in ("date", "decimal"):
        return pc.cast(values, pa.string()).to_pylist()
    if kind == "binary":
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in values.to_pylist()]
    return [_plain(v, values.type) for v in values.to_pylist()]


def _plain(value: Any, data_type: pa.DataType) -> Any:
    """A nested value as JSON would hold it: maps (pairs in Arrow) become objects, non-finite floats null."""
    if value is None:
        return None
    if pa.types.is_map(data_type):
        return {str(k): _plain(v, data_type.item_type) for k, v in value}
    if pa.types.is_struct(data_type):
        return {f.name: _plain(value.get(f.name), f.type) for f in data_type}
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        return [_plain(v, data_type.value_type) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _dumps(texts: list[list[Any]]) -> str:
    return json.dumps(texts, ensure_ascii=False, separators=(",", ":"), default=json_default, allow_nan=False)


# ---------------------------------------------------------------- out of the sandbox


class BadValue(Exception):
    """An output value that cannot become its column's type; `index` is the output row."""

    def __init__(self, index: int, column: str, value: Any, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.column = column
        self.value = value
        self.reason = reason


def sources_of(reply: list[Any]) -> np.ndarray:
    """Per output row of an ``ok`` reply, the index of the input row it came from."""
    count = int(reply[1])
    if len(reply[2]) < 4 * count:
        raise ValueError(f"the sandbox reply is inconsistent ({len(reply[2])} bytes for {count} rows)")
    return np.frombuffer(reply[2], dtype=np.int32, count=count)


def decode(reply: list[Any], batch: pa.RecordBatch, columns: list[Column], schema: pa.Schema) -> pa.RecordBatch:
    """The output batch of an ``ok`` reply (layout: `finish` in runner.js), ``_gs_op`` from each row's input row."""
    sources = sources_of(reply)
    count = len(sources)
    data: bytes = reply[2]
    offset = _pad(4 * count)

    def take(dtype: type, items: int) -> np.ndarray:
        nonlocal offset
        part = np.frombuffer(data, dtype=dtype, count=items, offset=offset)
        offset += _pad(part.nbytes)
        return part

    texts = json.loads(reply[3]) if reply[3] else []
    arrays = []
    for column in columns:
        field = schema.field(column.name)
        if column.kind == "num":
            values = take(np.float64, count)
            valid = take(np.uint8, count)
            floats = pa.array(values, type=pa.float64(), mask=valid == 0)
            if field.type != pa.float64():  # integers were checked in the sandbox: exact; float32 rounds
                floats = pc.cast(floats, field.type, safe=column.type != "float")
            arrays.append(floats)
        elif column.kind == "bool":
            flags = take(np.uint8, count)
            arrays.append(pa.array(flags == 1, type=pa.bool_(), mask=flags == 2))
        elif column.same >= 0:
            arrays.append(_reused(take(np.uint8, count), texts[column.slot], batch, sources, column, field))
        else:
            arrays.append(_from_texts(texts[column.slot], column, field.type))
    if offset != len(data):
        raise ValueError(f"the sandbox reply is inconsistent ({len(data)} bytes, {offset} expected)")
    if GS_OP in batch.schema.names:
        ops = pc.take(batch.column(GS_OP), pa.array(sources, type=pa.int32()))
    else:
        ops = pa.array(["i"] * count, type=pa.string())
    arrays.append(pc.cast(ops, schema.field(GS_OP).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _reused(
    same: np.ndarray, values: list[Any], batch: pa.RecordBatch, sources: np.ndarray, column: Column, field: pa.Field
) -> pa.Array:
    """The input's values at each output row's source row, with the values the script changed put in."""
    base = pc.take(batch.column(column.same), pa.array(sources, type=pa.int32()))
    if base.type != field.type:
        base = pc.cast(base, field.type)
    if len(values) == 0:
        return base
    try:
        changed = _from_texts(values, column, field.type)
    except BadValue as exc:
        raise BadValue(int(np.flatnonzero(same == 0)[exc.index]), exc.column, exc.value, exc.reason) from None
    return pc.replace_with_mask(base, pa.array(same == 0), changed)


def _from_texts(values: list[Any], column: Column, data_type: pa.DataType) -> pa.Array:
    if column.type == "string":
        return pa.array(values, type=data_type)
    if column.type in ("timestamp", "timestamp_ntz", "date", "decimal"):
        try:
            return pc.cast(pa.array(values, type=pa.string()), data_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.array([_parse(i, v, column, data_type) for i, v in enumerate(values)], type=data_type)
    if column.type == "binary":
        return pa.array([_parse(i, v, column, data_type) for i, v in enumerate(values)], type=data_type)
    try:
        return pa.array(values, type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        for i, value in enumerate(values):
            try:
                pa.array([value], type=data_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                raise BadValue(i, column.name, value, f"does not fit {data_type}: {exc}") from None
        raise


def _parse(index: int, value: Any, column: Column, data_type: pa.DataType) -> Any:
    """One text value the vectorised cast refused: parsed leniently, or a `BadValue` naming it."""
    if value is None:
        return None
    try:
        if column.type == "binary":
            return base64.b64decode(value, validate=True)
        if column.type == "decimal":
            number = Decimal(str(value).strip())
            if not number.is_finite():
                raise ValueError("is not a finite number")
            rounded = number.quantize(Decimal(1).scaleb(-data_type.scale), rounding=ROUND_HALF_UP)
            if len(rounded.as_tuple().digits) > data_type.precision:
                raise ValueError(f"does not fit decimal({data_type.precision},{data_type.scale})")
            return rounded
        moment = _moment(str(value).strip())
        if column.type == "date":
            return moment if isinstance(moment, date) and not isinstance(moment, datetime) else moment.date()
        if not isinstance(moment, datetime):
            moment = datetime(moment.year, moment.month, moment.day)
        if column.type == "timestamp":
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo is not None else moment
    except (ValueError, InvalidOperation, ArithmeticError, TypeError) as exc:
        reason = str(exc) if str(exc).startswith(("is ", "does ")) else f"cannot be converted to {column.type}"
        if column.type in ("timestamp", "timestamp_ntz", "date") and reason.startswith("cannot"):
            reason += " (use ISO 8601 text, a Date or epoch milliseconds)"
        raise BadValue(index, column.name, value, reason) from None


def _moment(text: str) -> date | datetime:
    try:
        return date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
    except ValueError:
        return datetime.fromisoformat(text)
