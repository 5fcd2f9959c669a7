"""The peers' side of each scenario: the same projection / filter / enrichment as the pipeline's SQL, the Postgres
upsert and the ClickHouse insert.

Imported by the hand-written loop (the project's venv) and by the Quix Streams app (its own venv), so it needs
only psycopg and confluent-kafka (and clickhouse-connect with chdb for the ClickHouse writer). The SQL each job mirrors
lives in bench/suite.py next to its name (the enrichment's in bench/steady_clickhouse.py).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql


@dataclass(frozen=True)
class Job:
    keep: Callable[[dict], bool] | None
    project: Callable[[dict], tuple]
    columns: tuple[str, ...]


JOBS = {
    # SELECT id, user_id, email, lower(country) AS country, device, amount, amount * 1.1 AS amount_with_fee, price, ts
    "projection": Job(
        None,
        lambda r: (
            r["id"],
            r["user_id"],
            r["email"],
            r["country"].lower(),
            r["device"],
            r["amount"],
            r["amount"] * 1.1,
            r["price"],
            r["ts"],
        ),
        ("id", "user_id", "email", "country", "device", "amount", "amount_with_fee", "price", "ts"),
    ),
    # SELECT id, user_id, email, country, ts FROM events WHERE sel_key = 0
    "filter": Job(
        lambda r: r["sel_key"] == 0,
        lambda r: (r["id"], r["user_id"], r["email"], r["country"], r["ts"]),
        ("id", "user_id", "email", "country", "ts"),
    ),
    # SELECT id, user_id, email, country, amount, price, ts FROM events WHERE sel_key <> 0  → Postgres upsert on id
    "upsert": Job(
        lambda r: r["sel_key"] != 0,
        lambda r: (r["id"], r["user_id"], r["email"], r["country"], r["amount"], r["price"], r["ts"]),
        ("id", "user_id", "email", "country", "amount", "price", "ts"),
    ),
}
BIG_SPENDERS: set[str] = set()
"""The enrich job's dynamic table: users seen once with an amount above `BIG_AMOUNT` (the pipeline's
``dynamic_table`` node, InMemory backend, filled from the same stream)."""
BIG_AMOUNT = 3600.0


def enrich(r: dict) -> tuple:
    """SELECT id, user_id, lower(email), upper(country), device, amount, amount * 1.1 AS amount_with_fee, price, ts,
    concat(device, ':', country) AS segment, dynamic_table_check('big_spenders', user_id) AS big_spender."""
    if r["amount"] > BIG_AMOUNT:
        BIG_SPENDERS.add(r["user_id"])
    return (
        r["id"],
        r["user_id"],
        r["email"].lower(),
        r["country"].upper(),
        r["device"],
        r["amount"],
        r["amount"] * 1.1,
        r["price"],
        r["ts"],
        f"{r['device']}:{r['country']}",
        r["user_id"] in BIG_SPENDERS,
    )


JOBS["enrich"] = Job(
    None,
    enrich,
    (
        "id",
        "user_id",
        "email",
        "country",
        "device",
        "amount",
        "amount_with_fee",
        "price",
        "ts",
        "segment",
        "big_spender",
    ),
)
UPSERT_TYPES = ("bigint", "text", "text", "text", "double precision", "numeric(20,4)", "bigint")
"""The column types the pipeline's Postgres sink creates for the upsert job's SQL (id is the primary key)."""


def connect_from_env(env: dict[str, str]) -> psycopg.Connection:
    p = "STREAMLING__POSTGRES_SINK__"
    return psycopg.connect(
        host=env[p + "HOST"],
        port=int(env[p + "PORT"]),
        user=env[p + "USER"],
        password=env[p + "PASS"],
        dbname=env[p + "DB"],
    )


class Upserter:
    """COPY into a temporary staging table, then one ``INSERT … ON CONFLICT (id) DO UPDATE`` merge per batch,
    in one transaction: the fastest upsert a Python client can issue (the last row per id wins)."""

    def __init__(self, conn: psycopg.Connection, schema: str, table: str) -> None:
        self.conn = conn
        cols = JOBS["upsert"].columns
        target = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        defs = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in zip(cols, UPSERT_TYPES, strict=True)
        )
        names = sql.SQL(", ").join(map(sql.Identifier, cols))
        with conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY (id))").format(target, defs))
            cur.execute(sql.SQL("CREATE TEMP TABLE _stage ({}) ON COMMIT DELETE ROWS").format(defs))
        conn.commit()
        self.copy = sql.SQL("COPY _stage ({}) FROM STDIN").format(names)
        self.copy_csv = sql.SQL("COPY _stage ({}) FROM STDIN (FORMAT csv)").format(names)
        updates = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in cols[1:]
        )
        self.merge = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM _stage ON CONFLICT (id) DO UPDATE SET {}").format(
            target, names, names, updates
        )

    def write(self, rows: list[tuple]) -> int:
        """Upsert one batch in one transaction; returns the distinct ids written."""
        last = {row[0]: row for row in rows}  # one merge may not touch a key twice
        with self.conn.cursor() as cur:
            with cur.copy(self.copy) as copy:
                for row in last.values():
                    copy.write_row(row)
            cur.execute(self.merge)
        self.conn.commit()
        return len(last)

    def write_arrow(self, table) -> int:  # type: ignore[no-untyped-def]
        """The same for an Arrow table of the job's columns, sent as one CSV COPY."""
        import pyarrow.csv as pacsv

        last = {key: i for i, key in enumerate(table.column("id").to_pylist())}
        rows = table.take(list(last.values()))
        out = io.BytesIO()
        pacsv.write_csv(rows, out, pacsv.WriteOptions(include_header=False))
        with self.conn.cursor() as cur:
            with cur.copy(self.copy_csv) as copy:
                copy.write(out.getvalue())
            cur.execute(self.merge)
        self.conn.commit()
        return len(last)


def high_watermarks(brokers: str, topic: str) -> dict[int, int]:
    """Each partition's end offset now: the peers stop there, like the pipeline's ``ending_offsets: latest``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "bench-watermarks", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {}
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        return ends
    finally:
        consumer.close()


class ClickHouseWriter:
    """Inserts into a table of the embedded ClickHouse engine (chdb) through clickhouse-connect, as a Python service
    writing ClickHouse would: ``insert`` for rows of tuples, ``insert_arrow`` for an Arrow table. The table exists
    (bench/peers/clickhouse_table.py created it)."""

    def __init__(self, path: str, table: str, columns: tuple[str, ...]) -> None:
        import clickhouse_connect

        self.client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
        self.table = table
        self.columns = list(columns)

    def write(self, rows: list[tuple]) -> int:
        if rows:
            self.client.insert(self.table, rows, column_names=self.columns)
        return len(rows)

    def write_arrow(self, table) -> int:  # type: ignore[no-untyped-def]
        if table.num_rows:
            self.client.insert_arrow(self.table, table)
        return table.num_rows
