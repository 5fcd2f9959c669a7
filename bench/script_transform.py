"""Benchmark: generator → script transform (docs/transforms.md's example) → blackhole, next to the same logic as SQL.

    .venv/bin/python bench/script_transform.py [--rows N] [--runs K] [--batch N] [--master local[2]]

1,000,000 rows of 6 fields {id bigint, amount double, name string, created_at timestamp, qty int, active
boolean}; the script adds ``tier`` (``input.amount > 1000 ? 'premium' : 'standard'``) and returns all 7 columns
(declared ``schema``); the SQL contender is ``SELECT *, CASE WHEN amount > 1000 THEN 'premium' ELSE 'standard'
END AS tier``. Job mode, in-memory state, the real CLI; one warm-up each, then the counted runs alternate
(script, SQL, script, SQL, …). Prints and records rows/s wall, run and steady (epochs after the first) and
CPU-s per million rows; the target is ≥ 200,000 records/s for the script on 2 cores.
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
from harness import Measurement, measure, record, streamling_cmd, summarize

SOURCE = """
sources:
  gen:
    type: generator
    rows: {rows}
    schema: {{id: bigint, amount: double, name: string, created_at: timestamp, qty: int, active: boolean}}
"""
CONTENDERS = {
    "script": """
transforms:
  tiered:
    type: script
    from: gen
    language: javascript
    primary_key: id
    schema: {{id: bigint, amount: double, name: string, created_at: timestamp, qty: int, active: boolean, tier: string}}
    script: |
      function process(input) {{
        input.tier = input.amount > 1000 ? 'premium' : 'standard';
        return input;
      }}
sinks:
  sink: {{type: blackhole, from: tiered}}
""",
    "sql": """
transforms:
  tiered:
    type: sql
    primary_key: id
    sql: SELECT *, CASE WHEN amount > 1000 THEN 'premium' ELSE 'standard' END AS tier FROM gen
sinks:
  sink: {{type: blackhole, from: tiered}}
""",
}
FINISHED = re.compile(r"Finished in ([0-9.]+)s")
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")
EPOCH = re.compile(r"^(\S+) DEBUG streamling\.runtime: Epoch finalized: \d+ \(.*?, (\d+) rows", re.MULTILINE)


def steady_window(stderr: str) -> tuple[float, float, int] | None:
    """(first epoch finished, last epoch finished, rows in the epochs after the first): the run once going, without
    start-up and the first epoch's warm-up (Python workers, the sandbox's WebAssembly)."""
    from datetime import datetime

    finished = [(datetime.fromisoformat(t).timestamp(), int(n)) for t, n in EPOCH.findall(stderr)]
    if len(finished) < 3:
        return None
    return finished[0][0], finished[-1][0], sum(n for _, n in finished[1:])


def steady_figures(m: Measurement) -> dict:
    """Steady rows/s, and what the process tree burnt meanwhile: CPU µs per row, the cores it got (on a machine
    shared with other work it may get less than 2), and the rows/s that CPU cost allows on 2 dedicated cores."""
    window = steady_window(m.stderr)
    if window is None:
        return {"rows_per_sec_steady": None}
    start, end, rows = window
    out: dict = {"rows_per_sec_steady": round(rows / (end - start))}
    cpu = m.cpu_between(start, end)
    if cpu:
        out["steady_cpu_us_per_row"] = round(cpu / rows * 1e6, 2)
        out["steady_cores_used"] = round(cpu / (end - start), 2)
        out["rows_per_sec_2_cores_cpu_bound"] = round(2 * rows / cpu)
    return out


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=1_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--batch", type=int, default=250_000, help="record_batch_size (rows per epoch)")
    args.add_argument("--master", default="local[2]")
    args.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the CLI under `nice -n N` (negative needs root): on a machine shared with other work, a negative "
        "value keeps the measurement about the pipeline rather than the neighbours",
    )
    opts = args.parse_args()

    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    pipelines = {}
    for name, rest in CONTENDERS.items():
        pipelines[name] = work / f"{name}.yaml"
        pipelines[name].write_text(textwrap.dedent(SOURCE.format(rows=opts.rows) + rest.format()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
            "STREAMLING__RECORD_BATCH_SIZE": str(opts.batch),
            "STREAMLING__LOG_LEVEL": "debug",  # per-epoch lines for the steady-state figure
        }
    )
    runs: dict[str, list[Measurement]] = {name: [] for name in CONTENDERS}
    for i in range(opts.warmup + opts.runs):
        for name, pipeline in pipelines.items():
            nice = ["nice", "-n", str(opts.nice)] if opts.nice else []
            m = measure([*nice, *streamling_cmd(), str(pipeline)], env, work)
            if m.returncode != 0:
                sys.exit(f"{name} run failed ({m.returncode}):\n{m.stderr_tail}")
            run_sec = float(FINISHED.search(m.stderr).group(1))
            m.extra = {
                "run_sec": run_sec,
                "rows_written": int(WRITTEN.search(m.stderr).group(1)),
                "rows_per_sec_wall": round(opts.rows / m.wall_sec),
                "rows_per_sec_run": round(opts.rows / run_sec),
                **steady_figures(m),
                "cpu_sec_per_million": round(m.cpu_sec / (opts.rows / 1e6), 2),
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
            label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
            e = m.extra
            print(
                f"{label} {name:>6}: {e['rows_per_sec_wall']:>9,} rows/s wall, {e['rows_per_sec_run']:>9,} run, "
                f"{e['rows_per_sec_steady'] or 0:>9,} steady ({e.get('steady_cpu_us_per_row', 0):.2f} CPU-µs/row on "
                f"{e.get('steady_cores_used', 0):.2f} cores: {e.get('rows_per_sec_2_cores_cpu_bound', 0):>9,} on 2 "
                f"cores), {e['cpu_sec_per_million']:5.2f} CPU-s/M rows, peak RSS {m.peak_rss_mb:,.0f} MB, "
                f"load {e['load_average_1m']}"
            )
            if i >= opts.warmup:
                runs[name].append(m)
    result: dict = {
        "rows": opts.rows,
        "master": opts.master,
        "record_batch_size": opts.batch,
        "nice": opts.nice,
        "contenders": {},
    }
    for name, measured in runs.items():
        result["contenders"][name] = {
            "rows_written_per_run": measured[0].extra["rows_written"],
            "rows_per_sec_wall": summarize([r.extra["rows_per_sec_wall"] for r in measured]),
            "rows_per_sec_run": summarize([r.extra["rows_per_sec_run"] for r in measured]),
            "rows_per_sec_steady": summarize([r.extra["rows_per_sec_steady"] or 0 for r in measured]),
            "steady_cpu_us_per_row": summarize([r.extra.get("steady_cpu_us_per_row", 0) for r in measured]),
            "steady_cores_used": summarize([r.extra.get("steady_cores_used", 0) for r in measured]),
            "rows_per_sec_2_cores_cpu_bound": summarize(
                [r.extra.get("rows_per_sec_2_cores_cpu_bound", 0) for r in measured]
            ),
            "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in measured]),
            "peak_rss_mb": summarize([r.peak_rss_mb for r in measured]),
            "runs": [r.recorded() for r in measured],
        }
    path = record("script_transform", result)
    for name, summary in result["contenders"].items():
        print(
            f"median {name:>6}: {summary['rows_per_sec_wall']['median']:,.0f} rows/s wall, "
            f"{summary['rows_per_sec_run']['median']:,.0f} run, {summary['rows_per_sec_steady']['median']:,.0f} "
            f"steady, {summary['steady_cpu_us_per_row']['median']} CPU-µs/row steady "
            f"({summary['rows_per_sec_2_cores_cpu_bound']['median']:,.0f} rows/s on 2 cores, CPU-bound), "
            f"{summary['cpu_sec_per_million']['median']} CPU-s/M rows"
        )
    print(f"-> {path}")


if __name__ == "__main__":
    main()
