"""Benchmark: a plugin transform's per-row cost next to a SQL transform doing the same filter.

    .venv/bin/python bench/plugin_transform.py [--rows N] [--runs K] [--batch N] [--master local[2]] [--results DIR]

The example plugin's random_source (plugins/basic_plugin, seed 0: id, alphanumeric_field, num_field, _gs_op with
~60 % inserts) → either its filter_transform (``_gs_op: i``, Arrow on the executors through ``mapInArrow``) or
the SQL ``SELECT * FROM src WHERE _gs_op = 'i'`` → blackhole. Same input, same sink, same rows out (checked every
run). Job mode, in-memory state, the real CLI; one warm-up each, then the counted runs alternate (plugin, SQL, …).
Prints and records rows/s (wall, run, steady) and µs per row for both — wall-clock µs per input row, and CPU µs
per row at steady state — and the plugin's overhead per row over SQL.
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
from harness import RESULTS, Measurement, measure, record, streamling_cmd, summarize

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "basic_plugin"
SOURCE = """
sources:
  src:
    type: basic_plugin.random_source
    options: {{max_rows: "{rows}", record_batch_size: "{batch}", seed: "0"}}
"""
CONTENDERS = {
    "plugin": """
transforms:
  inserts:
    type: basic_plugin.filter_transform
    from: src
    options: {_gs_op: i}
sinks:
  sink: {type: blackhole, from: inserts}
""",
    "sql": """
transforms:
  inserts:
    type: sql
    primary_key: id
    sql: SELECT * FROM src WHERE _gs_op = 'i'
sinks:
  sink: {type: blackhole, from: inserts}
""",
}
FINISHED = re.compile(r"Finished in ([0-9.]+)s")
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")
EPOCH = re.compile(
    r"^(\S+) DEBUG streamling\.runtime: Epoch finalized: \d+ \(.*?, position \{'position': (\d+)\}", re.MULTILINE
)


def steady_figures(m: Measurement) -> dict:
    """Rows/s and CPU µs per row between the first and the last epoch's commit (start-up and the first epoch's
    warm-up left out). The plugin source's position is its row count, so an epoch's rows are the difference."""
    from datetime import datetime

    finished = [(datetime.fromisoformat(t).timestamp(), int(p)) for t, p in EPOCH.findall(m.stderr)]
    if len(finished) < 3:
        return {"rows_per_sec_steady": None}
    (start, first), (end, last) = finished[0], finished[-1]
    rows = last - first
    out: dict = {"rows_per_sec_steady": round(rows / (end - start))}
    cpu = m.cpu_between(start, end)
    if cpu:
        out["steady_cpu_us_per_row"] = round(cpu / rows * 1e6, 2)
        out["steady_cores_used"] = round(cpu / (end - start), 2)
    return out


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=2_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--batch", type=int, default=250_000, help="record_batch_size (rows per epoch)")
    args.add_argument("--master", default="local[2]")
    args.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes (default: bench/results)")
    opts = args.parse_args()

    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    pipelines = {}
    for name, rest in CONTENDERS.items():
        pipelines[name] = work / f"{name}.yaml"
        pipelines[name].write_text(textwrap.dedent(SOURCE.format(rows=opts.rows, batch=opts.batch) + rest))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
            "STREAMLING__PLUGIN__PATH": str(PLUGIN),
            "STREAMLING__LOG_LEVEL": "debug",  # per-epoch lines for the steady-state figure
        }
    )
    runs: dict[str, list[Measurement]] = {name: [] for name in CONTENDERS}
    for i in range(opts.warmup + opts.runs):
        for name, pipeline in pipelines.items():
            m = measure([*streamling_cmd(), str(pipeline)], env, work)
            if m.returncode != 0:
                sys.exit(f"{name} run failed ({m.returncode}):\n{m.stderr_tail}")
            run_sec = float(FINISHED.search(m.stderr).group(1))
            m.extra = {
                "run_sec": run_sec,
                "rows_written": int(WRITTEN.search(m.stderr).group(1)),
                "rows_per_sec_wall": round(opts.rows / m.wall_sec),
                "rows_per_sec_run": round(opts.rows / run_sec),
                "us_per_row_wall": round(m.wall_sec / opts.rows * 1e6, 3),
                "us_per_row_run": round(run_sec / opts.rows * 1e6, 3),
                **steady_figures(m),
                "cpu_sec_per_million": round(m.cpu_sec / (opts.rows / 1e6), 2),
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
            label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
            e = m.extra
            print(
                f"{label} {name:>6}: {e['rows_per_sec_wall']:>9,} rows/s wall ({e['us_per_row_wall']:.2f} µs/row), "
                f"{e['rows_per_sec_run']:>9,} run ({e['us_per_row_run']:.2f} µs/row), "
                f"{e['rows_per_sec_steady'] or 0:>9,} steady ({e.get('steady_cpu_us_per_row', 0):.2f} CPU-µs/row), "
                f"{e['cpu_sec_per_million']:5.2f} CPU-s/M rows, peak RSS {m.peak_rss_mb:,.0f} MB, "
                f"load {e['load_average_1m']}"
            )
            if i >= opts.warmup:
                runs[name].append(m)
    written = {name: {r.extra["rows_written"] for r in measured} for name, measured in runs.items()}
    if len(set().union(*written.values())) != 1:
        sys.exit(f"the contenders wrote different row counts: {written}")
    result: dict = {
        "rows": opts.rows,
        "master": opts.master,
        "record_batch_size": opts.batch,
        "rows_written_per_run": next(iter(written["sql"])),
        "contenders": {},
    }
    keys = (
        "rows_per_sec_wall",
        "rows_per_sec_run",
        "us_per_row_wall",
        "us_per_row_run",
        "cpu_sec_per_million",
    )
    for name, measured in runs.items():
        summary = {key: summarize([r.extra[key] for r in measured]) for key in keys}
        summary["rows_per_sec_steady"] = summarize([r.extra["rows_per_sec_steady"] or 0 for r in measured])
        summary["steady_cpu_us_per_row"] = summarize([r.extra.get("steady_cpu_us_per_row", 0) for r in measured])
        summary["peak_rss_mb"] = summarize([r.peak_rss_mb for r in measured])
        summary["runs"] = [r.recorded() for r in measured]
        result["contenders"][name] = summary
    plugin, sql = result["contenders"]["plugin"], result["contenders"]["sql"]
    result["plugin_overhead_us_per_row"] = {
        key: round(plugin[key]["median"] - sql[key]["median"], 3)
        for key in ("us_per_row_wall", "us_per_row_run", "steady_cpu_us_per_row")
    }
    path = record("plugin_transform", result, opts.results)
    for name, summary in result["contenders"].items():
        print(
            f"median {name:>6}: {summary['rows_per_sec_wall']['median']:,.0f} rows/s wall "
            f"({summary['us_per_row_wall']['median']} µs/row), {summary['rows_per_sec_run']['median']:,.0f} run "
            f"({summary['us_per_row_run']['median']} µs/row), {summary['rows_per_sec_steady']['median']:,.0f} "
            f"steady, {summary['steady_cpu_us_per_row']['median']} CPU-µs/row steady"
        )
    overhead = result["plugin_overhead_us_per_row"]
    print(
        f"plugin transform overhead per row over SQL: {overhead['us_per_row_wall']} µs wall, "
        f"{overhead['us_per_row_run']} µs run, {overhead['steady_cpu_us_per_row']} CPU-µs steady -> {path}"
    )


if __name__ == "__main__":
    main()
