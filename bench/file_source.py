"""Benchmark: the file source reading a directory of Parquet and of CSV → blackhole, in job mode, against a
hand-written pyarrow loop reading the same files.

    .venv/bin/python bench/file_source.py [--files N] [--rows-per-file R] [--runs K] [--master local[2]]

Both contenders run as processes of their own, measured the same way (`harness.measure`): the engine is the
`streamling` CLI (JVM and Python start-up included in "wall", excluded in "run"); the loop is one Python process
reading each file whole with pyarrow and counting its rows, the least a reader can do. Records JSON in
bench/results/.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import measure, record, streamling_cmd, summarize

PIPELINE = """
sources:
  files: {{type: file, path: {path}, format: {fmt}, mode: {{type: bounded}}}}
sinks:
  sink: {{type: blackhole, from: files}}
"""
LOOP = """
import sys, time, pathlib
import pyarrow.csv as pcsv, pyarrow.parquet as pq
started = time.perf_counter()
rows = 0
for path in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    table = pq.read_table(path) if sys.argv[2] == "parquet" else pcsv.read_csv(path)
    rows += table.num_rows
print(f"Finished in {time.perf_counter() - started:.3f}s: {rows} rows", file=sys.stderr)
"""
FINISHED = re.compile(r"Finished in ([0-9.]+)s")


def make_files(folder: Path, fmt: str, files: int, rows: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    names = pa.array(["alice", "bob", "carol", "dave", "erin"])
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "amount": np.round(rng.random(rows) * 2000, 2),
                "name": names.take(pa.array(ids % 5)),
                "created_at": pa.array(ids * 1000, pa.int64()).cast(pa.timestamp("ms")),
            }
        )
        if fmt == "parquet":
            pq.write_table(table, folder / f"part-{i:04d}.parquet")
        else:
            pcsv.write_csv(table, folder / f"part-{i:04d}.csv")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--files", type=int, default=20)
    args.add_argument("--rows-per-file", type=int, default=100_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--master", default="local[2]")
    opts = args.parse_args()
    rows = opts.files * opts.rows_per_file
    work = Path(tempfile.mkdtemp(prefix="streamling-bench-files-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
        }
    )
    (work / "loop.py").write_text(LOOP)
    result: dict = {"files": opts.files, "rows": rows, "master": opts.master}
    for fmt in ("parquet", "csv"):
        folder = work / fmt
        make_files(folder, fmt, opts.files, opts.rows_per_file)
        pipeline = work / f"{fmt}.yaml"
        pipeline.write_text(textwrap.dedent(PIPELINE.format(path=folder, fmt=fmt)))
        contenders = {
            "streamling": [*streamling_cmd(), str(pipeline)],
            "pyarrow_loop": [sys.executable, str(work / "loop.py"), str(folder), fmt],
        }
        for name, cmd in contenders.items():
            runs = []
            for i in range(opts.warmup + opts.runs):
                m = measure(cmd, env, work)
                if m.returncode != 0:
                    sys.exit(f"{name} {fmt} failed ({m.returncode}):\n{m.stderr_tail}")
                run_sec = float(FINISHED.search(m.stderr_tail).group(1))
                m.extra = {
                    "run_sec": run_sec,
                    "rows_per_sec_wall": round(rows / m.wall_sec),
                    "rows_per_sec_run": round(rows / run_sec),
                    "cpu_sec_per_million": round(m.cpu_sec / (rows / 1e6), 2),
                }
                label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
                print(
                    f"{fmt} {name} {label}: {m.wall_sec:.1f}s wall ({m.extra['rows_per_sec_wall']:,} rows/s), "
                    f"{run_sec:.2f}s run ({m.extra['rows_per_sec_run']:,} rows/s), "
                    f"{m.extra['cpu_sec_per_million']} CPU-s/M rows, peak RSS {m.peak_rss_mb:,.0f} MB"
                )
                if i >= opts.warmup:
                    runs.append(m)
            result[f"{fmt}_{name}"] = {
                "rows_per_sec_wall": summarize([r.extra["rows_per_sec_wall"] for r in runs]),
                "rows_per_sec_run": summarize([r.extra["rows_per_sec_run"] for r in runs]),
                "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
                "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
                "runs": [r.recorded() for r in runs],
            }
    path = record("file_source", result)
    for fmt in ("parquet", "csv"):
        ours, loop = result[f"{fmt}_streamling"], result[f"{fmt}_pyarrow_loop"]
        print(
            f"{fmt}: streamling {ours['rows_per_sec_run']['median']:,.0f} rows/s run "
            f"({ours['rows_per_sec_wall']['median']:,.0f} wall), pyarrow loop "
            f"{loop['rows_per_sec_run']['median']:,.0f} rows/s run ({loop['rows_per_sec_wall']['median']:,.0f} wall)"
        )
    print(f"-> {path}")


if __name__ == "__main__":
    main()
