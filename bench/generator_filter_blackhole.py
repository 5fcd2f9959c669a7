"""Benchmark: generator → SQL filter → blackhole, 5M rows by default, in job mode.

    .venv/bin/python bench/generator_filter_blackhole.py [--rows N] [--runs K] [--master local[2]]

Prints rows/s (wall clock including process start, and the run itself without Spark start-up), CPU
seconds per million rows and the peak RSS of the whole process tree; records JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import measure, record, streamling_cmd, summarize

PIPELINE = """
sources:
  gen: {{type: generator, rows: {rows}}}
transforms:
  large:
    type: sql
    primary_key: id
    sql: SELECT id, amount, name, created_at FROM gen WHERE amount > 1000
sinks:
  sink: {{type: blackhole, from: large}}
"""
FINISHED = re.compile(r"Finished in ([0-9.]+)s")
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=5_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--master", default="local[2]")
    args.add_argument("--batch", type=int, help="record_batch_size (rows per epoch); default: the engine's")
    opts = args.parse_args()

    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    pipeline = work / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(rows=opts.rows)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
        }
    )
    if opts.batch:
        env["STREAMLING__RECORD_BATCH_SIZE"] = str(opts.batch)
    runs = []
    for i in range(opts.warmup + opts.runs):
        m = measure([*streamling_cmd(), str(pipeline)], env, work)
        if m.returncode != 0:
            sys.exit(f"run failed ({m.returncode}):\n{m.stderr_tail}")
        run_sec = float(FINISHED.search(m.stderr_tail).group(1))
        written = int(WRITTEN.search(m.stderr_tail).group(1))
        m.extra = {
            "run_sec": run_sec,
            "rows_written": written,
            "input_rows_per_sec_wall": round(opts.rows / m.wall_sec),
            "input_rows_per_sec_run": round(opts.rows / run_sec),
            "cpu_sec_per_million": round(m.cpu_sec / (opts.rows / 1e6), 2),
        }
        label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
        print(
            f"{label}: {m.wall_sec:.1f}s wall ({m.extra['input_rows_per_sec_wall']:,} rows/s), "
            f"{run_sec:.1f}s run ({m.extra['input_rows_per_sec_run']:,} rows/s), "
            f"{m.extra['cpu_sec_per_million']} CPU-s/M rows, peak RSS {m.peak_rss_mb:,.0f} MB"
        )
        if i >= opts.warmup:
            runs.append(m)
    result = {
        "rows": opts.rows,
        "master": opts.master,
        "record_batch_size": opts.batch or "engine default",
        "rows_written_per_run": runs[0].extra["rows_written"],
        "input_rows_per_sec_wall": summarize([r.extra["input_rows_per_sec_wall"] for r in runs]),
        "input_rows_per_sec_run": summarize([r.extra["input_rows_per_sec_run"] for r in runs]),
        "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
        "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
        "runs": [r.recorded() for r in runs],
    }
    path = record("generator_filter_blackhole", result)
    print(
        f"median: {result['input_rows_per_sec_wall']['median']:,.0f} rows/s wall, "
        f"{result['input_rows_per_sec_run']['median']:,.0f} rows/s run, "
        f"peak RSS {result['peak_rss_mb']['median']:,.0f} MB -> {path}"
    )


if __name__ == "__main__":
    main()
