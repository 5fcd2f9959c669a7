"""Avro ↔ Spark/Arrow: schema mapping, Confluent-framed decoding into Arrow, and encoding for the sink.

Decoding is the hot path of the Kafka source. Each payload goes through fastavro's C reader once, the
rows become an Arrow batch in one ``from_pylist`` call, and top-level decimals (the costly logical
type) are read as raw bytes and converted to ``decimal128`` with numpy, not one Python Decimal per value.
Decimals wider than Spark's 38 digits, at any depth, are read as raw bytes too and become exact strings; a
schema without them is converted no further after ``from_pylist``.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError, first_line
from streamling.kafka.avro_block import RAW_LOGICAL, BlockPlan, Unframed
from streamling.kafka.avro_block import plan as block_plan

if TYPE_CHECKING:
    from pyspark.sql import types as T

log = logging.getLogger("streamling.kafka")


@functools.cache
def _primitive_types() -> dict[str, T.DataType]:
    from pyspark.sql import types as T

    return {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "bytes": T.BinaryType(),
        "string": T.StringType(),
    }


def _non_null(schema: Any, where: str) -> tuple[Any, bool]:
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) != 1:
            raise StreamlingError.user(f"Avro field '{where}': unions of {members} are not supported")
        return members[0], len(members) < len(schema)
    return schema, False


def root_record(schema: Any, subject: str) -> dict[str, Any]:
    """The record a value schema describes: the schema itself, or the one record of a root union with null,
    which is how the original Streamling's Kafka sink registers its value schemas (``["null", {record}]``)."""
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) == 1 and len(schema) <= 2:
            schema = members[0]
    if isinstance(schema, dict) and schema.get("type") == "record":
        return schema
    raise StreamlingError.user(
        f"schema of subject '{subject}' must be an Avro record, or a union of null and one record"
    )


def parse_named(schema: Any, subject: str) -> tuple[Any, dict[str, Any]]:
    """fastavro's reading of `schema`: named types (record, enum, fixed) under their full names, namespaces
    resolved, and every reference to one as that full name; plus the definitions by full name."""
    import fastavro

    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(schema), named_schemas=named, _write_hint=False)
    except Exception as exc:  # SchemaParseException, UnknownType (a reference to nothing), ValueError
        detail = f"type '{exc.name}' is not defined" if hasattr(exc, "name") else first_line(exc)
        raise StreamlingError.user(f"schema of subject '{subject}' is not valid Avro: {detail}") from None
    return parsed, named


def spark_field(
    name: str, schema: Any, where: str, named: Mapping[str, Any], within: tuple[str, ...] = ()
) -> T.StructField:
    from pyspark.sql import types as T

    inner, nullable = _non_null(schema, where)
    metadata: dict[str, str] = {}
    dtype = _spark_type(inner, where, metadata, named, within)
    return T.StructField(name, dtype, nullable, metadata or None)


def _spark_type(
    schema: Any, where: str, metadata: dict[str, str], named: Mapping[str, Any], within: tuple[str, ...]
) -> T.DataType:
    """`within`: the records being mapped around this type, to refuse one that contains itself."""
    from pyspark.sql import types as T

    if isinstance(schema, str):
        if schema in _primitive_types():
            return _primitive_types()[schema]
        if schema in within:
            raise StreamlingError.user(
                f"Avro field '{where}': record '{schema}' contains itself; a recursive schema cannot map to "
                "Spark columns"
            )
        if schema not in named:
            raise StreamlingError.user(f"Avro field '{where}': type '{schema}' is not defined")
        return _spark_type(named[schema], where, metadata, named, within)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal":
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision <= 38:
            return T.DecimalType(precision, scale)
        metadata[WIDE_DECIMAL_KEY] = f"decimal({precision},{scale})"
        return T.StringType()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType()
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType()
    if logical == "date":
        return T.DateType()
    if logical == "uuid":
        return T.StringType()
    if kind == "record":
        inside = (*within, schema["name"])
        return T.StructType(
            [spark_field(f["name"], f["type"], f"{where}.{f['name']}", named, inside) for f in schema["fields"]]
        )
    if kind == "array":
        item, nullable = _non_null(schema["items"], f"{where}[]")
        return T.ArrayType(_spark_type(item, f"{where}[]", {}, named, within), nullable)
    if kind == "map":
        value, nullable = _non_null(schema["values"], f"{where}{{}}")
        return T.MapType(T.StringType(), _spark_type(value, f"{where}{{}}", {}, named, within), nullable)
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    if isinstance(kind, str | list | dict):
        return _spark_type(kind, where, metadata, named, within)
    raise StreamlingError.user(f"Avro field '{where}': unsupported schema {json.dumps(schema)}")


def spark_schema(schema: Any, subject: str) -> T.StructType:
    """The Spark columns of a record schema (or of a root union of null and one record). Named types may be
    referenced again after their definition (as Debezium's ``before``/``after`` both of record ``Value``), by
    full or, within a namespace, short name."""
    from pyspark.sql import types as T

    root_record(schema, subject)
    parsed, named = parse_named(schema, subject)
    record = root_record(parsed, subject)
    root = (record["name"],)
    return T.StructType([spark_field(f["name"], f["type"], f["name"], named, root) for f in record["fields"]])


def doc_primary_keys(schema: Any, subject: str) -> list[str]:
    """The primary key a record schema declares in its ``doc`` as ``{"primaryKeys": ["id", ...]}`` (as the
    Kafka sink writes it); empty when there is no doc or it is plain text."""
    doc = root_record(schema, subject).get("doc")
    if not isinstance(doc, str):
        return []
    try:
        declared = json.loads(doc)
    except ValueError:
        return []
    if not isinstance(declared, dict) or "primaryKeys" not in declared:
        return []
    keys = declared["primaryKeys"]
    if isinstance(keys, str):
        keys = keys.split(",")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
        raise StreamlingError.user(
            f"schema of subject '{subject}': its doc declares primaryKeys {json.dumps(declared['primaryKeys'])}; "
            'expected a list of column names, as in {"primaryKeys": ["id"]}'
        )
    return [k.strip() for k in keys]


def _references(schema: Any, out: set[str]) -> set[str]:
    """The names referenced (not defined) anywhere in a parsed schema."""
    if isinstance(schema, str):
        if schema not in _primitive_types() and schema != "null":
            out.add(schema)
    elif isinstance(schema, list):
        for member in schema:
            _references(member, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            for f in schema["fields"]:
                _references(f["type"], out)
        elif kind == "array":
            _references(schema["items"], out)
        elif kind == "map":
            _references(schema["values"], out)
        elif isinstance(kind, str | list | dict) and kind not in ("enum", "fixed"):
            _references(kind, out)
    return out


def top_level_decimals(schema: Any, subject: str) -> dict[str, tuple[int, int]]:
    """Top-level decimal fields decoded outside fastavro (as raw bytes, converted with numpy): those whose
    decimal type is written at the field. A named ``fixed`` decimal that is referenced elsewhere too stays with
    fastavro, since stripping its logical type would change every use of it (unless it is wide: see
    `nested_wide_decimals`)."""
    parsed, _ = parse_named(schema, subject)
    shared = _references(parsed, set())
    out: dict[str, tuple[int, int]] = {}
    for f in root_record(parsed, subject)["fields"]:
        inner, _ = _non_null(f["type"], f["name"])
        if not isinstance(inner, dict) or inner.get("logicalType") != "decimal":
            continue
        if inner.get("type") == "fixed" and inner.get("name") in shared:
            continue
        out[f["name"]] = (int(inner["precision"]), int(inner.get("scale", 0)))
    return out


def _is_wide(schema: Mapping[str, Any]) -> bool:
    return schema.get("logicalType") == "decimal" and int(schema.get("precision", 0)) > 38


def _strip(schema: Any, top_level_decimals: set[str] | None, depth: int = 0, field: str | None = None) -> Any:
    """Drop logical types that are decoded outside fastavro: `RAW_LOGICAL` (kept raw), top-level decimals and every
    wide decimal (a property of the type, so the same at each use of a named one). A named type is stripped
    where it is defined, which holds for every reference to it."""
    if isinstance(schema, list):
        return [_strip(m, top_level_decimals, depth, field) for m in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    logical = out.get("logicalType")
    if (
        logical in RAW_LOGICAL
        or _is_wide(out)
        or (logical == "decimal" and depth == 1 and top_level_decimals is not None and field in top_level_decimals)
    ):
        out.pop("logicalType")
    if out.get("type") == "record":
        out["fields"] = [
            {**f, "type": _strip(f["type"], top_level_decimals, depth + 1, f["name"])} for f in out["fields"]
        ]
    elif out.get("type") == "array":
        out["items"] = _strip(out["items"], top_level_decimals, depth + 1)
    elif out.get("type") == "map":
        out["values"] = _strip(out["values"], top_level_decimals, depth + 1)
    elif isinstance(out.get("type"), dict | list):
        out["type"] = _strip(out["type"], top_level_decimals, depth, field)
    return out


def decimal128_from_bytes(values: pa.Array, precision: int, scale: int) -> pa.Array:
    """Big-endian two's-complement byte strings (Avro decimals) → decimal128, vectorised with numpy."""
    values = values.cast(pa.binary())
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    validity = pc.is_valid(values).buffers()[1] if values.null_count else None
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=values.offset * 4)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max(initial=0) > 16:
        raise StreamlingError.user(f"decimal({precision},{scale}) value longer than 16 bytes")
    out = np.zeros((n, 16), dtype=np.uint8)
    nonempty = lengths > 0
    negative = np.zeros(n, dtype=bool)
    negative[nonempty] = data[offsets[:-1][nonempty]] >= 0x80
    out[negative] = 0xFF
    total = int(lengths.sum())
    if total:
        rows = np.repeat(np.arange(n), lengths)
        starts = np.repeat(offsets[:-1], lengths)
        cols = 16 - np.repeat(lengths, lengths) + (np.arange(offsets[0], offsets[0] + total) - starts)
        out[rows, cols] = data[offsets[0] : offsets[0] + total]
    little = np.ascontiguousarray(out[:, ::-1])
    buffers = [validity, pa.py_buffer(little.tobytes())]
    return pa.Array.from_buffers(pa.decimal128(precision, scale), n, buffers, null_count=values.null_count)


Converter = Callable[[pa.Array], pa.Array]


def nested_wide_decimals(
    schema: Any, named: Mapping[str, Any], final: pa.DataType
) -> tuple[pa.DataType, Converter | None]:
    """For a parsed Avro type that maps to Arrow type `final`: the type fastavro's rows are read into, where
    each wide decimal (stripped to its bytes) is ``binary``, and the conversion from it to `final` (wide decimals
    become exact strings); ``(final, None)`` when the type holds no wide decimal. Unions other than with null
    and recursive records were refused by `spark_schema` before. The conversion takes arrays as ``from_pylist``
    builds them (not sliced: Arrow cannot rebuild a sliced list or map with nulls from its offsets)."""
    if isinstance(schema, list):
        schema = next(m for m in schema if m != "null")
    if isinstance(schema, str):
        if schema not in named:
            return final, None
        schema = named[schema]
    if _is_wide(schema):
        scale = int(schema.get("scale", 0))
        return pa.binary(), lambda values: wide_decimal_strings(values, scale)
    kind = schema.get("type")
    if schema.get("logicalType") is not None:
        return final, None
    if kind == "record":
        parts = [nested_wide_decimals(f["type"], named, final.field(i).type) for i, f in enumerate(schema["fields"])]
        if all(convert is None for _, convert in parts):
            return final, None
        fields = list(final)

        def struct(values: pa.Array) -> pa.Array:
            children = [values.field(i) for i in range(len(parts))]
            return pa.StructArray.from_arrays(
                [c if convert is None else convert(c) for c, (_, convert) in zip(children, parts, strict=True)],
                fields=fields,
                mask=values.is_null() if values.null_count else None,
            )

        return pa.struct([f.with_type(raw) for f, (raw, _) in zip(fields, parts, strict=True)]), struct
    if kind == "array":
        raw, convert = nested_wide_decimals(schema["items"], named, final.value_type)
        if convert is None:
            return final, None

        def array(values: pa.Array) -> pa.Array:
            mask = values.is_null() if values.null_count else None
            return pa.ListArray.from_arrays(values.offsets, convert(values.values), type=final, mask=mask)

        return pa.list_(final.value_field.with_type(raw)), array
    if kind == "map":
        raw, convert = nested_wide_decimals(schema["values"], named, final.item_type)
        if convert is None:
            return final, None

        def map_(values: pa.Array) -> pa.Array:
            mask = values.is_null() if values.null_count else None
            return pa.MapArray.from_arrays(values.offsets, values.keys, convert(values.items), type=final, mask=mask)

        return pa.map_(final.key_field, final.item_field.with_type(raw)), map_
    if isinstance(kind, str | list | dict):
        return nested_wide_decimals(kind, named, final)
    return final, None


def wide_decimal_strings(values: pa.Array, scale: int) -> pa.Array:
    """Decimals wider than 38 digits as exact strings (never exponent notation)."""
    out = []
    for raw in values.cast(pa.binary()).to_pylist():
        if raw is None:
            out.append(None)
            continue
        out.append(exact_decimal(int.from_bytes(raw, "big", signed=True), scale))
    return pa.array(out, pa.string())


def exact_decimal(unscaled: int, scale: int) -> str:
    """``unscaled * 10**-scale`` as a plain decimal string, exact at any precision."""
    digits = str(abs(unscaled))
    if scale > 0:
        digits = digits.rjust(scale + 1, "0")
        digits = f"{digits[:-scale]}.{digits[-scale:]}"
    return f"-{digits}" if unscaled < 0 else digits


class AvroDecoder:
    """Decodes Confluent-framed payloads (magic byte 0, 4-byte schema id) against one reader schema."""

    def __init__(
        self,
        reader_schema: Mapping[str, Any],
        reader_version: int,
        subject: str,
        topic: str,
        fetch_writer: Callable[[int], tuple[str, list[tuple[str, int]]]],
        validate_ordering: bool = True,
        overrides: Mapping[int, int] | None = None,
        reader_id: int | None = None,
    ) -> None:
        """`overrides`: writer schema id found in a frame → schema id to decode it with instead. `reader_id`: the
        reader schema's id, whose records then need no registry lookup (a worker's first read asked for it)."""
        import fastavro

        self._fastavro = fastavro
        self.subject = subject
        self.topic = topic
        self.reader_version = reader_version
        self.validate_ordering = validate_ordering
        self.fetch_writer = fetch_writer
        self.overrides = dict(overrides or {})
        from pyspark.sql.pandas.types import to_arrow_type

        self.columns = spark_schema(reader_schema, subject)
        self.decimals = top_level_decimals(reader_schema, subject)
        self.nullable_root = isinstance(reader_schema, list)  # a null payload value is then possible
        self.reader = fastavro.parse_schema(_strip(copy.deepcopy(reader_schema), set(self.decimals)))
        parsed, named = parse_named(reader_schema, subject)
        raw_fields = []
        self.converters: dict[str, Converter] = {}  # columns holding wide decimals that fastavro left as bytes
        for field, avro in zip(self.columns.fields, root_record(parsed, subject)["fields"], strict=True):
            if field.name in self.decimals:
                raw_fields.append(pa.field(field.name, pa.binary(), field.nullable))
                continue
            final = to_arrow_type(field.dataType, timezone="UTC")
            raw, convert = nested_wide_decimals(avro["type"], named, final)
            if convert is not None:
                self.converters[field.name] = convert
            raw_fields.append(pa.field(field.name, raw, field.nullable))
        self.raw_schema = pa.schema(raw_fields)
        self._writers: dict[int, tuple[Any, Any]] = {}
        self._resolved: dict[bytes, tuple[Any, Any]] = {}  # 5-byte frame header -> (writer, reader)
        self._reader_record = root_record(copy.deepcopy(reader_schema), subject)
        self._writer_schemas: dict[int, Any] = {}  # schema id -> the writer schema as the registry gave it
        self._plans: dict[bytes, BlockPlan | None] | None = None if self.converters else {}
        """Per frame, how its payloads are decoded as one block (None: per record); None for a reader schema
        holding wide decimals, which become exact strings one value at a time."""
        if reader_id is not None:
            self._learn(reader_id, copy.deepcopy(reader_schema))

    def _writer(self, schema_id: int, where: str) -> tuple[Any, Any]:
        """(writer schema, reader schema or None when they are identical: no resolution needed)."""
        writer = self._writers.get(schema_id)
        if writer is None:
            schema_str, versions = self.fetch_writer(schema_id)
            own = [v for s, v in versions if s == self.subject]
            if self.validate_ordering and own and min(own) > self.reader_version:
                raise StreamlingError.user(
                    f"{where} was written with schema id {schema_id} (version {min(own)} of subject "
                    f"'{self.subject}'), newer than the reader schema (version {self.reader_version}) captured at "
                    "start; restart the pipeline to read with the new schema, or set "
                    "validate_writer_schema_ordering: false"
                )
            writer = self._learn(schema_id, json.loads(schema_str))
        return writer

    def _learn(self, schema_id: int, schema: Any) -> tuple[Any, Any]:
        self._writer_schemas[schema_id] = schema
        parsed = self._fastavro.parse_schema(_strip(copy.deepcopy(schema), set(self.decimals)))
        writer = (parsed, None if parsed == self.reader else self.reader)
        self._writers[schema_id] = writer
        return writer

    def decode(
        self,
        payloads: Sequence[bytes | None],
        messages: Sequence[Any],
        partition: int,
        rejected: list[tuple[int, str]] | None = None,
    ) -> pa.RecordBatch:
        """Decode one partition's payloads; `messages` (with ``offset()``) only serve error messages.

        A bad record raises a user error naming it, unless `rejected` is given: then its index and error are
        appended there and the batch holds the other records only.

        Payloads of one writer schema are decoded as one Avro block (`avro_block`) when the schema allows; anything
        that path does not take (mixed schema ids, a bad record, a block that disagrees with its last record decoded
        alone) goes through fastavro one record at a time."""
        frame = None
        if self._plans is not None and payloads:
            frame, batch = self._decode_block(payloads, partition, messages[-1].offset())
            if batch is not None:
                return batch
        rows = self._decode_rows(payloads, messages, partition, rejected)
        if frame is not None and self._plans is not None and self._plans.get(frame) is not None:
            if rejected is None or not rejected:  # every record was fine: the block path cannot read this schema
                log.debug("topic '%s': schema frame %s is decoded per record from now", self.topic, frame.hex())
                self._plans[frame] = None
        return self._to_batch(rows)

    def _decode_block(
        self, payloads: Sequence[bytes | None], partition: int, last_offset: int
    ) -> tuple[bytes | None, pa.RecordBatch | None]:
        """(the frame tried, the batch) — the batch None when this path does not apply to these payloads."""
        last = payloads[-1]
        where = f"message at topic '{self.topic}' partition {partition} offset {last_offset}"
        try:
            probe = self._to_batch([self._decode_one(last, where)])
        except (BadRecord, StreamlingError):  # the per-record path names the first record at fault, in order
            return None, None
        assert last is not None
        frame = last[:5]
        if frame not in self._plans:
            self._plans[frame] = self._plan(frame, probe.schema)
        plan = self._plans[frame]
        if plan is None:
            return None, None
        try:
            batch = plan.decode(payloads, probe)  # type: ignore[arg-type]
        except Unframed:
            return None, None
        if batch is None:
            return frame, None
        tail = batch.slice(batch.num_rows - 1)
        if not all(_same(a, b) for a, b in zip(tail.columns, probe.columns, strict=True)):
            return frame, None
        return frame, batch

    def _plan(self, frame: bytes, target: pa.Schema) -> BlockPlan | None:
        framed = int.from_bytes(frame[1:5], "big")
        writer = self._writer_schemas.get(self.overrides.get(framed, framed))
        if writer is None:
            return None
        try:
            return block_plan(frame, writer, self._reader_record, target)
        except Exception as exc:  # a schema this path misreads must never fail the read: per record it goes
            log.debug("topic '%s': schema frame %s decoded per record: %s", self.topic, frame.hex(), exc)
            return None

    def _decode_rows(
        self,
        payloads: Sequence[bytes | None],
        messages: Sequence[Any],
        partition: int,
        rejected: list[tuple[int, str]] | None,
    ) -> list:
        read = self._fastavro.schemaless_reader
        resolved = self._resolved
        rows = []
        append = rows.append
        try:
            for payload in payloads:
                writer, reader = resolved[payload[:5]]  # KeyError: a new schema id, or a malformed frame
                append(read(io.BytesIO(payload[5:]), writer, reader))
            if self.nullable_root and None in rows:
                raise BadRecord("null value")  # found and named by the slow path
        except Exception:
            rows = self._decode_checked(payloads, [m.offset() for m in messages], partition, rejected)
        return rows

    def _to_batch(self, rows: list) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pylist(rows, schema=self.raw_schema)
        if not self.decimals and not self.converters:
            return batch
        arrays = []
        for field, column in zip(self.columns.fields, batch.columns, strict=True):
            if field.name in self.decimals:
                precision, scale = self.decimals[field.name]
                column = (
                    decimal128_from_bytes(column, precision, scale)
                    if precision <= 38
                    else wide_decimal_strings(column, scale)
                )
            elif field.name in self.converters:
                column = self.converters[field.name](column)
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)

    def _decode_checked(
        self,
        payloads: Sequence[bytes | None],
        offsets: Sequence[int],
        partition: int,
        rejected: list[tuple[int, str]] | None,
    ) -> list:
        """The slow path: validate every frame, learn new schema ids, and name the offending message."""
        rows = []
        for index, (payload, offset) in enumerate(zip(payloads, offsets, strict=True)):
            where = f"message at topic '{self.topic}' partition {partition} offset {offset}"
            try:
                rows.append(self._decode_one(payload, where))
            except BadRecord as exc:
                if rejected is None:
                    raise StreamlingError.user(f"{where}{exc}") from None
                rejected.append((index, f"{where}{exc}"))
        return rows

    def _decode_one(self, payload: bytes | None, where: str) -> Any:
        if not payload:
            raise BadRecord(" has an empty payload (tombstone); Avro records are required")
        if payload[0] != 0:
            raise BadRecord(f": not Confluent-framed Avro (first byte 0x{payload[0]:02x}, expected 0x00)")
        if len(payload) < 5:
            raise BadRecord(
                f": not Confluent-framed Avro ({len(payload)} bytes; a frame starts with 0x00 and a 4-byte schema id)"
            )
        frame = payload[:5]
        if frame not in self._resolved:
            framed = int.from_bytes(payload[1:5], "big")
            schema_id = self.overrides.get(framed, framed)
            try:
                self._resolved[frame] = self._writer(schema_id, where)
            except StreamlingError as exc:
                # A registry that cannot answer, or a stale reader schema, is not this record's fault: fail the
                # run (naming the record). A user error from the registry lookup (an id it does not know) is.
                if exc.message.startswith(where):
                    raise
                if exc.retriable:
                    raise exc.context(where) from None
                which = f"{framed} (read as {schema_id}, schema_id_overrides)" if framed != schema_id else framed
                raise BadRecord(f": schema id {which}: {exc.message}") from None
        writer, reader = self._resolved[frame]
        try:
            row = self._fastavro.schemaless_reader(io.BytesIO(payload[5:]), writer, reader)
        except Exception as exc:
            raise BadRecord(f": cannot decode Avro: {exc}") from None
        if row is None:
            raise BadRecord(
                " holds an Avro null (the null branch of the root union), like a tombstone; Avro records are required"
            )
        return row


def _same(a: pa.Array, b: pa.Array) -> bool:
    """Equal values, NaN equal to NaN (Arrow's `equals` says it is not)."""
    return a.equals(b) or str(a.to_pylist()) == str(b.to_pylist())


class BadRecord(Exception):
    """A record that cannot be read (its text continues the ``message at …`` that names it)."""


def avro_schema_for(schema: T.StructType, name: str, primary_key: Sequence[str] = ()) -> dict[str, Any]:
    """An Avro record schema for a Spark schema (the Kafka sink registers it); every field nullable. Each
    struct becomes a record named after its path, unique within the schema (a name defined twice is invalid
    Avro). The primary key goes into the record's ``doc`` as ``{"primaryKeys": [...]}``, where a Kafka source
    reading the topic finds it."""
    from pyspark.sql import types as T

    safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    root = safe if safe[:1].isalpha() else f"r_{safe}"
    used = {root}

    def record_name(path: str) -> str:
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in f"{root}_{path}")
        candidate, n = base, 1
        while candidate in used:
            n += 1
            candidate = f"{base}_{n}"
        used.add(candidate)
        return candidate

    def avro_type(dtype: T.DataType, field: str) -> Any:
        if isinstance(dtype, T.BooleanType):
            return "boolean"
        if isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType):
            return "int"
        if isinstance(dtype, T.LongType):
            return "long"
        if isinstance(dtype, T.FloatType):
            return "float"
        if isinstance(dtype, T.DoubleType):
            return "double"
        if isinstance(dtype, T.StringType):
            return "string"
        if isinstance(dtype, T.BinaryType):
            return "bytes"
        if isinstance(dtype, T.DecimalType):
            return {"type": "bytes", "logicalType": "decimal", "precision": dtype.precision, "scale": dtype.scale}
        if isinstance(dtype, T.TimestampType):
            return {"type": "long", "logicalType": "timestamp-micros"}
        if isinstance(dtype, T.TimestampNTZType):
            return {"type": "long", "logicalType": "local-timestamp-micros"}
        if isinstance(dtype, T.DateType):
            return {"type": "int", "logicalType": "date"}
        if isinstance(dtype, T.ArrayType):
            return {"type": "array", "items": ["null", avro_type(dtype.elementType, field)]}
        if isinstance(dtype, T.MapType):
            return {"type": "map", "values": ["null", avro_type(dtype.valueType, field)]}
        if isinstance(dtype, T.StructType):
            return {
                "type": "record",
                "name": record_name(field),
                "fields": [
                    {"name": f.name, "type": ["null", avro_type(f.dataType, f"{field}_{f.name}")], "default": None}
                    for f in dtype.fields
                ],
            }
        raise StreamlingError.user(f"column '{field}' of type {dtype.simpleString()} cannot be written as Avro")

    out: dict[str, Any] = {"type": "record", "name": root}
    if primary_key:
        out["doc"] = json.dumps({"primaryKeys": list(primary_key)})
    out["fields"] = [
        {"name": f.name, "type": ["null", avro_type(f.dataType, f.name)], "default": None} for f in schema.fields
    ]
    return out
