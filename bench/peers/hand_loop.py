"""Peer: a hand-written single-process loop — confluent-kafka, fastavro, psycopg COPY + merge.

    python bench/peers/hand_loop.py --topic T --group G --job upsert --schema S --table T [--follow]

The practical ceiling for a Python client with no framework around it: consume in batches, strip the 5-byte
Confluent framing, decode with fastavro's ``schemaless_reader`` (writer schema fetched once per schema id from the
registry), filter and project in plain Python, and for ``--job upsert`` COPY the batch into a temp table and merge it
with ``INSERT … ON CONFLICT DO UPDATE``, then commit the consumer offsets (at-least-once). Without ``--follow`` it
stops at the high watermarks read at start (the pipeline's ``ending_offsets: latest``); with it, it runs until
SIGTERM and writes whatever each poll returned (the latency scenario). Connections come from the same
``STREAMLING__…`` environment the pipeline reads.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job import BIG_AMOUNT, BIG_SPENDERS, JOBS, ClickHouseWriter, Upserter, connect_from_env, high_watermarks

from streamling.kafka.avro_block import varint  # Avro's long encoding, for the container header: not the decoding


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--topic", required=True)
    args.add_argument("--group", required=True)
    args.add_argument("--job", choices=sorted(JOBS), required=True)
    args.add_argument("--schema")
    args.add_argument("--table")
    args.add_argument("--clickhouse-path", help="write into this embedded ClickHouse data path (chdb) instead")
    args.add_argument("--clickhouse-table", help="with --clickhouse-path: the table, database.table")
    args.add_argument("--batch", type=int, default=100_000, help="records per write (and offset commit)")
    args.add_argument("--follow", action="store_true", help="run until SIGTERM, writing every poll's records")
    args.add_argument(
        "--flush-interval",
        type=float,
        help="with --follow: write (and commit) every this many seconds instead of every poll (a trickling feed)",
    )
    args.add_argument(
        "--decoder",
        choices=("record", "block"),
        default="record",
        help="fastavro per record, or each poll's payloads as one Avro block read by polars (the pipeline's technique)",
    )
    opts = args.parse_args()

    import fastavro
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient

    started = time.perf_counter()
    env = dict(os.environ)
    brokers = env["STREAMLING__KAFKA_SOURCE__BROKERS"]
    registry = SchemaRegistryClient({"url": env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]})
    job = JOBS[opts.job]
    upserter: Upserter | ClickHouseWriter | None = None
    if opts.clickhouse_path:
        upserter = ClickHouseWriter(opts.clickhouse_path, opts.clickhouse_table, job.columns)
    elif opts.job == "upsert":
        upserter = Upserter(connect_from_env(env), opts.schema, opts.table)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))

    ends = None if opts.follow else high_watermarks(brokers, opts.topic)
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": opts.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # The local broker answers a fetch far above fetch.max.bytes (~25 MB per partition of a deep topic):
            # with librdkafka's default receive.message.max.bytes (100 MB) a 4-partition response is dropped and
            # retried for ever.
            "fetch.max.bytes": 16 * 1024 * 1024,
            "receive.message.max.bytes": 1_000_000_000,
            "queued.min.messages": 20000,
            "fetch.queue.backoff.ms": 10,
        }
    )
    partitions = sorted(consumer.list_topics(opts.topic, timeout=30).topics[opts.topic].partitions)
    consumer.assign([TopicPartition(opts.topic, p) for p in partitions])
    writers: dict[int, object] = {}
    position: dict[int, int] = {}
    pending: list = []  # tuples, or with --decoder block one Arrow table per poll
    msgs_in_pending = 0
    consumed = written = 0
    keep, project = job.keep, job.project
    schemaless_reader = fastavro.schemaless_reader

    def flush() -> None:
        nonlocal written
        if columnar is not None:
            import pyarrow as pa

            table = pa.concat_tables(pending) if pending else None
            if upserter is not None and table is not None:
                written += upserter.write_arrow(table)
            elif upserter is None and table is not None:
                written += table.num_rows
        elif upserter is not None and pending:
            written += upserter.write(pending)
        elif upserter is None:
            written += len(pending)
        pending.clear()
        consumer.commit(asynchronous=False)

    columnar = ColumnarJob(opts.job, registry) if opts.decoder == "block" else None
    interval = opts.flush_interval
    flushed_at, unflushed = time.monotonic(), 0
    while not stop:
        if interval:  # wait for records until the next flush is due, no longer
            timeout = max(0.01, min(1.0, flushed_at + interval - time.monotonic()))
        else:
            timeout = 0.05 if opts.follow else 0.5
        msgs = consumer.consume(num_messages=10000, timeout=timeout)
        if columnar is not None:
            good = []
            for m in msgs:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"consume failed: {m.error()}")
                good.append(m)
                position[m.partition()] = m.offset() + 1
            if good:
                pending.append(columnar.apply([m.value() for m in good]))
            msgs_in_pending = sum(t.num_rows for t in pending)
        for m in msgs if columnar is None else ():
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consume failed: {m.error()}")
            value = m.value()
            schema_id = int.from_bytes(value[1:5], "big")
            writer = writers.get(schema_id)
            if writer is None:
                writer = writers[schema_id] = fastavro.parse_schema(
                    json.loads(registry.get_schema(schema_id).schema_str)
                )
            record = schemaless_reader(io.BytesIO(value[5:]), writer, None)
            if keep is None or keep(record):
                pending.append(project(record))
            position[m.partition()] = m.offset() + 1
        consumed += len(msgs)
        drained = ends is not None and all(position.get(p, 0) >= end for p, end in ends.items())
        size = msgs_in_pending if columnar is not None else len(pending)
        unflushed += len(msgs)
        if interval and opts.follow:
            if unflushed and time.monotonic() - flushed_at >= interval:
                flush()
                flushed_at, unflushed = time.monotonic(), 0
        elif msgs and (size >= opts.batch or drained or opts.follow):
            flush()
        if drained:
            break
    if pending:
        flush()
    consumer.close()
    run = time.perf_counter() - started
    print(json.dumps({"consumed": consumed, "written": written, "run_sec": round(run, 3)}))
    print(f"hand loop: {consumed} consumed, {written} written, finished in {run:.1f}s", file=sys.stderr)


class ColumnarJob:
    """The job on Arrow columns: a poll's payloads of one writer schema, stripped of their 5-byte frame and
    concatenated, are one data block of an Avro container file whose header carries that schema; polars reads it
    into Arrow, and the projection or filter runs in pyarrow.compute."""

    SYNC = b"hand-loop-sync!!"

    def __init__(self, job: str, registry) -> None:  # type: ignore[no-untyped-def]
        self.job = job
        self.registry = registry
        self.headers: dict[bytes, bytes] = {}

    def header(self, frame: bytes) -> bytes:
        header = self.headers.get(frame)
        if header is None:
            schema = self.registry.get_schema(int.from_bytes(frame[1:5], "big")).schema_str.encode()
            meta = {b"avro.schema": schema, b"avro.codec": b"null"}
            header = b"Obj\x01" + varint(len(meta))
            for key, value in meta.items():
                header += varint(len(key)) + key + varint(len(value)) + value
            header = self.headers[frame] = header + varint(0) + self.SYNC
        return header

    def apply(self, values: list[bytes]):  # type: ignore[no-untyped-def]
        import itertools

        import polars as pl
        import pyarrow as pa
        import pyarrow.compute as pc

        tables = []
        for frame, group in itertools.groupby(values, key=lambda v: v[:5]):
            payloads = list(group)
            body = b"".join([v[5:] for v in payloads])
            block = b"".join((self.header(frame), varint(len(payloads)), varint(len(body)), body, self.SYNC))
            tables.append(pl.read_avro(io.BytesIO(block)).to_arrow())
        t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if self.job == "projection":
            return pa.table(
                {
                    "id": t["id"],
                    "user_id": t["user_id"],
                    "email": t["email"],
                    "country": pc.utf8_lower(t["country"]),
                    "device": t["device"],
                    "amount": t["amount"],
                    "amount_with_fee": pc.multiply(t["amount"], 1.1),
                    "price": t["price"],
                    "ts": t["ts"],
                }
            )
        if self.job == "enrich":
            big = pc.greater(t["amount"], BIG_AMOUNT)
            BIG_SPENDERS.update(pc.filter(t["user_id"], big).to_pylist())
            return pa.table(
                {
                    "id": t["id"],
                    "user_id": t["user_id"],
                    "email": pc.utf8_lower(t["email"]),
                    "country": pc.utf8_upper(t["country"]),
                    "device": t["device"],
                    "amount": t["amount"],
                    "amount_with_fee": pc.multiply(t["amount"], 1.1),
                    "price": t["price"],
                    "ts": t["ts"],
                    "segment": pc.binary_join_element_wise(t["device"], t["country"], pa.scalar(":", t["device"].type)),
                    "big_spender": pc.is_in(t["user_id"], value_set=pa.array(sorted(BIG_SPENDERS), t["user_id"].type)),
                }
            )
        if self.job == "filter":
            return t.filter(pc.equal(t["sel_key"], 0)).select(["id", "user_id", "email", "country", "ts"])
        kept = t.filter(pc.not_equal(t["sel_key"], 0))
        return kept.select(["id", "user_id", "email", "country", "amount", "price", "ts"])


if __name__ == "__main__":
    main()
