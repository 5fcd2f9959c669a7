"""Many Confluent-framed Avro payloads decoded at once, straight into Arrow.

Payloads framed with one writer schema id are schemaless Avro records of that schema. Stripped of their frame and
concatenated they are exactly one data block of an Avro object container file whose header carries the writer
schema, and a Rust reader (polars) decodes that block into Arrow columns: ~0.6 µs per record of the bench's, where
fastavro's per-record reader plus ``from_pylist`` take ~8. Schema resolution then happens on the columns: a reader
field found in the writer is taken (cast when Avro promotes its type), one the writer lacks takes its default.

`BlockPlan` says how one writer schema's payloads become the decoder's batch, or `plan` returns None where this path
does not apply (maps, wide decimals, recursive records, a type change Avro resolves by more than a cast): the
per-record path decodes those. The decoder checks every batch against its last record decoded per record, so a
frame that lies about its length cannot shift the columns unnoticed.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

PREFIX_FIELD = "__streamling_frame__"
SYNC = b"streamling-avro!"
"""A container's 16-byte sync marker: any value works, as long as the header and the block carry the same."""
PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}
"""Avro's type promotions (writer → reader): each is an Arrow cast."""
RAW_LOGICAL = {"time-millis", "time-micros", "uuid"}
"""Logical types read as their underlying type: time of day as int/long (Spark has none), a uuid as its string."""
_PLAIN = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_LOGICAL = {
    "decimal",
    "date",
    "uuid",
    "time-millis",
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
    "local-timestamp-millis",
    "local-timestamp-micros",
}


def varint(value: int) -> bytes:
    """Avro's long encoding: zig-zag, then base-128."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Unframed(Exception):
    """A batch holding a payload framed otherwise than the plan's (or none): it goes per record, the plan stays."""


@dataclass(frozen=True)
class BlockPlan:
    header: bytes
    """The container's header: magic, metadata with the writer's record schema, sync marker."""
    prefix: bytes
    """What every payload starts with: the 5-byte frame, plus a root union's record branch index. The container's
    record reads it as a first field (a ``fixed``), so the payloads are joined as they are, without a slice each,
    and a payload framed otherwise shows in that column."""
    sources: tuple[tuple[str, str | None], ...]
    """Per output column: the writer column it is read from, or None when the writer lacks it (its default)."""
    target: pa.Schema
    enums: Mapping[str, tuple[str, ...]]
    """Writer columns holding an enum, read as the int index Avro encodes it as, and their symbols."""

    def decode(self, payloads: Sequence[bytes], defaults: pa.RecordBatch) -> pa.RecordBatch | None:
        """The payloads as one batch of `target`; `defaults` is one decoded row, whose values fill the columns the
        writer lacks. None when polars cannot read the block; `Unframed` when a payload does not start with `prefix`
        (another schema id, a null): not this plan's fault."""
        os.environ.setdefault("POLARS_MAX_THREADS", "1")  # read at polars' import: one Spark task per core already
        import polars as pl
        import pyarrow.compute as pc

        try:
            body = b"".join(payloads)
        except TypeError:  # a null payload (a tombstone)
            raise Unframed from None
        block = b"".join((self.header, varint(len(payloads)), varint(len(body)), body, SYNC))
        try:
            table = pl.read_avro(io.BytesIO(block)).to_arrow()
        except BaseException as exc:  # polars reports some malformed input as a Rust panic (a BaseException)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            table = None
        if table is None or table.num_rows != len(payloads):
            if not all(p.startswith(self.prefix) for p in payloads):  # records of another schema misled the read
                raise Unframed
            return None
        frames = table.column(PREFIX_FIELD)
        if frames.null_count or not pc.all(pc.equal(frames, pa.scalar(self.prefix, frames.type))).as_py():
            raise Unframed
        columns = []
        index = pa.array([0] * len(payloads), pa.int32()) if any(s is None for _, s in self.sources) else None
        try:
            for field, (name, source) in zip(self.target, self.sources, strict=True):
                if source is None:
                    columns.append(defaults.column(name).take(index))
                else:
                    values = table.column(source).combine_chunks()
                    if source in self.enums:
                        values = pa.DictionaryArray.from_arrays(values, pa.array(self.enums[source], pa.string()))
                    columns.append(_cast(values, field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        return pa.RecordBatch.from_arrays(columns, schema=self.target)


def _cast(values: pa.Array, to: pa.DataType) -> pa.Array:
    """`values` as type `to`. Arrow refuses a cast into a non-nullable field of a struct that is itself null (the
    per-record path's types say not null where Avro says so, under a nullable parent): cast into the same type with
    every field nullable, then view it as `to` (the same memory layout)."""
    try:
        return values.cast(to)
    except pa.ArrowInvalid:
        return _retyped(values.cast(_nullable(to)), to)


def _retyped(values: pa.Array, to: pa.DataType) -> pa.Array:
    """The same values under `to`, which differs only in fields' nullability (rebuilt from the children: Arrow's
    `view` refuses it too)."""
    if values.type == to:
        return values
    mask = values.is_null() if values.null_count else None
    if pa.types.is_struct(to):
        children = [_retyped(values.field(i), to.field(i).type) for i in range(to.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(to), mask=mask)
    if pa.types.is_list(to):
        return pa.ListArray.from_arrays(values.offsets, _retyped(values.flatten(), to.value_type), type=to, mask=mask)
    return values.cast(to)


def _nullable(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(dtype):
        return pa.struct(
            [
                dtype.field(i).with_type(_nullable(dtype.field(i).type)).with_nullable(True)
                for i in range(dtype.num_fields)
            ]
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field
        inner = item.with_type(_nullable(item.type)).with_nullable(True)
        return pa.list_(inner) if pa.types.is_list(dtype) else pa.large_list(inner)
    return dtype


def plan(frame: bytes, writer: Any, reader: Mapping[str, Any], target: pa.Schema) -> BlockPlan | None:
    """How payloads framed with `frame` and written with the `writer` schema (parsed JSON) become `target` batches
    for the `reader` record, or None when this path does not apply to them."""
    import fastavro

    branch = b""
    if isinstance(writer, list):  # a root union: the original's sink registers ["null", {record}]
        records = [i for i, m in enumerate(writer) if isinstance(m, dict) and m.get("type") == "record"]
        if len(records) != 1 or records[0] > 63 or any(m != "null" for i, m in enumerate(writer) if i != records[0]):
            return None
        branch = varint(records[0])
        writer = writer[records[0]]
    if not isinstance(writer, dict) or writer.get("type") != "record":
        return None
    writer_named: dict[str, Any] = {}
    reader_named: dict[str, Any] = {}
    try:
        parsed_writer = fastavro.parse_schema(json.loads(json.dumps(writer)), named_schemas=writer_named)
        parsed_reader = fastavro.parse_schema(json.loads(json.dumps(reader)), named_schemas=reader_named)
    except Exception:
        return None
    name = parsed_writer.get("name", "")
    if not all(_supported(f["type"], writer_named, (name,), top=True) for f in parsed_writer["fields"]):
        return None
    by_name = {f["name"]: f for f in parsed_writer["fields"]}
    sources: list[tuple[str, str | None]] = []
    for field, out in zip(parsed_reader["fields"], target, strict=True):
        found = by_name.get(field["name"]) or next((by_name[a] for a in field.get("aliases", ()) if a in by_name), None)
        if found is None:
            if "default" not in field:
                return None  # fastavro refuses to resolve it: the per-record path says so, naming the record
            sources.append((out.name, None))
            continue
        if not _resolvable(found["type"], writer_named, field["type"], reader_named):
            return None
        sources.append((out.name, found["name"]))
    enums: dict[str, tuple[str, ...]] = {}
    fields = []
    for f in parsed_writer["fields"]:
        kind = writer_named.get(f["type"], f["type"]) if isinstance(f["type"], str) else f["type"]
        if isinstance(kind, dict) and kind.get("type") == "enum":  # an enum is its index's int, encoded alike
            enums[f["name"]] = tuple(kind["symbols"])
            f = {**f, "type": "int"}
        fields.append(f)
    prefix = frame + branch
    framing = {"name": PREFIX_FIELD, "type": {"type": "fixed", "name": PREFIX_FIELD, "size": len(prefix)}}
    container = _for_polars({**parsed_writer, "fields": [framing, *fields]}, writer_named, set())
    meta = {"avro.schema": json.dumps(container).encode(), "avro.codec": b"null"}
    header = b"Obj\x01" + varint(len(meta))
    for key, value in meta.items():
        header += varint(len(key)) + key.encode() + varint(len(value)) + value
    header += varint(0) + SYNC
    return BlockPlan(header, prefix, tuple(sources), target, enums)


def _supported(schema: Any, named: Mapping[str, Any], within: tuple[str, ...], top: bool = False) -> bool:
    """Whether polars reads `schema` into the Arrow types the per-record path gives (after a cast); `top`: the type
    of one of the root record's fields: an enum there is read as its index (polars 2.1 panics on a nested enum, and
    its categoricals are not needed)."""
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        return len(members) == 1 and _supported(members[0], named, within)
    if isinstance(schema, str):
        if schema in _PLAIN:
            return schema != "null"
        if schema in within or schema not in named:
            return False
        return _supported(named[schema], named, (*within, schema), top)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal" and int(schema.get("precision", 0)) > 38:
        return False  # wide decimals become exact strings per value
    if logical is not None and logical not in _LOGICAL:
        return False
    if kind == "record":
        inside = (*within, schema.get("name", ""))
        return all(_supported(f["type"], named, inside) for f in schema["fields"])
    if kind == "array":
        return _supported(schema["items"], named, within)
    if kind == "enum":
        return top
    if kind == "fixed":
        return True
    if kind == "map":
        return False
    if isinstance(kind, str | list | dict):
        return _supported(kind, named, within, top)
    return False


def _resolvable(writer: Any, writer_named: Mapping[str, Any], reader: Any, reader_named: Mapping[str, Any]) -> bool:
    """A writer field's type the reader's resolves by a cast: the same type, a promotion, or nullable in the reader
    only. Anything else (a nested record that changed, an enum with other symbols) goes per record."""
    w_inner, w_null = _unwrap(_expand(writer, writer_named))
    r_inner, r_null = _unwrap(_expand(reader, reader_named))
    if w_null and not r_null:
        return False
    if w_inner == r_inner:
        return True
    return isinstance(w_inner, str) and isinstance(r_inner, str) and (w_inner, r_inner) in PROMOTIONS


def _unwrap(schema: Any) -> tuple[Any, bool]:
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        return (members[0] if len(members) == 1 else members), len(members) < len(schema)
    return schema, False


def _expand(schema: Any, named: Mapping[str, Any], within: tuple[str, ...] = ()) -> Any:
    """`schema` with every named reference replaced by its definition and documentation dropped: two types are the
    same when their expansions are equal."""
    if isinstance(schema, list):
        return [_expand(m, named, within) for m in schema]
    if isinstance(schema, str):
        if schema in named and schema not in within:
            return _expand(named[schema], named, (*within, schema))
        return schema
    out = {
        k: v
        for k, v in schema.items()
        if k not in ("doc", "aliases", "default", "__fastavro_parsed", "__named_schemas")
    }
    if out.get("type") == "record":
        out["fields"] = [
            {"name": f["name"], "type": _expand(f["type"], named, (*within, out.get("name", "")))}
            for f in out["fields"]
        ]
    elif out.get("type") == "array":
        out["items"] = _expand(out["items"], named, within)
    elif isinstance(out.get("type"), list | dict):
        out["type"] = _expand(out["type"], named, within)
    return out


def _for_polars(schema: Any, named: Mapping[str, Any], emitted: set[str]) -> Any:
    """The writer schema (as fastavro parsed it) as polars reads it: every reference to a named type replaced by a
    copy of its definition under a new name (polars reports a block that references one as out of spec; names play
    no part in decoding), and without the `RAW_LOGICAL` types, which the per-record path reads raw too."""
    if isinstance(schema, list):
        return [_for_polars(m, named, emitted) for m in schema]
    if isinstance(schema, str):
        return _for_polars(named[schema], named, emitted) if schema in named else schema
    out = {k: v for k, v in schema.items() if not k.startswith("__")}
    if out.get("logicalType") in RAW_LOGICAL:
        out.pop("logicalType")
    if "name" in out and out.get("type") in ("record", "enum", "fixed"):
        name = out["name"]
        while name in emitted:
            name = f"{name}_"
        emitted.add(name)
        out["name"] = name
        out.pop("namespace", None)
    if out.get("type") == "record":
        out["fields"] = [{**f, "type": _for_polars(f["type"], named, emitted)} for f in out["fields"]]
    elif out.get("type") == "array":
        out["items"] = _for_polars(out["items"], named, emitted)
    elif isinstance(out.get("type"), dict | list) or (isinstance(out.get("type"), str) and out["type"] in named):
        out["type"] = _for_polars(out["type"], named, emitted)  # a type wrapped in a type, or a named reference
    return out
