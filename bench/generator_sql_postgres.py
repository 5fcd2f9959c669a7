"""Benchmark: generator → SQL filter → Postgres upsert, next to a hand-written loop doing the same job.

    .venv/bin/python bench/generator_sql_postgres.py [--rows N] [--runs K] [--key-space K] [--parallelism P]

Both contenders run as subprocesses in the same invocation, alternating (A B A B …, one warm-up each):

- **streamling**: the real CLI in job mode, `local[2]`, in-memory state;
- **hand-written**: one Python process that generates the same rows (the generator's own vectorised
  function), filters them with Arrow, and per 250k-row batch COPYs CSV into a temp staging table and
  merges with one ``INSERT … ON CONFLICT DO UPDATE`` in one transaction — the practical ceiling for a
  Python client, with no framework around it.

Prints rows/s (wall clock including process start, and the engine's run time without Spark start-up),
CPU-seconds per million rows and peak RSS of each process tree, and the ratios; records JSON in
bench/results/. Needs the local Postgres (`infra/services up postgres`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import measure, record, streamling_cmd, summarize

REPO = Path(__file__).resolve().parent.parent
PIPELINE = """
sources:
  gen: {{type: generator, rows: {rows}, key_space: {key_space}}}
transforms:
  kept:
    type: sql
    primary_key: id
    sql: SELECT id, amount, name, created_at FROM gen WHERE amount > 200
sinks:
  sink: {{type: postgres, from: kept, schema: {schema}, table: upserts, parallelism: {parallelism}}}
"""
FINISHED = re.compile(r"Finished in ([0-9.]+)s")
EPOCH = re.compile(r"^(\S+) DEBUG streamling\.runtime: Epoch finalized: \d+ \(.*?, (\d+) rows", re.MULTILINE)
BATCH_DONE = re.compile(r"^batch done at ([0-9.]+)s: (\d+) rows$", re.MULTILINE)


def steady_rate(finished: list[tuple[float, int]]) -> float | None:
    """Rows/s between the first and the last finished epoch (or batch): throughput once running,
    without start-up and the first epoch's warm-up."""
    if len(finished) < 3:
        return None
    rows = sum(n for _, n in finished[1:])
    return rows / (finished[-1][0] - finished[0][0])


def epochs_of(stderr: str) -> list[tuple[float, int]]:
    from datetime import datetime

    return [(datetime.fromisoformat(t).timestamp(), int(n)) for t, n in EPOCH.findall(stderr)]


BATCH = 250_000


def postgres_env() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, str(REPO / "infra" / "services"), "env", "postgres"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    env = {}
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def connect(env: dict[str, str]):  # type: ignore[no-untyped-def]
    import psycopg

    p = "STREAMLING__POSTGRES_SINK__"
    return psycopg.connect(
        host=env[p + "HOST"],
        port=int(env[p + "PORT"]),
        user=env[p + "USER"],
        password=env[p + "PASS"],
        dbname=env[p + "DB"],
        autocommit=True,
    )


def hand_written(rows: int, key_space: int, schema: str) -> None:
    """The baseline, run in its own process (`--hand-written`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
    from streamling.builtins.generator_reader import generate
    from streamling.config import load_settings

    started = time.perf_counter()
    settings = load_settings(environ={})
    spec = GeneratorSourceSpec.model_validate({"type": "generator", "rows": rows, "key_space": key_space})
    config = GeneratorSource("gen", spec, settings).reader_config()
    conn = connect(dict(os.environ))
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        cur.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".upserts (id bigint PRIMARY KEY, amount double precision, '
            "name text, created_at timestamptz)"
        )
        cur.execute("CREATE TEMP TABLE staging (id bigint, amount double precision, name text, created_at timestamptz)")
    conn.commit()
    written = 0
    for batch in generate(config, 0, rows, BATCH):
        kept = pa.Table.from_batches([batch]).filter(pc.greater(batch.column("amount"), 200))
        kept = kept.select(["id", "amount", "name", "created_at"])
        # the last row per key wins, as in the pipeline: keep each id's highest position
        positions = pa.array(np.arange(kept.num_rows))
        last = kept.select(["id"]).append_column("pos", positions).group_by("id").aggregate([("pos", "max")])
        table = kept.take(last.column("pos_max"))
        out = io.BytesIO()
        pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False))
        with conn.cursor() as cur:
            cur.execute("TRUNCATE staging")
            with cur.copy("COPY staging FROM STDIN WITH (FORMAT csv)") as copy:
                copy.write(out.getvalue())
            cur.execute(
                f'INSERT INTO "{schema}".upserts SELECT * FROM staging ON CONFLICT (id) DO UPDATE SET '
                "amount = EXCLUDED.amount, name = EXCLUDED.name, created_at = EXCLUDED.created_at"
            )
        conn.commit()
        written += table.num_rows
        print(f"batch done at {time.perf_counter() - started:.3f}s: {batch.num_rows} rows", file=sys.stderr)
    print(json.dumps({"written": written, "run_sec": round(time.perf_counter() - started, 3)}))
    print(f"Finished in {time.perf_counter() - started:.1f}s", file=sys.stderr)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=2_000_000)
    args.add_argument("--key-space", type=int, default=500_000)
    args.add_argument("--runs", type=int, default=5)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--parallelism", type=int, default=1)
    args.add_argument("--master", default="local[2]")
    args.add_argument("--hand-written", metavar="SCHEMA", help=argparse.SUPPRESS)
    opts = args.parse_args()
    if opts.hand_written:
        hand_written(opts.rows, opts.key_space, opts.hand_written)
        return

    pg = postgres_env()
    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(pg)
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
            "STREAMLING__APPLICATION_ID": "bench",
            "STREAMLING__LOG_LEVEL": "debug",  # per-epoch lines for the steady-state figure
        }
    )
    results: dict[str, list] = {"streamling": [], "hand-written": []}
    admin = connect(pg)
    for i in range(opts.warmup + opts.runs):
        for contender in ("streamling", "hand-written"):
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            if contender == "streamling":
                pipeline = work / "pipeline.yaml"
                text = PIPELINE.format(
                    rows=opts.rows, key_space=opts.key_space, schema=schema, parallelism=opts.parallelism
                )
                pipeline.write_text(textwrap.dedent(text))
                cmd = [*streamling_cmd(), str(pipeline)]
            else:
                cmd = [
                    sys.executable,
                    __file__,
                    "--rows",
                    str(opts.rows),
                    "--key-space",
                    str(opts.key_space),
                    "--hand-written",
                    schema,
                ]
            m = measure(cmd, env, work)
            if m.returncode != 0:
                sys.exit(f"{contender} failed ({m.returncode}):\n{m.stderr_tail}")
            stored = admin.execute(f'SELECT count(*) FROM "{schema}".upserts').fetchone()[0]
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            run_sec = float(FINISHED.search(m.stderr_tail).group(1))
            if contender == "streamling":
                finished = epochs_of(m.stderr)
            else:
                finished = [(float(t), int(n)) for t, n in BATCH_DONE.findall(m.stderr)]
            steady = steady_rate(finished)
            m.extra = {
                "rows_per_sec_steady": round(steady) if steady else None,
                "run_sec": run_sec,
                "rows_in_table": stored,
                "rows_per_sec_wall": round(opts.rows / m.wall_sec),
                "rows_per_sec_run": round(opts.rows / run_sec),
                "cpu_sec_per_million": round(m.cpu_sec / (opts.rows / 1e6), 2),
            }
            label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
            print(
                f"{label} {contender:>12}: {m.wall_sec:5.1f}s wall ({m.extra['rows_per_sec_wall']:>9,} rows/s), "
                f"{run_sec:5.1f}s run ({m.extra['rows_per_sec_run']:>9,} rows/s), "
                f"steady {m.extra['rows_per_sec_steady'] or 0:>9,} rows/s, "
                f"{m.extra['cpu_sec_per_million']:5.2f} CPU-s/M, peak RSS {m.peak_rss_mb:,.0f} MB, "
                f"{stored:,} rows in table"
            )
            if i >= opts.warmup:
                results[contender].append(m)
    counts = {r.extra["rows_in_table"] for runs in results.values() for r in runs}
    if len(counts) != 1:
        sys.exit(f"contenders disagree on the final table: {counts}")
    summary = {
        name: {
            "rows_per_sec_wall": summarize([r.extra["rows_per_sec_wall"] for r in runs]),
            "rows_per_sec_run": summarize([r.extra["rows_per_sec_run"] for r in runs]),
            "rows_per_sec_steady": summarize([r.extra["rows_per_sec_steady"] or 0 for r in runs]),
            "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
            "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
            "runs": [r.recorded() for r in runs],
        }
        for name, runs in results.items()
    }
    ratio_wall = (
        summary["streamling"]["rows_per_sec_wall"]["median"] / summary["hand-written"]["rows_per_sec_wall"]["median"]
    )
    ratio_run = (
        summary["streamling"]["rows_per_sec_run"]["median"] / summary["hand-written"]["rows_per_sec_run"]["median"]
    )
    steady = {name: summary[name]["rows_per_sec_steady"]["median"] for name in summary}
    ratio_steady = steady["streamling"] / steady["hand-written"]
    path = record(
        "generator_sql_postgres",
        {
            "rows": opts.rows,
            "key_space": opts.key_space,
            "master": opts.master,
            "parallelism": opts.parallelism,
            "rows_in_table": counts.pop(),
            "ratio_wall": round(ratio_wall, 2),
            "ratio_run": round(ratio_run, 2),
            "ratio_steady": round(ratio_steady, 2),
            **summary,
        },
    )
    for name in results:
        s = summary[name]
        print(
            f"{name:>12}: {s['rows_per_sec_wall']['median']:>9,.0f} rows/s wall, "
            f"{s['rows_per_sec_run']['median']:>9,.0f} rows/s run, "
            f"{s['rows_per_sec_steady']['median']:>9,.0f} rows/s steady, {s['cpu_sec_per_million']['median']} CPU-s/M, "
            f"peak RSS {s['peak_rss_mb']['median']:,.0f} MB"
        )
    print(
        f"streamling / hand-written: {ratio_wall:.2f}x wall, {ratio_run:.2f}x run, {ratio_steady:.2f}x steady -> {path}"
    )


if __name__ == "__main__":
    main()
