"""Request and response bodies of HTTP handlers and webhooks.

Payload version 0 sends each row as a JSON object including ``_gs_op``; version 1 sends
``{"metadata": {"op": "i|u|d"}, "data": {row without _gs_op}}``. A request carries one such item (one row
per request) or a JSON array of up to `rows_per_request` items. Values are JSON as elsewhere in the engine:
timestamps and dates in ISO 8601, decimals as exact strings, binary as base64.

A handler's response has the same shape: an item or an array of items (an empty body or ``null``: none).
Items become the output rows, converted to the output schema column by column; unknown keys are ignored and
missing ones are NULL. An item's op is its own (``_gs_op`` in v0, ``metadata.op`` in v1) when it has one,
else the sent row's: by position when the response has as many items as the request had rows, else the
request's single op when all its rows share one; otherwise the response is an error.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from streamling.core.rows import GS_OP, json_default

OPS = ("i", "u", "d")
SHOWN_VALUE_CHARS = 80


class PayloadError(ValueError):
    """A response that does not have the expected shape or does not fit the output schema."""


@dataclass(frozen=True)
class Outgoing:
    """One request: its body and the ops of the rows it carries (for counts and for default output ops)."""

    body: bytes
    ops: list[str]

    @property
    def rows(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class PayloadFormat:
    version: int
    rows_per_request: int
    one_row: bool

    def requests(self, batches: Iterator[pa.RecordBatch]) -> Iterator[Outgoing]:
        """The request bodies for a stream of record batches, in row order; requests are filled across batch
        boundaries, so only the last one of the stream may be short."""
        size = 1 if self.one_row else self.rows_per_request
        items: list[Any] = []
        ops: list[str] = []
        for batch in batches:
            if not batch.num_rows:
                continue
            new_items, new_ops = self.items(batch)
            items += new_items
            ops += new_ops
            full = len(items) // size * size
            for start in range(0, full, size):
                yield self.outgoing(items[start : start + size], ops[start : start + size])
            items, ops = items[full:], ops[full:]
        if items:
            yield self.outgoing(items, ops)

    def items(self, batch: pa.RecordBatch) -> tuple[list[Any], list[str]]:
        """The payload item of every row of `batch`, and every row's op (NULL or missing: ``i``)."""
        if GS_OP in batch.schema.names:
            ops = [op or "i" for op in batch.column(GS_OP).to_pylist()]
        else:
            ops = ["i"] * batch.num_rows
        batch = _json_ready(batch)
        if self.version == 0:
            return batch.to_pylist(), ops
        data = batch.drop_columns([GS_OP]).to_pylist() if GS_OP in batch.schema.names else batch.to_pylist()
        return [{"metadata": {"op": op}, "data": row} for op, row in zip(ops, data, strict=True)], ops

    def outgoing(self, items: list[Any], ops: list[str]) -> Outgoing:
        return Outgoing(dumps(items[0] if self.one_row else items), ops)


def _json_ready(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Zoned timestamps as zone-less UTC values, which become Python datetimes ~3x faster and are written with
    ``+00:00`` (`orjson.OPT_NAIVE_UTC`), exactly as ``isoformat()`` writes the zoned ones; zone-less timestamps
    are formatted here instead, so they keep no offset."""
    for index, field in enumerate(batch.schema):
        if pa.types.is_timestamp(field.type):
            column = batch.column(index)
            if field.type.tz is not None:
                column = column.cast(pa.timestamp(field.type.unit))
            else:
                column = pc.strftime(column, format="%Y-%m-%dT%H:%M:%S")
            batch = batch.set_column(index, pa.field(field.name, column.type, field.nullable), column)
    return batch


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=json_default, option=orjson.OPT_NAIVE_UTC)


def _same(text: str) -> str:
    return text


def shown(value: Any, scrub: Callable[[str], str] = _same) -> str:
    """A value from a response for an error message: as JSON, scrubbed of secrets, then truncated (in that
    order, so no part of a secret survives the cut)."""
    try:
        text = orjson.dumps(value, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    return _truncated(scrub(text), SHOWN_VALUE_CHARS)


def excerpt(body: bytes, limit: int = 200, scrub: Callable[[str], str] = _same) -> str:
    """The start of a response body on one line, scrubbed of secrets, for error messages."""
    return _truncated(" ".join(scrub(body.decode("utf-8", errors="replace")).split()), limit)


def _truncated(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode_response(
    body: bytes, version: int, sent_ops: list[str], scrub: Callable[[str], str] = _same
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows a handler answered for one request, and their ops (see the module docstring); `scrub` cleans
    the values an error message quotes."""
    if not body.strip():
        return [], []
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise PayloadError(f"the response is not JSON: {excerpt(body, SHOWN_VALUE_CHARS, scrub)}") from None
    if doc is None:
        return [], []
    if isinstance(doc, dict):
        items = [doc]
    elif isinstance(doc, list):
        items = doc
    else:
        raise PayloadError(f"the response must be a JSON object or an array of them, got {shown(doc, scrub)}")
    rows: list[dict[str, Any]] = []
    own_ops: list[str | None] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PayloadError(f"response item {index} is not a JSON object: {shown(item, scrub)}")
        if version == 1:
            data, metadata = item.get("data"), item.get("metadata")
            if not isinstance(data, dict):
                raise PayloadError(
                    f'response item {index} has no "data" object; payload_version 1 answers '
                    f'{{"metadata": {{"op": ...}}, "data": {{...}}}}: {shown(item, scrub)}'
                )
            if metadata is not None and not isinstance(metadata, dict):
                raise PayloadError(f'response item {index}: "metadata" is not an object: {shown(metadata, scrub)}')
            op = (metadata or {}).get("op")
        else:
            data, op = item, item.get(GS_OP)
        if op is not None and op not in OPS:
            raise PayloadError(f'response item {index} has op {shown(op, scrub)}; expected "i", "u" or "d"')
        rows.append(data)
        own_ops.append(op)
    return rows, _resolve_ops(own_ops, sent_ops, version)


def _resolve_ops(own: list[str | None], sent: list[str], version: int) -> list[str]:
    if all(op is not None for op in own):
        return own  # type: ignore[return-value]
    if len(own) == len(sent):
        return [op if op is not None else default for op, default in zip(own, sent, strict=True)]
    if len(set(sent)) == 1:
        return [op if op is not None else sent[0] for op in own]
    where = '"metadata": {"op": ...}' if version == 1 else '"_gs_op"'
    raise PayloadError(
        f"the response has {len(own)} rows for {len(sent)} sent, whose ops differ, so the returned rows' ops "
        f"are ambiguous; give each returned row its own op ({where})"
    )


# ---------------------------------------------------------------------------------------- JSON → Arrow


def to_record_batch(
    rows: list[dict[str, Any]],
    ops: list[str],
    schema: pa.Schema,
    type_names: dict[str, str],
    scrub: Callable[[str], str] = _same,
) -> pa.RecordBatch:
    """Rows from responses as a record batch of `schema`; raises PayloadError naming the field (with its type
    as `type_names` spells it) and the first value that does not fit."""
    arrays = []
    for field in schema:
        if field.name == GS_OP:
            arrays.append(pa.array(ops, field.type))
            continue
        values = [row.get(field.name) for row in rows]
        arrays.append(_column(values, field, type_names.get(field.name, str(field.type)), scrub))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    ValueError,
    TypeError,
    OverflowError,
    ArithmeticError,
)


def _column(values: list[Any], field: pa.Field, type_name: str, scrub: Callable[[str], str]) -> pa.Array:
    if not field.nullable:
        for index, value in enumerate(values):
            if value is None:
                raise PayloadError(
                    f"field '{field.name}' ({type_name}) is missing or null in row {index}, "
                    "but the output schema does not allow NULL there"
                )
    try:
        return convert(values, field.type)
    except _CONVERSION_ERRORS:
        pass
    for value in values:
        if value is None:
            continue
        try:
            convert([value], field.type)
        except _CONVERSION_ERRORS as exc:
            reason = _truncated(scrub(str(exc).splitlines()[0]), SHOWN_VALUE_CHARS) if str(exc) else type(exc).__name__
            raise PayloadError(
                f"field '{field.name}' ({type_name}): {shown(value, scrub)} does not fit ({reason})"
            ) from None
    raise PayloadError(f"field '{field.name}' ({type_name}): the values do not fit together")


def convert(values: list[Any], target: pa.DataType) -> pa.Array:
    """JSON values (as parsed) → an Arrow array of `target`, strictly: a value of the wrong JSON type, a
    fraction for an integer, an overflow or a malformed date is an error, never silently changed."""
    if (
        pa.types.is_struct(target)
        or pa.types.is_list(target)
        or pa.types.is_large_list(target)
        or pa.types.is_map(target)
    ):
        return pa.array(values, type=target)
    if pa.types.is_binary(target) or pa.types.is_large_binary(target):
        return pa.array([None if v is None else _base64(v) for v in values], type=target)
    if pa.types.is_decimal(target):
        return pa.array([None if v is None else _decimal(v) for v in values], type=target)
    inferred = pa.array(values)
    kind = inferred.type
    if pa.types.is_null(kind):
        return pa.nulls(len(values), target)
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
    if pa.types.is_integer(target) or pa.types.is_floating(target):
        _expect(numeric, "a number", values)
        return inferred.cast(target, safe=True)
    if pa.types.is_boolean(target):
        _expect(pa.types.is_boolean(kind), "true or false", values)
        return inferred
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        _expect(pa.types.is_string(kind), "a string", values)
        return inferred.cast(target)
    _expect(pa.types.is_string(kind), "an ISO 8601 string", values)
    if pa.types.is_timestamp(target):
        try:
            return inferred.cast(target, safe=True)
        except _CONVERSION_ERRORS:  # no zone offset where one is expected, or the other way round
            return pa.array([None if v is None else _timestamp(v, target) for v in values], type=target)
    return inferred.cast(target, safe=True)


def _expect(ok: bool, what: str, values: list[Any]) -> None:
    if not ok:
        raise TypeError(f"expected {what}")


def _base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError("expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError("expected a number or a decimal string")
    try:
        number = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        raise ValueError("not a decimal number") from None
    if not number.is_finite():
        raise ValueError("not a finite number")
    return number


def _timestamp(value: Any, target: pa.TimestampType) -> datetime:
    """ISO 8601 in Python's reading: a zone-less time for a zoned column is UTC; a zoned time for a zone-less
    column is converted to UTC."""
    if not isinstance(value, str):
        raise TypeError("expected an ISO 8601 string")
    parsed = datetime.fromisoformat(value.strip())
    if target.tz is not None:
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo is not None else parsed
