"""The Avro block path (`streamling.kafka.avro_block`) against the per-record path it replaces: the same Arrow batch,
value for value and type for type, on every Avro type the Kafka source supports (random schemas and records), on
schema evolution, and on the records it must leave to the per-record path (bad frames, mixed schema ids)."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamling.errors import StreamlingError
from streamling.kafka.avro import AvroDecoder

UTC = dt.UTC


class Offset:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def encode(schema: Any, record: Any, schema_id: int = 1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(json.dumps(schema))), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def decoders(reader: Any, writers: dict[int, Any]) -> tuple[AvroDecoder, AvroDecoder]:
    """(block path on, block path off) for one reader schema and the registry's writer schemas by id."""
    registry = {sid: (json.dumps(schema), [("t-value", sid)]) for sid, schema in writers.items()}
    version = max(writers)
    on = AvroDecoder(reader, version, "t-value", "t", registry.__getitem__)
    off = AvroDecoder(reader, version, "t-value", "t", registry.__getitem__)
    off._plans = None
    return on, off


def decode_both(
    reader: Any, writers: dict[int, Any], payloads: list[bytes], rejected: bool = False
) -> tuple[Any, AvroDecoder]:
    """Decodes twice with each path (the block path plans on first sight); asserts both paths agree."""
    on, off = decoders(reader, writers)
    offsets = [Offset(i) for i in range(len(payloads))]
    for _ in range(2):
        got_on, got_off = ([] if rejected else None), ([] if rejected else None)
        a = on.decode(payloads, offsets, 3, got_on)
        b = off.decode(payloads, offsets, 3, got_off)
        assert a.schema.types == b.schema.types
        assert a.schema.names == b.schema.names
        assert str(a.to_pylist()) == str(b.to_pylist())
        assert got_on == got_off
    return (a, got_on), on


# -- random schemas and records of every supported type ------------------------------------------------------------

_names = itertools.count()


def _name() -> str:
    return f"T{next(_names)}"


def _datetimes(unit_us: int) -> st.SearchStrategy[dt.datetime]:
    return st.integers(-(10**15) // unit_us, 10**15 // unit_us).map(
        lambda n: dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=n * unit_us)
    )


def _leaf() -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    ints = st.integers(-(2**31), 2**31 - 1)
    longs = st.integers(-(2**63), 2**63 - 1)

    def decimal(kind: str) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
        @st.composite
        def build(draw: st.DrawFn) -> tuple[Any, st.SearchStrategy[Any]]:
            precision = draw(st.integers(1, 38))
            scale = draw(st.integers(0, precision))
            schema: dict[str, Any] = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
            if kind == "fixed":
                schema = {**schema, "type": "fixed", "name": _name(), "size": 16}
            values = st.integers(-(10**precision) + 1, 10**precision - 1).map(lambda n: Decimal(f"{n}E-{scale}"))
            return schema, values

        return build()

    return st.one_of(
        st.just(("boolean", st.booleans())),
        st.just(("int", ints)),
        st.just(("long", longs)),
        st.just(("float", st.floats(width=32, allow_nan=False))),
        st.just(("double", st.floats(allow_nan=False))),
        st.just(("string", st.text(max_size=20))),
        st.just(("bytes", st.binary(max_size=20))),
        st.just(({"type": "int", "logicalType": "date"}, st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)))),
        st.just(({"type": "int", "logicalType": "time-millis"}, st.integers(0, 86_399_999))),
        st.just(({"type": "long", "logicalType": "time-micros"}, st.integers(0, 86_399_999_999))),
        st.just(({"type": "long", "logicalType": "timestamp-millis"}, _datetimes(1000))),
        st.just(({"type": "long", "logicalType": "timestamp-micros"}, _datetimes(1))),
        st.just(
            (
                {"type": "long", "logicalType": "local-timestamp-millis"},
                _datetimes(1000).map(lambda d: d.replace(tzinfo=None)),
            )
        ),
        st.just(
            (
                {"type": "long", "logicalType": "local-timestamp-micros"},
                _datetimes(1).map(lambda d: d.replace(tzinfo=None)),
            )
        ),
        st.just(({"type": "string", "logicalType": "uuid"}, st.uuids().map(str))),
        decimal("bytes"),
        decimal("fixed"),
        st.builds(lambda: ({"type": "enum", "name": _name(), "symbols": ["A", "B", "C"]}, st.sampled_from("ABC"))),
        st.builds(lambda: ({"type": "fixed", "name": _name(), "size": 4}, st.binary(min_size=4, max_size=4))),
    )


def _nested(children: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]) -> st.SearchStrategy:
    @st.composite
    def record(draw: st.DrawFn) -> tuple[Any, st.SearchStrategy[Any]]:
        parts = draw(st.lists(children, min_size=1, max_size=3))
        fields = [{"name": f"f{i}", "type": t} for i, (t, _) in enumerate(parts)]
        return (
            {"type": "record", "name": _name(), "fields": fields},
            st.fixed_dictionaries({f"f{i}": v for i, (_, v) in enumerate(parts)}),
        )

    nullable = children.filter(lambda c: not isinstance(c[0], list)).map(lambda c: (["null", c[0]], st.none() | c[1]))
    array = children.map(lambda c: ({"type": "array", "items": c[0]}, st.lists(c[1], max_size=3)))
    return st.one_of(record(), nullable, array)


TYPES = st.recursive(_leaf(), _nested, max_leaves=6)


@st.composite
def schemas_and_records(draw: st.DrawFn) -> tuple[dict[str, Any], list[Any]]:
    parts = draw(st.lists(TYPES, min_size=1, max_size=6))
    schema = {
        "type": "record",
        "name": "root",
        "fields": [{"name": f"c{i}", "type": t} for i, (t, _) in enumerate(parts)],
    }
    row = st.fixed_dictionaries({f"c{i}": v for i, (_, v) in enumerate(parts)})
    return schema, draw(st.lists(row, min_size=1, max_size=8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schemas_and_records())
def test_the_block_path_decodes_every_supported_type_as_the_per_record_path_does(case) -> None:
    schema, records = case
    (batch, _), on = decode_both(schema, {1: schema}, [encode(schema, r) for r in records])
    assert batch.num_rows == len(records)
    used = on._plans is not None and on._plans[b"\x00\x00\x00\x00\x01"] is not None
    assert used == (not _deep_enum(schema))  # polars 2.1 reads an enum as a root field only: others go per record


def _deep_enum(schema: Any, top: bool = True) -> bool:
    if isinstance(schema, list):
        return any(_deep_enum(m, False) for m in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "enum":
        return not top
    if schema.get("type") == "record":
        return any(_deep_enum(f["type"], top and schema["name"] == "root") for f in schema["fields"])
    return any(_deep_enum(v, False) for k, v in schema.items() if k in ("items", "type") and isinstance(v, dict | list))


def test_the_bench_record_and_a_root_union_with_null_take_the_block_path() -> None:
    record = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {
                "name": "price",
                "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}],
            },
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tag", "type": {"type": "enum", "name": "Tag", "symbols": ["X", "Y"]}},
            {"name": "more", "type": {"type": "array", "items": "string"}},
            {"name": "again", "type": "shop.Tag"},
        ],
    }
    root = ["null", record]  # how the original Streamling's Kafka sink registers a value schema
    rows = [
        {
            "id": i,
            "name": None if i % 2 else f"n{i}",
            "price": Decimal(i * 7 - 50).scaleb(-4) if i % 3 else None,
            "at": dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i),
            "tag": "XY"[i % 2],
            "more": ["Y"][: i % 2],
            "again": "YX"[i % 2],
        }
        for i in range(50)
    ]
    (batch, _), on = decode_both(root, {1: root}, [encode(root, r) for r in rows])
    assert batch.column("price").to_pylist()[1] == Decimal("-0.0043")
    plan = on._plans[b"\x00\x00\x00\x00\x01"]
    assert plan is not None and plan.prefix == b"\x00\x00\x00\x00\x01\x02"  # the frame, then the record branch


# -- schema evolution: resolution on Arrow columns ---------------------------------------------------------------

V1 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "score", "type": "float"},
        {"name": "label", "type": "string"},
        {"name": "gone", "type": "string"},
    ],
}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "long"},  # int -> long
        {"name": "score", "type": ["null", "double"]},  # float -> double, nullable in the reader only
        {"name": "title", "type": "bytes", "aliases": ["label"]},  # renamed, string -> bytes
        {"name": "added", "type": "string", "default": "none"},
        {
            "name": "stamp",
            "type": {"type": "long", "logicalType": "timestamp-micros"},
            "default": 1_700_000_000_000_000,
        },
    ],
}


def test_a_newer_reader_resolves_promotions_renames_and_defaults_on_columns() -> None:
    rows = [{"id": i, "score": i / 4, "label": f"u{i}", "gone": "x"} for i in range(20)]
    (batch, _), on = decode_both(V2, {1: V1, 2: V2}, [encode(V1, r) for r in rows])
    assert on._plans[b"\x00\x00\x00\x00\x01"] is not None
    first = batch.to_pylist()[3]
    assert first == {
        "id": 3,
        "score": 0.75,
        "title": b"u3",
        "added": "none",
        "stamp": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
    }


def test_a_nested_record_that_changed_goes_per_record() -> None:
    inner_v1 = {"type": "record", "name": "In", "fields": [{"name": "a", "type": "int"}]}
    inner_v2 = {
        "type": "record",
        "name": "In",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 7}],
    }
    w = {"type": "record", "name": "R", "fields": [{"name": "x", "type": inner_v1}]}
    r = {"type": "record", "name": "R", "fields": [{"name": "x", "type": inner_v2}]}
    (batch, _), on = decode_both(r, {1: w, 2: r}, [encode(w, {"x": {"a": i}}) for i in range(5)])
    assert batch.to_pylist()[4] == {"x": {"a": 4, "b": 7}}
    assert on._plans[b"\x00\x00\x00\x00\x01"] is None


def test_maps_and_wide_decimals_go_per_record() -> None:
    mapped = {"type": "record", "name": "M", "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}]}
    (batch, _), on = decode_both(mapped, {1: mapped}, [encode(mapped, {"m": {"k": i}}) for i in range(3)])
    assert batch.to_pylist()[2] == {"m": [("k", 2)]}
    assert on._plans[b"\x00\x00\x00\x00\x01"] is None
    wide = {
        "type": "record",
        "name": "W",
        "fields": [{"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": 60, "scale": 2}}],
    }
    (batch, _), on = decode_both(
        wide, {1: wide}, [encode(wide, {"v": Decimal("123456789012345678901234567890123456789012.34")})]
    )
    assert batch.to_pylist() == [{"v": "123456789012345678901234567890123456789012.34"}]
    assert not on._plans or on._plans[b"\x00\x00\x00\x00\x01"] is None


# -- what the block path leaves to the per-record path -------------------------------------------------------------

SIMPLE = {"type": "record", "name": "S", "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}]}


def test_mixed_schema_ids_in_one_batch_decode_per_record() -> None:
    other = {**SIMPLE, "fields": [*SIMPLE["fields"], {"name": "extra", "type": "int", "default": 0}]}
    payloads = [encode([SIMPLE, other][i % 2], {"id": i, "s": "a", "extra": i}, 1 + i % 2) for i in range(10)]
    (batch, _), on = decode_both(SIMPLE, {1: SIMPLE, 2: other}, payloads)
    assert batch.column("id").to_pylist() == list(range(10))
    assert on._plans[b"\x00\x00\x00\x00\x02"] is not None  # the plan stays for batches of one schema id
    unmixed = [encode(other, {"id": i, "s": "a", "extra": i}, 2) for i in range(4)]
    assert on.decode(unmixed, [Offset(i) for i in range(4)], 3).column("id").to_pylist() == [0, 1, 2, 3]


def test_a_bad_record_is_named_and_dead_lettered_and_the_block_path_stays_on() -> None:
    good = [encode(SIMPLE, {"id": i, "s": f"v{i}"}) for i in range(6)]
    truncated = good[2][:-3]
    payloads = [*good[:2], truncated, *good[3:]]
    on, _ = decoders(SIMPLE, {1: SIMPLE})
    offsets = [Offset(100 + i) for i in range(len(payloads))]
    with pytest.raises(StreamlingError) as info:
        on.decode(payloads, offsets, 3)
    assert info.value.message.startswith("message at topic 't' partition 3 offset 102")
    (batch, rejected), on = decode_both(SIMPLE, {1: SIMPLE}, payloads, rejected=True)
    assert [i for i, _ in rejected] == [2]
    assert batch.column("id").to_pylist() == [0, 1, 3, 4, 5]
    assert on._plans[b"\x00\x00\x00\x00\x01"] is not None  # the data was at fault, not the path
    assert on.decode(good, [Offset(i) for i in range(6)], 3).column("id").to_pylist() == list(range(6))


def test_a_record_with_trailing_bytes_cannot_shift_the_columns() -> None:
    """fastavro reads a record and ignores what follows it in the payload; in a block those bytes would become the
    next record's start. The check against the last record decoded alone catches it."""
    payloads = [encode(SIMPLE, {"id": i, "s": f"v{i}"}) for i in range(5)]
    payloads[1] += b"\x02\x04zz"
    (batch, _), _ = decode_both(SIMPLE, {1: SIMPLE}, payloads)
    assert batch.to_pylist() == [{"id": i, "s": f"v{i}"} for i in range(5)]


def test_a_tombstone_goes_per_record() -> None:
    payloads: list[Any] = [encode(SIMPLE, {"id": 1, "s": "a"}), None, encode(SIMPLE, {"id": 2, "s": "b"})]
    (batch, rejected), _ = decode_both(SIMPLE, {1: SIMPLE}, payloads, rejected=True)
    assert [i for i, _ in rejected] == [1]
    assert batch.column("id").to_pylist() == [1, 2]


def test_uuid_and_time_values_keep_their_per_record_types() -> None:
    schema = {
        "type": "record",
        "name": "U",
        "fields": [
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        ],
    }
    u = uuid.UUID(int=7)
    (batch, _), _ = decode_both(schema, {1: schema}, [encode(schema, {"u": str(u), "t": 1234})])
    assert batch.to_pylist() == [{"u": str(u), "t": 1234}]
