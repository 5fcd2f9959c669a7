"""Kafka Avro CDC → SQL → Postgres upsert, end to end on the real broker, registry and Postgres."""

from __future__ import annotations

import uuid
from decimal import Decimal

from streamling import run_pipeline

SCHEMA = {
    "type": "record",
    "name": "Balance",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "owner", "type": "string"},
        {"name": "wei", "type": {"type": "bytes", "logicalType": "decimal", "precision": 78, "scale": 0}},
        {"name": "meta", "type": {"type": "map", "values": "long"}, "default": {}},
    ],
}
MAX_U256 = 2**256 - 1


def test_cdc_from_kafka_lands_as_the_final_state_with_exact_256_bit_values(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect
) -> None:
    topic = kafka.topic("balances", partitions=2)
    records, ops, expected = [], [], {}
    for i in range(300):
        key = i % 60  # every key is created, then updated several times; some are deleted at the end
        op = b"c" if i < 60 else b"u"
        wei = MAX_U256 - i if key % 2 else i * 10**40
        records.append({"id": key, "owner": f"o{key}", "wei": Decimal(wei), "meta": {"seq": i}})
        ops.append(op)
        expected[key] = (f"o{key}", str(wei), {"seq": i})
    for key in range(0, 60, 7):
        records.append({"id": key, "owner": f"o{key}", "wei": Decimal(0), "meta": {}})
        ops.append(b"d")
        expected.pop(key)
    # One partition per key keeps each key's changes in order, as keyed CDC topics do.
    kafka.produce_avro(topic, SCHEMA, records, ops=ops, partition_of=lambda i: records[i]["id"] % 2)
    schema = f"k_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          balances: {{type: kafka, topic: {topic}, ending_offsets: latest, primary_key: id}}
        transforms:
          named:
            type: sql
            primary_key: id
            sql: SELECT id, owner, wei, meta FROM balances WHERE owner <> 'nobody'
        sinks:
          out: {{type: postgres, from: named, schema: {schema}, table: balances, parallelism: 2}}
        """)
    settings = make_settings(environ={**kafka.env, **postgres_env}, job_mode=True)
    run_pipeline(path, settings, spark)
    with pg_connect() as conn:
        rows = conn.execute(f'SELECT id, owner, wei::text, meta FROM "{schema}".balances ORDER BY id').fetchall()
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'wei'",
            (f'"{schema}".balances',),
        ).fetchone()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert kind == ("numeric(78,0)",)
    assert rows == [(k, *v) for k, v in sorted(expected.items())]
    assert any(len(r[2]) == 78 for r in rows)  # full 256-bit magnitudes, no exponent notation
