"""Benchmark: a ClickHouse table (embedded engine) backfilled into Postgres in job mode, 5M rows by default.

    .venv/bin/python bench/clickhouse_backfill_postgres.py [--rows N] [--runs K] [--page-size P]

The table (id Int64, account String, amount Float64, ts DateTime; ORDER BY id) is built once per invocation
in an embedded ClickHouse data path; each run reads it with a `clickhouse` source into a fresh Postgres
table through the `postgres` upsert sink. Prints and records rows/s (wall and run), CPU-seconds per million
rows and peak RSS of the engine's process tree. Needs the local Postgres (`infra/services up postgres`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generator_sql_postgres import connect, postgres_env
from harness import measure, record, streamling_cmd, summarize

PIPELINE = """
sources:
  history: {{type: clickhouse, table_name: bench.events, primary_key: id}}
sinks:
  sink: {{type: postgres, from: history, schema: {schema}, table: events}}
"""
BUILD = """
import clickhouse_connect
c = clickhouse_connect.get_client(dsn="chdb://{path}")
c.command("CREATE DATABASE IF NOT EXISTS bench")
c.command("CREATE TABLE bench.events (id Int64, account String, amount Float64, ts DateTime) "
          "ENGINE = MergeTree ORDER BY id")
c.command("INSERT INTO bench.events SELECT number + 1, concat('acct_', toString(number % 10000)), "
          "(number % 100000) / 100, toDateTime('2025-01-01 00:00:00') + number FROM numbers({rows})")
print(c.query("SELECT count() FROM bench.events").result_rows[0][0])
"""
FINISHED = re.compile(r"Finished in ([0-9.]+)s")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=5_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--page-size", type=int, default=250_000)
    args.add_argument("--master", default="local[2]")
    opts = args.parse_args()

    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    data = work / "clickhouse"
    built = subprocess.run(
        [sys.executable, "-c", BUILD.format(path=data, rows=opts.rows)], check=True, capture_output=True, text=True
    )
    print(f"built bench.events with {int(built.stdout.strip()):,} rows in {data}")
    pg = postgres_env()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(pg)
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
            "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data),
            "STREAMLING__CLICKHOUSE_SOURCE__PAGE_SIZE": str(opts.page_size),
            "STREAMLING__APPLICATION_ID": "bench",
        }
    )
    admin = connect(pg)
    runs = []
    for i in range(opts.warmup + opts.runs):
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        pipeline = work / "pipeline.yaml"
        pipeline.write_text(textwrap.dedent(PIPELINE.format(schema=schema)))
        m = measure([*streamling_cmd(), str(pipeline)], env, work)
        if m.returncode != 0:
            sys.exit(f"run failed ({m.returncode}):\n{m.stderr_tail}")
        stored = admin.execute(f'SELECT count(*) FROM "{schema}".events').fetchone()[0]
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        if stored != opts.rows:
            sys.exit(f"expected {opts.rows} rows in Postgres, found {stored}")
        run_sec = float(FINISHED.search(m.stderr_tail).group(1))
        m.extra = {
            "run_sec": run_sec,
            "rows_per_sec_wall": round(opts.rows / m.wall_sec),
            "rows_per_sec_run": round(opts.rows / run_sec),
            "cpu_sec_per_million": round(m.cpu_sec / (opts.rows / 1e6), 2),
        }
        label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
        print(
            f"{label}: {m.wall_sec:.1f}s wall ({m.extra['rows_per_sec_wall']:,} rows/s), {run_sec:.1f}s run "
            f"({m.extra['rows_per_sec_run']:,} rows/s), {m.extra['cpu_sec_per_million']} CPU-s/M, "
            f"peak RSS {m.peak_rss_mb:,.0f} MB"
        )
        if i >= opts.warmup:
            runs.append(m)
    result = {
        "rows": opts.rows,
        "page_size": opts.page_size,
        "master": opts.master,
        "rows_per_sec_wall": summarize([r.extra["rows_per_sec_wall"] for r in runs]),
        "rows_per_sec_run": summarize([r.extra["rows_per_sec_run"] for r in runs]),
        "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
        "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
        "runs": [r.recorded() for r in runs],
    }
    path = record("clickhouse_backfill_postgres", result)
    print(
        f"median: {result['rows_per_sec_wall']['median']:,.0f} rows/s wall, "
        f"{result['rows_per_sec_run']['median']:,.0f} rows/s run, peak RSS {result['peak_rss_mb']['median']:,.0f} MB "
        f"-> {path}"
    )


if __name__ == "__main__":
    main()
