"""Peer: the same job as a Quix Streams application (runs in bench/.venv-quix, quixstreams 3.28.1).

    bench/.venv-quix/bin/python bench/peers/quix_app.py --topic T --group G --job upsert --schema S --table T

Values are decoded by Quix's own ``AvroDeserializer`` in Schema Registry mode (it hands the Confluent-framed bytes
to confluent-kafka's ``AvroDeserializer``, which fetches the writer schema by id from our registry); the filter and
projection are ``StreamingDataFrame.filter`` / ``apply``; the upsert is a ``BatchingSink`` doing the same COPY +
merge as the hand loop (Quix's community ``PostgreSQLSink`` needs psycopg2 and issues one ``INSERT … ON CONFLICT``
over the batch, which fails when a batch holds an id twice). Quix flushes sinks and commits offsets at each
checkpoint (``--commit-interval`` seconds).

End detection (job mode): the high watermarks are read before the app starts; an ``update`` step ahead of the
filter sees every message's partition and offset (``message_context()``) and calls ``Application.stop()`` once
every partition reached its watermark. ``stop`` ends the poll loop after the current message, and Quix then
forces a last checkpoint, which flushes the sink and commits, so the process exits with every row written.
With ``--follow`` it runs until SIGTERM (Quix's own handler: stop, final checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job import JOBS, ClickHouseWriter, Upserter, connect_from_env, high_watermarks


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--topic", required=True)
    args.add_argument("--group", required=True)
    args.add_argument("--job", choices=sorted(JOBS), required=True)
    args.add_argument("--schema")
    args.add_argument("--table")
    args.add_argument("--clickhouse-path", help="write into this embedded ClickHouse data path (chdb) instead")
    args.add_argument("--clickhouse-table", help="with --clickhouse-path: the table, database.table")
    args.add_argument("--commit-interval", type=float, default=5.0, help="Quix checkpoint interval, seconds")
    args.add_argument("--follow", action="store_true", help="run until SIGTERM")
    opts = args.parse_args()

    from quixstreams import Application, message_context
    from quixstreams.models.serializers.avro import AvroDeserializer
    from quixstreams.models.serializers.schema_registry import SchemaRegistryClientConfig
    from quixstreams.sinks import BatchingSink, SinkBatch

    started = time.perf_counter()
    env = dict(os.environ)
    brokers = env["STREAMLING__KAFKA_SOURCE__BROKERS"]
    job = JOBS[opts.job]
    counts = {"consumed": 0, "written": 0}

    class CopyMergeSink(BatchingSink):
        def setup(self) -> None:
            self.upserter = Upserter(connect_from_env(env), opts.schema, opts.table)

        def write(self, batch: SinkBatch) -> None:
            counts["written"] += self.upserter.write([item.value for item in batch])

    class ClickHouseInsertSink(BatchingSink):
        def setup(self) -> None:
            self.writer = ClickHouseWriter(opts.clickhouse_path, opts.clickhouse_table, job.columns)

        def write(self, batch: SinkBatch) -> None:
            counts["written"] += self.writer.write([item.value for item in batch])

    app = Application(
        broker_address=brokers,
        consumer_group=opts.group,
        auto_offset_reset="earliest",
        commit_interval=opts.commit_interval,
        state_dir=tempfile.mkdtemp(prefix="quix-state-"),
        use_changelog_topics=False,
        loglevel="WARNING",
        # As the other contenders: the local broker answers fetches far above fetch.max.bytes, and librdkafka's
        # default (50 MB) lets a response outgrow receive.message.max.bytes on a deep topic, so nothing is read.
        consumer_extra_config={"fetch.max.bytes": 16 * 1024 * 1024, "receive.message.max.bytes": 1_000_000_000},
    )
    deserializer = AvroDeserializer(
        schema_registry_client_config=SchemaRegistryClientConfig(
            url=env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]
        )
    )
    sdf = app.dataframe(app.topic(opts.topic, value_deserializer=deserializer))
    remaining: set[int] = set()

    if not opts.follow:
        ends = high_watermarks(brokers, opts.topic)
        remaining.update(ends)

        def at_end(_value: dict) -> None:
            ctx = message_context()
            counts["consumed"] += 1
            if ctx.partition in remaining and ctx.offset + 1 >= ends[ctx.partition]:
                remaining.discard(ctx.partition)
                if not remaining:
                    app.stop()

        sdf = sdf.update(at_end)
    if job.keep is not None:
        sdf = sdf.filter(job.keep)
    sdf = sdf.apply(job.project)
    if opts.clickhouse_path:
        sdf.sink(ClickHouseInsertSink())
    elif opts.job == "upsert":
        sdf.sink(CopyMergeSink())
    elif not opts.follow:
        sdf = sdf.update(lambda _row: counts.__setitem__("written", counts["written"] + 1))
    if opts.follow or remaining:
        app.run()
    run = time.perf_counter() - started
    print(json.dumps({**counts, "run_sec": round(run, 3)}))
    print(f"quix: {counts['consumed']} consumed, {counts['written']} written, finished in {run:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
