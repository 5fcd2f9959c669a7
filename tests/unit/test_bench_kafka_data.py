"""The benchmark payloads: the fast keyed encoding must be byte-identical to fastavro's encoding of the record."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import fastavro
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import kafka_data


@pytest.mark.parametrize("i", [0, 1, 63, 64, 999, 1000, 123_456, 2**31, 2**62])
def test_keyed_payload_is_the_pool_record_with_its_id(i: int) -> None:
    payload = kafka_data.keyed_payloads(7)(i)
    assert payload[:5] == b"\x00\x00\x00\x00\x07"
    record = fastavro.schemaless_reader(io.BytesIO(payload[5:]), fastavro.parse_schema(kafka_data.SCHEMA), None)
    assert record == {**kafka_data.pool_record(i % kafka_data.POOL), "id": i}


def test_key_space_wraps_ids_and_keeps_sel_key_per_id() -> None:
    encode = kafka_data.keyed_payloads(1, key_space=50)
    schema = fastavro.parse_schema(kafka_data.SCHEMA)
    decoded = [fastavro.schemaless_reader(io.BytesIO(encode(i)[5:]), schema, None) for i in range(200)]
    assert [r["id"] for r in decoded] == [i % 50 for i in range(200)]
    sel = {}
    for r in decoded:
        assert sel.setdefault(r["id"], r["sel_key"]) == r["sel_key"]


def test_timed_payload_carries_the_produce_time() -> None:
    payload = kafka_data.timed_payload(3, 4321, 1_800_000_000_123)
    record = fastavro.schemaless_reader(io.BytesIO(payload[5:]), fastavro.parse_schema(kafka_data.SCHEMA), None)
    assert (record["id"], record["ts"], record["sel_key"]) == (4321, 1_800_000_000_123, 1)
