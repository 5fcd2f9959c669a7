"""Kafka pieces that need no broker: client configuration, Avro type mapping, decoding, allocation."""

from __future__ import annotations

import copy
import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from streamling.config import load_settings
from streamling.errors import StreamlingError
from streamling.kafka.avro import (
    AvroDecoder,
    avro_schema_for,
    decimal128_from_bytes,
    doc_primary_keys,
    exact_decimal,
    spark_schema,
    wide_decimal_strings,
)
from streamling.kafka.clients import connection_options, kafka_config
from streamling.kafka.source.decoding import decode_json, op_of_headers
from streamling.kafka.source.reader import allocate, concentrate, pack


def test_connection_options_put_secrets_under_redacted_keys() -> None:
    settings = load_settings(
        config="/nonexistent/x",
        environ={
            "STREAMLING__KAFKA_SOURCE__SECURITY_PROTOCOL": "SASL_SSL",
            "STREAMLING__KAFKA_SOURCE__SASL_MECHANISM": "PLAIN",
            "STREAMLING__KAFKA_SOURCE__SASL_USERNAME": "svc",
            "STREAMLING__KAFKA_SOURCE__SASL_PASSWORD": "s3cret-kafka",
            "STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_PASSWORD": "s3cret-registry",
            "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": "grp",
        },
    )
    options = connection_options(settings.kafka_source)
    secret_keys = {k for k, v in options.items() if v.startswith("s3cret")}
    assert secret_keys == {"kafka_sasl_password", "registry_password"}  # both match spark.redaction.regex
    config = kafka_config(options)
    assert config["security.protocol"] == "sasl_ssl"
    assert (config["sasl.mechanism"], config["sasl.username"], config["sasl.password"]) == (
        "PLAIN",
        "svc",
        "s3cret-kafka",
    )
    assert options["kafka_group_id"] == "grp"
    assert "s3cret" not in repr(settings)  # SecretStr keeps them out of reprs and logs


def test_plaintext_ignores_sasl_settings() -> None:
    config = kafka_config({"kafka_brokers": "b:1", "kafka_security_protocol": "plaintext", "kafka_sasl_username": "u"})
    assert "sasl.username" not in config and config["bootstrap.servers"] == "b:1"


def test_avro_to_spark_types() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "n", "type": ["null", "int"]},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
            {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 78, "scale": 0}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": ["null", "double"]}},
            {"name": "addr", "type": {"type": "record", "name": "A", "fields": [{"name": "city", "type": "string"}]}},
        ],
    }
    out = spark_schema(schema, "s-value")
    assert out.simpleString() == (
        "struct<id:bigint,n:int,price:decimal(20,4),big:string,ts:timestamp,local:timestamp_ntz,day:date,t:int,"
        "kind:string,tags:array<string>,attrs:map<string,double>,addr:struct<city:string>>"
    )
    assert out["n"].nullable and not out["id"].nullable
    assert out["big"].metadata == {"streamling.type": "decimal(78,0)"}


def test_multi_type_unions_are_rejected_by_name() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["null", "int", "string"]}]}
    with pytest.raises(StreamlingError, match=r"Avro field 'v': unions of \['int', 'string'\] are not supported"):
        spark_schema(schema, "s-value")


class Offset:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


VALUE = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {
            "name": "amount",
            "type": {
                "type": "fixed",
                "name": "Amount",
                "size": 8,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 2,
            },
        },
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
    ],
}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.inventory.customers",
    "fields": [
        {"name": "before", "type": ["null", VALUE], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "kinds", "type": {"type": "array", "items": "Kind"}},
        {"name": "hashes", "type": {"type": "map", "values": "dbserver1.inventory.customers.Hash"}},
        {"name": "total", "type": "Amount"},
        {"name": "op", "type": "string"},
    ],
}
VALUE_COLUMNS = "struct<id:bigint,name:string,kind:string,hash:binary,amount:decimal(12,2),at:int>"


def test_named_types_can_be_reused_by_short_or_full_name() -> None:
    """A Debezium envelope: `after` is the record `Value` defined in `before`; an enum, a fixed and a fixed
    decimal are each used again, by short name within the namespace and by full name."""
    assert spark_schema(ENVELOPE, "s-value").simpleString() == (
        f"struct<before:{VALUE_COLUMNS},after:{VALUE_COLUMNS},kinds:array<string>,hashes:map<string,binary>,"
        "total:decimal(12,2),op:string>"
    )


def test_named_type_from_another_namespace_needs_its_full_name() -> None:
    other = {"type": "record", "name": "Money", "namespace": "common", "fields": [{"name": "cents", "type": "long"}]}
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "price", "type": other}, {"name": "refund", "type": ["null", "common.Money"]}],
    }
    assert spark_schema(schema, "s-value").simpleString() == (
        "struct<price:struct<cents:bigint>,refund:struct<cents:bigint>>"
    )
    schema["fields"][1]["type"] = ["null", "Money"]  # short name, resolved in namespace 'shop': not defined
    with pytest.raises(StreamlingError, match=r"^schema of subject 's-value' is not valid Avro: type 'shop.Money' is"):
        spark_schema(schema, "s-value")


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ([{"name": "next", "type": ["null", "Node"]}], "next"),
        ([{"name": "tree", "type": {"type": "array", "items": "Node"}}], "tree[]"),
        (
            [{"name": "meta", "type": {"type": "record", "name": "M", "fields": [{"name": "up", "type": "M"}]}}],
            "meta.up",
        ),
    ],
)
def test_recursive_record_is_a_user_error_naming_the_field(fields: list, where: str) -> None:
    schema = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "long"}, *fields]}
    with pytest.raises(StreamlingError) as info:
        spark_schema(schema, "s-value")
    assert info.value.user_facing
    assert str(info.value).startswith(f"Avro field '{where}': record '")
    assert str(info.value).endswith("contains itself; a recursive schema cannot map to Spark columns")


def test_decoder_reads_reused_named_types() -> None:
    value = {"id": 7, "name": "x", "kind": "B", "hash": b"abcd", "amount": Decimal("12.34"), "at": 1000}
    record = {
        "before": None,
        "after": value,
        "kinds": ["A", "B"],
        "hashes": {"k": b"wxyz"},
        "total": Decimal("-0.05"),
        "op": "c",
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ENVELOPE), record)
    decoder = AvroDecoder(ENVELOPE, 1, "t-value", "t", lambda sid: (json.dumps(ENVELOPE), [("t-value", 1)]))
    assert decoder.decimals == {}  # `total` shares the fixed `Amount` with a nested field: fastavro decodes it
    batch = decoder.decode([b"\x00\x00\x00\x00\x01" + out.getvalue()], [Offset(0)], 0)
    assert batch.to_pylist() == [{**record, "hashes": [("k", b"wxyz")]}]  # Arrow lists a map's pairs
    assert batch.schema.field("after").type.field("amount").type == pa.decimal128(12, 2)


R_V1 = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
R_V2 = {
    "type": "record",
    "name": "R",
    "fields": [{"name": "id", "type": "long"}, {"name": "c", "type": "string", "default": "web"}],
}
"""Version 2 of a record adds a field with a default."""


def confluent_frame(schema_id: int, schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_records_of_the_reader_schemas_id_need_no_registry_and_other_ids_still_ask_it() -> None:
    """A worker's first read used to ask the registry for the reader schema, which the driver already holds."""
    v1, v2 = R_V1, R_V2
    asked: list[int] = []

    def fetch(schema_id: int) -> tuple[str, list[tuple[str, int]]]:
        asked.append(schema_id)
        return json.dumps(v1), [("t-value", 1)]

    decoder = AvroDecoder(v2, 2, "t-value", "t", fetch, reader_id=7)

    own = [confluent_frame(7, v2, {"id": i, "c": f"c{i}"}) for i in range(3)]
    assert decoder.decode(own, [Offset(i) for i in range(3)], 0).to_pylist() == [
        {"id": i, "c": f"c{i}"} for i in range(3)
    ]
    assert asked == []
    older = decoder.decode([confluent_frame(3, v1, {"id": 9}), own[0]], [Offset(3), Offset(4)], 0)
    assert older.to_pylist() == [{"id": 9, "c": "web"}, {"id": 0, "c": "c0"}]
    assert asked == [3]


def test_decimals_convert_exactly() -> None:
    def enc(d: Decimal, scale: int) -> bytes:
        unscaled = int(d.scaleb(scale))
        return unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)

    values = [Decimal("12.3456"), None, Decimal("-0.0001"), Decimal("99999999999999.9999")]
    raw = pa.array([enc(v, 4) if v is not None else None for v in values], pa.binary())
    assert decimal128_from_bytes(raw, 20, 4).to_pylist() == [
        Decimal("12.3456"),
        None,
        Decimal("-0.0001"),
        Decimal("99999999999999.9999"),
    ]
    assert decimal128_from_bytes(raw.slice(1), 20, 4).to_pylist() == values[1:]
    wide = pa.array([(2**255 - 1).to_bytes(32, "big", signed=True), (-5).to_bytes(1, "big", signed=True)])
    assert wide_decimal_strings(wide, 0).to_pylist() == [str(2**255 - 1), "-5"]
    assert wide_decimal_strings(wide.slice(1), 3).to_pylist() == ["-0.005"]


def test_decoder_reads_older_writer_with_defaults_and_names_bad_frames() -> None:
    v1, v2 = R_V1, R_V2
    writers = {1: (json.dumps(v1), [("t-value", 1)]), 2: (json.dumps(v2), [("t-value", 2)])}
    decoder = AvroDecoder(v2, 2, "t-value", "t", lambda sid: writers[sid])

    class M:
        def __init__(self, offset: int) -> None:
            self._offset = offset

        def offset(self) -> int:
            return self._offset

    payloads = [confluent_frame(1, v1, {"id": 1}), confluent_frame(2, v2, {"id": 2, "c": "app"})]
    batch = decoder.decode(payloads, [M(10), M(11)], 0)
    assert batch.to_pylist() == [{"id": 1, "c": "web"}, {"id": 2, "c": "app"}]
    with pytest.raises(StreamlingError) as info:
        decoder.decode([payloads[0], b"\x01junk"], [M(10), M(11)], 3)
    assert str(info.value) == (
        "message at topic 't' partition 3 offset 11: not Confluent-framed Avro (first byte 0x01, expected 0x00)"
    )
    # With a `rejected` list (on_error: dead_letter) bad records are listed by index and left out of the batch.
    rejected: list[tuple[int, str]] = []
    batch = decoder.decode([b"\x00\x01", payloads[1], b""], [M(20), M(21), M(22)], 3, rejected)
    assert batch.to_pylist() == [{"id": 2, "c": "app"}]
    assert rejected == [
        (
            0,
            "message at topic 't' partition 3 offset 20: not Confluent-framed Avro (2 bytes; a frame starts with "
            "0x00 and a 4-byte schema id)",
        ),
        (2, "message at topic 't' partition 3 offset 22 has an empty payload (tombstone); Avro records are required"),
    ]
    assert info.value.user_facing


def test_avro_schema_for_sink_round_trips_types() -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("price", T.DecimalType(20, 4)),
            T.StructField("at", T.TimestampType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("nested", T.StructType([T.StructField("x", T.IntegerType())])),
        ]
    )
    avro = avro_schema_for(schema, "orders.out")
    assert avro["name"] == "orders_out"
    parsed = fastavro.parse_schema(avro)  # a valid Avro schema
    assert spark_schema(avro, "x").simpleString() == (
        "struct<id:bigint,price:decimal(20,4),at:timestamp,tags:array<string>,nested:struct<x:int>>"
    )
    assert parsed["fields"][1]["type"][1]["logicalType"] == "decimal"


def test_avro_schema_for_sink_names_every_record_once_and_carries_the_primary_key() -> None:
    inner = T.StructType([T.StructField("x", T.IntegerType())])
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("a", T.StructType([T.StructField("b", inner)])),
            T.StructField("a_b", inner),  # the path name of `a.b` as well
            T.StructField("items", T.ArrayType(inner)),
        ]
    )
    avro = avro_schema_for(schema, "orders-out", ["id"])
    named: dict = {}
    fastavro.parse_schema(avro, named_schemas=named)  # no record name defined twice
    assert sorted(named) == ["orders_out", "orders_out_a", "orders_out_a_b", "orders_out_a_b_2", "orders_out_items"]
    assert json.loads(avro["doc"]) == {"primaryKeys": ["id"]}


@pytest.mark.parametrize(
    ("doc", "keys"),
    [
        ('{"primaryKeys": ["id"]}', ["id"]),
        ('{"primaryKeys": ["region", " id "], "other": 1}', ["region", "id"]),
        ('{"primaryKeys": "region, id"}', ["region", "id"]),
        ("Customer rows, keyed by id", []),
        ('{"owner": "team-a"}', []),
        (None, []),
    ],
)
def test_primary_key_from_the_record_doc(doc: str | None, keys: list[str]) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    if doc is not None:
        schema["doc"] = doc
    assert doc_primary_keys(schema, "t-value") == keys


@pytest.mark.parametrize("declared", ["[]", "[1]", '{"id": true}', '[""]'])
def test_malformed_primary_keys_in_the_doc_are_a_user_error(declared: str) -> None:
    schema = {"type": "record", "name": "R", "doc": f'{{"primaryKeys": {declared}}}', "fields": []}
    with pytest.raises(StreamlingError) as info:
        doc_primary_keys(schema, "t-value")
    assert info.value.user_facing
    assert str(info.value) == (
        f"schema of subject 't-value': its doc declares primaryKeys {json.dumps(json.loads(declared))}; expected a "
        'list of column names, as in {"primaryKeys": ["id"]}'
    )


def test_allocation_is_proportional_and_exact() -> None:
    shares = {k: s for k, _, s in allocate({"0": 0, "1": 0, "2": 7}, {"0": 900, "1": 100}, 500)}
    assert shares == {"0": 450, "1": 50, "2": 0}
    shares = {k: s for k, _, s in allocate({"0": 0, "1": 0}, {"0": 1, "1": 2}, 2)}
    assert sum(shares.values()) == 2 and shares["0"] <= 1 and shares["1"] <= 2


def test_a_backlog_is_read_by_as_many_partitions_per_epoch_as_there_are_tasks() -> None:
    """Each read task pays a fetch of its partition's tail: 4 partitions read 2 at a time, in turn, most pending
    first; the partitions' ranges stay contiguous and every record is read once."""
    current = {str(p): 0 for p in range(4)}
    high = {str(p): 1_000 for p in range(4)}
    read = {k: 0 for k in current}
    epochs = []
    while any(current[k] < high[k] for k in current):
        pending = {k: high[k] - v for k, v in current.items() if high[k] > v}
        shares = {k: n for k, _, n in concentrate(current, pending, min(500, sum(pending.values())), 2)}
        epochs.append(sorted(k for k, n in shares.items() if n))
        for k, n in shares.items():
            read[k] += n
            current[k] += n
    assert epochs == [["0", "1"], ["2", "3"]] * 4
    assert read == high


def test_concentrating_spills_over_when_the_chosen_run_short_and_takes_all_that_fits() -> None:
    shares = {k: s for k, _, s in concentrate({"0": 0, "1": 0, "2": 0}, {"0": 50, "1": 400, "2": 300}, 600, 1)}
    assert shares == {"0": 0, "1": 343, "2": 257}
    shares = {k: s for k, _, s in concentrate({"0": 0, "1": 0, "2": 0}, {"0": 50, "1": 400, "2": 300}, 750, 2)}
    assert shares == {"0": 50, "1": 400, "2": 300}
    shares = {k: s for k, _, s in concentrate({"0": 3, "1": 0}, {"0": 90, "1": 10}, 60, 4)}
    assert shares == {"0": 54, "1": 6}


def test_packing_takes_from_as_few_partitions_as_possible_most_pending_first() -> None:
    shares = {k: s for k, _, s in pack({"0": 5, "1": 0, "2": 0, "3": 9}, {"0": 300, "1": 900, "2": 900}, 1000)}
    assert shares == {"0": 0, "1": 900, "2": 100, "3": 0}  # ties by partition; a partition with nothing pending: 0
    shares = {k: s for k, _, s in pack({"0": 0, "1": 0}, {"0": 30, "1": 20}, 80)}
    assert shares == {"0": 30, "1": 20}  # less pending than asked: all of it
    assert {k: s for k, _, s in pack({"0": 0}, {"0": 10}, 0)} == {"0": 0}


def test_dbz_op_header_values() -> None:
    assert [op_of_headers(h) for h in (None, [], [("dbz.op", b"c")], [("x", b"1"), ("dbz.op", b"d")], [("dbz.op", b"?")])] == [
        "i", "i", "i", "d", None,
    ]  # fmt: skip


def test_json_decoding_fails_on_the_first_bad_message_or_lists_every_bad_one() -> None:
    class M:
        def __init__(self, offset: int, value: bytes | None) -> None:
            self._offset, self._value = offset, value

        def offset(self) -> int:
            return self._offset

        def value(self) -> bytes | None:
            return self._value

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("_gs_op", pa.string())])
    messages = [M(5, b'{"id": 1}'), M(6, b'{"id": "x"}'), M(7, None), M(8, b'{"id": 2}')]
    with pytest.raises(StreamlingError) as info:
        decode_json(messages, "topic 't' partition 0", schema)
    assert str(info.value) == "message at topic 't' partition 0 offset 7 has an empty payload (tombstone)"
    rejected: list[tuple[int, str]] = []
    batch = decode_json(messages, "topic 't' partition 0", schema, rejected)
    assert batch.to_pylist() == [{"id": 1}, {"id": 2}]
    assert [(i, text.split(":")[0]) for i, text in rejected] == [
        (1, "message at topic 't' partition 0 offset 6 is not valid JSON for the declared schema"),
        (2, "message at topic 't' partition 0 offset 7 has an empty payload (tombstone)"),
    ]


ORIGINAL_ROOT = [
    "null",
    {
        "type": "record",
        "name": "orders",
        "doc": '{"primaryKeys": ["id"]}',
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "name", "type": ["null", "string"], "default": None},
            {
                "name": "price",
                "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}],
                "default": None,
            },
        ],
    },
]


def framed(schema: Any, record: Any, schema_id: int = 1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(copy.deepcopy(schema)), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_a_root_union_of_null_and_one_record_reads_as_that_record() -> None:
    """The original Streamling's Kafka sink registers its value schemas as ``["null", {record}]``. The record's
    columns and doc are used; a payload holding the null branch is a bad record, like a tombstone."""
    assert spark_schema(ORIGINAL_ROOT, "orders-value").simpleString() == (
        "struct<id:bigint,name:string,price:decimal(10,2)>"
    )
    assert doc_primary_keys(ORIGINAL_ROOT, "orders-value") == ["id"]
    decoder = AvroDecoder(
        ORIGINAL_ROOT, 1, "orders-value", "orders", lambda sid: (json.dumps(ORIGINAL_ROOT), [("orders-value", 1)])
    )
    rows = [{"id": 1, "name": "a", "price": Decimal("1.50")}, {"id": 2, "name": None, "price": None}]
    payloads = [framed(ORIGINAL_ROOT, r) for r in rows]
    assert decoder.decode(payloads, [Offset(0), Offset(1)], 0).to_pylist() == rows
    null = framed(ORIGINAL_ROOT, None)
    with pytest.raises(StreamlingError) as info:
        decoder.decode([payloads[0], null], [Offset(5), Offset(6)], 2)
    assert info.value.user_facing
    assert str(info.value) == (
        "message at topic 'orders' partition 2 offset 6 holds an Avro null (the null branch of the root union), "
        "like a tombstone; Avro records are required"
    )
    rejected: list[tuple[int, str]] = []
    batch = decoder.decode([null, payloads[1]], [Offset(7), Offset(8)], 2, rejected)
    assert batch.to_pylist() == rows[1:]
    assert [i for i, _ in rejected] == [0] and "offset 7 holds an Avro null" in rejected[0][1]


@pytest.mark.parametrize(
    "root",
    [
        ["null", "string"],
        ["null", {"type": "record", "name": "A", "fields": []}, {"type": "record", "name": "B", "fields": []}],
        {"type": "array", "items": "long"},
        "long",
    ],
)
def test_a_root_that_is_not_a_record_or_a_nullable_record_is_refused(root: Any) -> None:
    with pytest.raises(StreamlingError) as info:
        spark_schema(root, "t-value")
    assert info.value.user_facing
    assert str(info.value) == "schema of subject 't-value' must be an Avro record, or a union of null and one record"


WIDE = {"type": "bytes", "logicalType": "decimal", "precision": 78, "scale": 0}
WIDE_FIXED = {"type": "fixed", "name": "U256", "size": 32, "logicalType": "decimal", "precision": 76, "scale": 3}
NESTED_WIDE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "chain",
    "fields": [
        {
            "name": "after",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "wei", "type": WIDE},
                        {"name": "fee", "type": ["null", WIDE_FIXED]},
                        {"name": "price", "type": {**WIDE, "precision": 20, "scale": 2}},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "before", "type": ["null", "Value"], "default": None},
        {"name": "amounts", "type": {"type": "array", "items": ["null", WIDE]}},
        {"name": "by_token", "type": {"type": "map", "values": {"type": "array", "items": "U256"}}},
        {"name": "total", "type": "U256"},
        {"name": "plain", "type": "string"},
    ],
}


def test_nested_wide_decimals_are_exact_strings_like_top_level_ones() -> None:
    """A decimal wider than 38 digits inside a record, an array or a map reads as an exact string, as a top-level
    one does; its struct field carries the same metadata. A named fixed wide decimal shared by several fields
    (`U256`) reads the same everywhere."""
    columns = spark_schema(NESTED_WIDE, "c-value")
    value = "struct<id:bigint,wei:string,fee:string,price:decimal(20,2)>"
    assert columns.simpleString() == (
        f"struct<after:{value},before:{value},amounts:array<string>,by_token:map<string,array<string>>,"
        "total:string,plain:string>"
    )
    assert columns["after"].dataType["wei"].metadata == {"streamling.type": "decimal(78,0)"}
    assert columns["after"].dataType["fee"].metadata == {"streamling.type": "decimal(76,3)"}
    assert columns["total"].metadata == {"streamling.type": "decimal(76,3)"}
    big = 2**200
    record = {
        "after": {"id": 1, "wei": Decimal(big), "fee": Decimal(f"{-(2**250)}e-3"), "price": Decimal("1.25")},
        "before": None,
        "amounts": [Decimal(big + 1), None, Decimal(-7)],
        "by_token": {"eth": [Decimal("0.001"), Decimal(10**70)]},
        "total": Decimal(f"{2**240}e-3"),
        "plain": "x",
    }
    second = {**record, "after": None, "before": {**record["after"], "fee": None}, "amounts": [], "by_token": {}}
    decoder = AvroDecoder(NESTED_WIDE, 1, "c-value", "c", lambda sid: (json.dumps(NESTED_WIDE), [("c-value", 1)]))
    batch = decoder.decode([framed(NESTED_WIDE, record), framed(NESTED_WIDE, second)], [Offset(0), Offset(1)], 0)
    after = {"id": 1, "wei": str(big), "fee": exact_decimal(-(2**250), 3), "price": Decimal("1.25")}
    assert batch.to_pylist() == [
        {
            "after": after,
            "before": None,
            "amounts": [str(big + 1), None, "-7"],
            "by_token": [("eth", ["0.001", str(10**70) + ".000"])],
            "total": exact_decimal(2**240, 3),
            "plain": "x",
        },
        {
            "after": None,
            "before": {**after, "fee": None},
            "amounts": [],
            "by_token": [],
            "total": exact_decimal(2**240, 3),
            "plain": "x",
        },
    ]
    from pyspark.sql.pandas.types import to_arrow_schema

    # The source's Arrow types exactly, nested fields' nullability included (the source sets the top level's).
    assert batch.schema.types == to_arrow_schema(columns, timezone="UTC").types


def test_schemas_without_wide_decimals_keep_the_plain_reader() -> None:
    """Nothing to convert after fastavro: the batch goes out as decoded (no per-row Python)."""
    decoder = AvroDecoder(ENVELOPE, 1, "t-value", "t", lambda sid: (json.dumps(ENVELOPE), [("t-value", 1)]))
    assert decoder.converters == {}
