"""Benchmark: Kafka (Avro, Schema Registry) → SQL → blackhole, the original Streamling's published scenario.

    .venv/bin/python bench/kafka_avro_sql_blackhole.py [--records N] [--runs K] [--partitions P]

5,000,000 Avro records (a pool of 1,000 distinct ~70-byte payloads cycled) of
{id, user_id, email, country, device, amount, price decimal(20,4), ts, sel_key}; two SQLs: a projection
and a 10 % filter. Each run is the real CLI in job mode reading the topic from the start with a fresh
consumer group and in-memory state (``ending_offsets: latest`` makes it end when the topic is consumed);
one warm-up and five counted runs per SQL. Starts the broker and registry with infra/services.
The original's baseline is ~108,000 input records/s on 8 vCPUs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import measure, record, streamling_cmd, summarize
from kafka_data import payload_pool, produce, services_env

SQLS = {
    "projection": "SELECT id, user_id, email, lower(country) AS country, device, amount, "
    "amount * 1.1 AS amount_with_fee, price, ts FROM events",
    "filter": "SELECT id, user_id, email, country, ts FROM events WHERE sel_key = 0",
}
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--records", type=int, default=5_000_000)
    args.add_argument("--runs", type=int, default=5)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--partitions", type=int, default=4)
    args.add_argument("--master", default="local[2]")
    args.add_argument("--batch", type=int, default=500_000, help="record_batch_size (rows per epoch)")
    args.add_argument("--topic", help="reuse an existing topic instead of producing a new one")
    opts = args.parse_args()

    env = services_env()
    topic = opts.topic or f"bench_events_{uuid.uuid4().hex[:8]}"
    pool = payload_pool(1)
    payload = round(sum(len(p) for p in pool) / len(pool), 1)
    if not opts.topic:
        print(f"producing {opts.records:,} records to {topic} ...", flush=True)
        produce(env, topic, opts.records, opts.partitions)
    work = Path(tempfile.mkdtemp(prefix="streamling-bench-kafka-"))
    results = {}
    for name, sql in SQLS.items():
        pipeline = work / f"{name}.yaml"
        pipeline.write_text(
            textwrap.dedent(f"""
            sources:
              events: {{type: kafka, topic: {topic}, ending_offsets: latest}}
            transforms:
              shaped: {{type: sql, primary_key: id, sql: "{sql}"}}
            sinks:
              sink: {{type: blackhole, from: shaped}}
            """)
        )
        runs = []
        for i in range(opts.warmup + opts.runs):
            run_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
            run_env.update(env)
            run_env.update(
                {
                    "STREAMLING__JOB_MODE": "true",
                    "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
                    "STREAMLING__APPLICATION_ID": f"bench_{uuid.uuid4().hex[:8]}",
                    "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": f"bench_{uuid.uuid4().hex[:8]}",
                    "STREAMLING__SPARK__MASTER": opts.master,
                    "STREAMLING__RECORD_BATCH_SIZE": str(opts.batch),
                    "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
                }
            )
            m = measure([*streamling_cmd(), str(pipeline)], run_env, work)
            if m.returncode != 0:
                sys.exit(f"run failed ({m.returncode}):\n{m.stderr_tail}")
            written = int(WRITTEN.search(m.stderr_tail).group(1))
            m.extra = {
                "rows_written": written,
                "input_rec_per_sec": round(opts.records / m.wall_sec),
                "output_rec_per_sec": round(written / m.wall_sec),
                "cpu_sec_per_million": round(m.cpu_sec / (opts.records / 1e6), 2),
            }
            label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
            print(
                f"{name} {label}: {m.wall_sec:.1f}s, {m.extra['input_rec_per_sec']:,} in rec/s, "
                f"{m.extra['output_rec_per_sec']:,} out rec/s, {m.extra['cpu_sec_per_million']} CPU-s/M, "
                f"peak RSS {m.peak_rss_mb:,.0f} MB",
                flush=True,
            )
            if i >= opts.warmup:
                runs.append(m)
        results[name] = {
            "sql": sql,
            "rows_written_per_run": runs[0].extra["rows_written"],
            "wall_sec": summarize([r.wall_sec for r in runs]),
            "input_rec_per_sec": summarize([r.extra["input_rec_per_sec"] for r in runs]),
            "output_rec_per_sec": summarize([r.extra["output_rec_per_sec"] for r in runs]),
            "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
            "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
            "runs": [r.recorded() for r in runs],
        }
    path = record(
        "kafka_avro_sql_blackhole",
        {
            "records": opts.records,
            "partitions": opts.partitions,
            "avg_payload_bytes": payload,
            "topic": topic,
            "master": opts.master,
            "record_batch_size": opts.batch,
            "baseline_original_rec_per_sec_8vcpu": 108_000,
            "results": results,
        },
    )
    for name, r in results.items():
        print(
            f"{name}: median {r['input_rec_per_sec']['median']:,.0f} input rec/s "
            f"(min {r['input_rec_per_sec']['min']:,.0f}), {r['cpu_sec_per_million']['median']} CPU-s/M, "
            f"peak RSS {r['peak_rss_mb']['median']:,.0f} MB"
        )
    print(f"recorded {path}")


if __name__ == "__main__":
    main()
