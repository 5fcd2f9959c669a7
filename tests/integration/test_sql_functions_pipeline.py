"""The original's SQL functions in a real pipeline: Kafka (Avro, with a decimal(78,0) amount) → one SQL transform
calling a function of every family → Postgres and ClickHouse, on the real broker, registry, Postgres and
ClickHouse engine. Values are checked against independent computations (Keccak from safe-pysha3,
xxhash, Python integers and decimals), and 256-bit columns against the column types both sinks create."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import sha3
import xxhash

from streamling import run_pipeline

SCHEMA = {
    "type": "record",
    "name": "Transfer",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "tx_hash", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 78, "scale": 0}},
        {"name": "payload", "type": "string"},
        {"name": "memo", "type": "string"},
    ],
}
MAX_U256 = 2**256 - 1
SQL = """
SELECT id,
       amount / to_u256('1000') AS milli,
       u256_add(amount, to_u256(id)) AS amount_plus,
       to_int64(to_u256(id)) AS id64,
       decimal_arb_to_string(decimal_arb_mul(to_decimal_arb(CAST(id AS STRING), 20, 2), to_decimal_arb('1.5', 10, 1)))
         AS scaled,
       _gs_keccak256(tx_hash) AS tx_keccak,
       _gs_xxhash(memo) AS memo_xxh,
       array_enumerate(_gs_split_string_to_array(memo)) AS words,
       json_value(payload, '$.user.name') AS user_name,
       split_index(memo, ' ', 1) AS second_word,
       charLength(memo) AS memo_len,
       now() AS seen_at
FROM transfers
WHERE REGEXP(memo, '^hello')
"""


def record(i: int) -> dict:
    amount = MAX_U256 - i * 10**60 if i % 2 else i * 10**30
    memo = f"hello world {i}" if i % 3 else f"bye world {i}"
    return {
        "id": i,
        "tx_hash": "0x" + f"{i:064x}",
        "amount": Decimal(amount),
        "payload": json.dumps({"user": {"name": f"u{i}"}, "n": i}),
        "memo": memo,
    }


def expected(r: dict) -> dict:
    amount = int(r["amount"])
    return {
        "id": r["id"],
        "milli": amount // 1000,
        "amount_plus": amount + r["id"],
        "id64": r["id"],
        "scaled": str(Decimal(r["id"]).quantize(Decimal("0.01")) * Decimal("1.5")),
        "tx_keccak": "0x" + sha3.keccak_256(bytes.fromhex(r["tx_hash"][2:])).hexdigest(),
        "memo_xxh": xxhash.xxh3_128_hexdigest(r["memo"].encode()),
        "words": [(i, w) for i, w in enumerate(r["memo"].split(" "))],
        "user_name": f"u{r['id']}",
        "second_word": r["memo"].split(" ")[1],
        "memo_len": len(r["memo"]),
    }


def test_a_function_of_every_family_runs_from_kafka_into_postgres_and_clickhouse(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, clickhouse_env, clickhouse
) -> None:
    client, database = clickhouse
    topic = kafka.topic("transfers", partitions=2)
    records = [record(i) for i in range(1, 61)]
    kafka.produce_avro(topic, SCHEMA, records, partition_of=lambda i: i % 2)
    schema = f"f_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          transfers: {{type: kafka, topic: {topic}, ending_offsets: latest, primary_key: id}}
        transforms:
          enriched:
            type: sql
            primary_key: id
            sql: |
{"".join("              " + line + chr(10) for line in SQL.strip().splitlines())}
        sinks:
          pg: {{type: postgres, from: enriched, schema: {schema}, table: transfers}}
          ch: {{type: clickhouse, from: enriched, table: transfers}}
        """)
    settings = make_settings(
        environ={**kafka.env, **postgres_env, **clickhouse_env},
        job_mode=True,
        **{"clickhouse_sink.database": database},
    )
    run_pipeline(path, settings, spark)

    want = {r["id"]: expected(r) for r in records if r["memo"].startswith("hello")}
    assert len(want) == 40

    with pg_connect() as conn:
        rows = conn.execute(
            f"SELECT id, milli, amount_plus, id64, scaled, tx_keccak, memo_xxh, words, user_name, second_word, "
            f'memo_len, seen_at FROM "{schema}".transfers ORDER BY id'
        ).fetchall()
        types = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0",
                (f'"{schema}".transfers',),
            ).fetchall()
        )
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert types["milli"] == types["amount_plus"] == "numeric(78,0)"
    assert types["id64"] == "bigint"
    assert [r[0] for r in rows] == sorted(want)
    for row in rows:
        w = want[row[0]]
        assert (int(row[1]), int(row[2]), row[3]) == (w["milli"], w["amount_plus"], w["id64"])
        assert (row[4], row[5], row[6]) == (w["scaled"], w["tx_keccak"], w["memo_xxh"])
        assert [(e["index"], e["value"]) for e in row[7]] == w["words"]
        assert (row[8], row[9], row[10]) == (w["user_name"], w["second_word"], w["memo_len"])
    assert len({r[11] for r in rows}) == 1  # now() is one value per epoch, and this run is one epoch

    ch_types = dict(
        client.query(
            f"SELECT name, type FROM system.columns WHERE database = '{database}' AND table = 'transfers'"
        ).result_rows
    )
    assert ch_types["milli"] in ("UInt256", "Nullable(UInt256)")
    assert ch_types["amount_plus"] in ("UInt256", "Nullable(UInt256)")
    ch_rows = client.query(
        f"SELECT id, toString(milli), toString(amount_plus), tx_keccak, memo_xxh, words, user_name "
        f"FROM {database}.transfers FINAL ORDER BY id"
    ).result_rows
    assert [r[0] for r in ch_rows] == sorted(want)
    for row in ch_rows:
        w = want[row[0]]
        assert (int(row[1]), int(row[2])) == (w["milli"], w["amount_plus"])
        assert (row[3], row[4], row[6]) == (w["tx_keccak"], w["memo_xxh"], w["user_name"])
        assert [(e["index"], e["value"]) for e in row[5]] == w["words"]  # named Tuple members come as dicts
