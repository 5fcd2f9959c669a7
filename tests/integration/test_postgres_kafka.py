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


CUSTOMER = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "email", "type": "string"},
    ],
    "connect.name": "dbserver1.inventory.customers.Value",
}
DEBEZIUM_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.inventory.customers",
    "fields": [
        {"name": "before", "type": ["null", CUSTOMER], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "version", "type": "string"},
                    {"name": "connector", "type": "string"},
                    {"name": "name", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {
                        "name": "snapshot",
                        "type": [
                            {
                                "type": "string",
                                "connect.version": 1,
                                "connect.parameters": {"allowed": "true,last,false,incremental"},
                                "connect.default": "false",
                                "connect.name": "io.debezium.data.Enum",
                            },
                            "null",
                        ],
                        "default": "false",
                    },
                    {"name": "db", "type": "string"},
                    {"name": "sequence", "type": ["null", "string"], "default": None},
                    {"name": "schema", "type": "string"},
                    {"name": "table", "type": "string"},
                    {"name": "txId", "type": ["null", "long"], "default": None},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                    {"name": "xmin", "type": ["null", "long"], "default": None},
                ],
                "connect.name": "io.debezium.connector.postgresql.Source",
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {
            "name": "transaction",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "block",
                    "namespace": "event",
                    "fields": [
                        {"name": "id", "type": "string"},
                        {"name": "total_order", "type": "long"},
                        {"name": "data_collection_order", "type": "long"},
                    ],
                },
            ],
            "default": None,
        },
    ],
    "connect.name": "dbserver1.inventory.customers.Envelope",
}


def debezium_event(op: str, before: dict | None, after: dict | None, lsn: int) -> dict:
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "2.5.0.Final",
            "connector": "postgresql",
            "name": "dbserver1",
            "ts_ms": 1_700_000_000_000 + lsn,
            "snapshot": "true" if op == "r" else "false",
            "db": "inventory",
            "sequence": None,
            "schema": "inventory",
            "table": "customers",
            "txId": 500 + lsn,
            "lsn": lsn,
            "xmin": None,
        },
        "op": op,
        "ts_ms": 1_700_000_000_100 + lsn,
        "transaction": None,
    }


def test_debezium_envelope_with_a_reused_value_record_lands_as_the_final_table(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect
) -> None:
    """A Debezium change stream as it arrives from a Postgres connector: `before` and `after` are both the
    record `Value` (defined once, then referenced), the operation is the body's `op`, there is no `dbz.op`
    header. SQL unpacks the envelope; the sink applies snapshot reads, inserts, updates and a delete."""

    def customer(i: int, name: str) -> dict:
        return {"id": i, "name": name, "email": f"c{i}@example.com"}

    events = [debezium_event("r", None, customer(i, f"n{i}"), i) for i in range(1, 6)]
    events += [
        debezium_event("c", None, customer(6, "new"), 10),
        debezium_event("u", customer(2, "n2"), customer(2, "renamed"), 11),
        debezium_event("d", customer(3, "n3"), None, 12),
        debezium_event("u", customer(6, "new"), customer(6, "newer"), 13),
    ]
    topic = kafka.topic("dbz", partitions=2)

    def entity(i: int) -> int:
        return (events[i]["after"] or events[i]["before"])["id"]

    # Debezium keys by the row's primary key, so each row's changes stay in order in one partition.
    kafka.produce_avro(topic, DEBEZIUM_ENVELOPE, events, ops=[None] * len(events), partition_of=lambda i: entity(i) % 2)
    schema = f"dbz_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          customers_cdc: {{type: kafka, topic: {topic}, ending_offsets: latest}}
        transforms:
          customers:
            type: sql
            primary_key: id
            sql: >
              SELECT COALESCE(after.id, before.id) AS id, after.name AS name, after.email AS email,
                     source.lsn AS lsn,
                     CASE op WHEN 'd' THEN 'd' WHEN 'u' THEN 'u' ELSE 'i' END AS _gs_op
              FROM customers_cdc
        sinks:
          out: {{type: postgres, from: customers, schema: {schema}, table: customers}}
        """)
    run_pipeline(path, make_settings(environ={**kafka.env, **postgres_env}, job_mode=True), spark)
    with pg_connect() as conn:
        rows = conn.execute(f'SELECT id, name, email, lsn FROM "{schema}".customers ORDER BY id').fetchall()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert rows == [
        (1, "n1", "c1@example.com", 1),
        (2, "renamed", "c2@example.com", 11),
        (4, "n4", "c4@example.com", 4),
        (5, "n5", "c5@example.com", 5),
        (6, "newer", "c6@example.com", 13),
    ]


ACCOUNT = {
    "type": "record",
    "name": "Account",
    "doc": '{"primaryKeys": ["region", "id"]}',
    "fields": [
        {"name": "region", "type": "string"},
        {"name": "id", "type": "long"},
        {"name": "balance", "type": "long"},
    ],
}


def test_primary_key_declared_in_the_avro_doc_keys_the_postgres_sink(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect
) -> None:
    """No `primary_key` in the YAML: the key comes from the registered record's doc, --validate says so, and
    the sink upserts and deletes by it. The same pipeline on a schema without that doc is invalid."""
    from streamling.api import validate_pipeline

    topic = kafka.topic("accounts", partitions=1)
    records = [{"region": r, "id": i, "balance": 10 * i} for r in ("eu", "us") for i in range(1, 4)]
    records += [{"region": "eu", "id": 2, "balance": 999}, {"region": "us", "id": 3, "balance": 0}]
    kafka.produce_avro(topic, ACCOUNT, records, ops=[b"c"] * 6 + [b"u", b"d"], partition_of=lambda i: 0)
    schema = f"doc_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          accounts: {{type: kafka, topic: {topic}, ending_offsets: latest}}
        sinks:
          out: {{type: postgres, from: accounts, schema: {schema}, table: accounts}}
        """)
    settings = make_settings(environ={**kafka.env, **postgres_env}, job_mode=True)
    report = validate_pipeline(path, settings, spark)
    assert report.errors == []
    assert report.warnings == [
        f'kafka source \'accounts\': no primary_key given; using ["region", "id"] declared in the doc of the '
        f"Avro schema of subject '{topic}-value'"
    ]
    run_pipeline(path, settings, spark)
    with pg_connect() as conn:
        rows = conn.execute(f'SELECT region, id, balance FROM "{schema}".accounts ORDER BY 1, 2').fetchall()
        key = conn.execute(
            "SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass "
            "AND i.indisprimary",
            (f'"{schema}".accounts',),
        ).fetchone()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert rows == [("eu", 1, 10), ("eu", 2, 999), ("eu", 3, 30), ("us", 1, 10), ("us", 2, 20)]
    assert sorted(key[0]) == ["id", "region"]

    plain = kafka.topic("accounts_plain", partitions=1)
    kafka.register(plain, {k: v for k, v in ACCOUNT.items() if k != "doc"})
    report = validate_pipeline(write_pipeline(path.read_text().replace(topic, plain), "plain.yaml"), settings, spark)
    assert report.errors == ["postgres sink 'out' requires a primary key"]


U256 = {"type": "bytes", "logicalType": "decimal", "precision": 78, "scale": 0}
WALLET_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "chain.wallets",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "wei", "type": U256},
                        {"name": "history", "type": {"type": "array", "items": U256}, "default": []},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"},
    ],
}


def test_wide_decimals_inside_a_debezium_record_land_exactly(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect
) -> None:
    """A Debezium `after` record with a 256-bit `wei` (decimal(78,0)) and an array of them: read as exact
    strings like a top-level wide decimal, `after.wei` keeps its decimal(78,0) marking through SQL and lands in
    a numeric(78,0) column; the array lands as JSON strings."""
    big = 2**200
    wallets = {1: (big, [big - 1, -(2**255)]), 2: (2**256 - 1, []), 3: (7, [1])}
    events = [
        {"before": None, "after": {"id": i, "wei": Decimal(w), "history": [Decimal(h) for h in hs]}, "op": "c"}
        for i, (w, hs) in wallets.items()
    ]
    events.append({"before": events[2]["after"], "after": None, "op": "d"})
    topic = kafka.topic("wallets", partitions=1)
    kafka.produce_avro(topic, WALLET_ENVELOPE, events, ops=[None] * len(events), partition_of=lambda i: 0)
    schema = f"wide_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          wallets_cdc: {{type: kafka, topic: {topic}, ending_offsets: latest}}
        transforms:
          wallets:
            type: sql
            primary_key: id
            sql: >
              SELECT COALESCE(after.id, before.id) AS id, after.wei AS wei, after.history AS history,
                     CASE op WHEN 'd' THEN 'd' ELSE 'i' END AS _gs_op
              FROM wallets_cdc
        sinks:
          out: {{type: postgres, from: wallets, schema: {schema}, table: wallets}}
        """)
    run_pipeline(path, make_settings(environ={**kafka.env, **postgres_env}, job_mode=True), spark)
    with pg_connect() as conn:
        rows = conn.execute(f'SELECT id, wei::text, history FROM "{schema}".wallets ORDER BY id').fetchall()
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'wei'",
            (f'"{schema}".wallets',),
        ).fetchone()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert kind == ("numeric(78,0)",)
    assert rows == [(1, str(big), [str(big - 1), str(-(2**255))]), (2, str(2**256 - 1), [])]
