"""Benchmark: the print sink on the Arrow level (an `ArrowSink` behind the adapter, as plugins run) next to the
Spark-level `DriverSink` it was before, in the same process on the same rows.

    .venv/bin/python bench/print_sink_tiers.py [--before REV] [--rows N] [--batch N] [--rounds K] [--master local[2]]
        [--results DIR]

The Spark-level version is the file as it was at `--before` (default: the commit before the move), loaded from git
under another module name; the Arrow-level one is built through the registry, exactly as a pipeline builds it.
First both print the same generator rows (``_gs_op`` mixing inserts, updates and deletes) into buffers, which
must be identical line for line, with identical `Written` counts. Then each is timed, alternating, K rounds:

- **epoch**: ``stage(df, epoch)()`` on a cached DataFrame of N rows — what a run pays per epoch (Spark hands the
  epoch to the driver as Arrow, the sink formats and prints it to /dev/null);
- **write path**: the driver side alone on the same rows as in-memory batches, timed by this thread's CPU clock:
  once printing every row (``sample_every: 1``, batches of `--batch` rows) and once printing none (``sample_every``
  larger than N, batches of 100 rows: only the adapter's per-call work and the counting remain), also as µs per
  call.

Prints and records (`results/print_sink_tiers-<UTC time>.json`, or in `--results`) rows/s per contender (median of
the rounds) and the ratio after / before: of the medians, and the median of each round's ratio (both timed back to
back, so a change in the machine's load moves it less).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RESULTS, record

REPO = Path(__file__).resolve().parents[1]
PATH = "engine/streamling/builtins/print_sink.py"
MOVED_IMPORTS = {  # the old file's imports of what has moved since -> where it is now
    "from streamling.topology.spec import SinkSpec, ignored_fields": (
        "from streamling.spec import SinkSpec, ignored_fields"
    ),
    "from streamling.types import GS_OP, json_default": "from streamling.core.rows import GS_OP, json_default",
}


def before_module(rev: str) -> types.ModuleType:
    """The Spark-level print sink as it was at `rev`, its imports of moved modules pointed at where they are now."""
    text = subprocess.run(["git", "show", f"{rev}:{PATH}"], cwd=REPO, check=True, capture_output=True, text=True)
    source = "".join(MOVED_IMPORTS.get(line, line) + "\n" for line in text.stdout.splitlines())
    module = types.ModuleType("print_sink_before")
    module.__file__ = f"{rev}:{PATH}"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def contenders(before: types.ModuleType, settings: Any, sample_every: int) -> dict[str, Any]:
    """Both sinks as a run builds and initializes them (the Arrow one through the registry and its adapter)."""
    from streamling.operators import RunContext
    from streamling.plugins.registry import REGISTRY
    from streamling.state.memory import InMemoryStateBackend

    body = {"type": "print", "from": "src", "sample_every": sample_every}
    old = before.PrintSink("out", before.PrintSinkSpec.model_validate(body), settings)
    optype = REGISTRY.lookup("sink", "print")
    assert optype is not None
    new = optype.operator("out", optype.spec.model_validate(body), settings)
    context = RunContext(settings, InMemoryStateBackend("bench"), None)  # type: ignore[arg-type]
    for sink in (old, new):
        sink.initialize(context)
    return {"before (Spark level)": old, "after (Arrow level)": new}


def timed(run: Callable[[], object], rows: int, clock: Callable[[], float] = time.perf_counter) -> float:
    began = clock()
    run()
    return rows / (clock() - began)


def write_all(sink: Any, batches: list[Any], epoch: Any) -> None:
    for batch in batches:
        sink.write_batch(batch, epoch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="b341dd0", help="a revision with the Spark-level print sink")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per batch on the write path")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes (default: bench/results)")
    args = parser.parse_args()

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from streamling.builtins.generator_reader import generate
    from streamling.config import load_settings
    from streamling.operators import Epoch

    settings = load_settings(config="/nonexistent/config.yaml", environ={})
    before = before_module(args.before)
    config = {
        "columns": {"id": "bigint", "amount": "double", "name": "string", "created_at": "timestamp"},
        "start_time_us": 1_735_689_600_000_000,
        "step_us": 1000,
        "key_space": args.rows // 2,
        "delete_every": 10,
    }
    table = pa.Table.from_batches(list(generate(config, 0, args.rows, args.batch)))
    batches = table.to_batches(max_chunksize=args.batch)
    small = table.to_batches(max_chunksize=100)  # many calls: the adapter's cost per call shows
    spark = SparkSession.builder.master(args.master).config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.createDataFrame(table).cache()
    df.count()
    epoch = Epoch("src", 1, {}, {})

    # Same rows in, same lines out, same counts.
    printed: dict[str, tuple[str, object]] = {}
    for name, sink in contenders(before, settings, 1).items():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            written = sink.stage(df, epoch)()
        printed[name] = (buffer.getvalue(), written)
    (out_a, written_a), (out_b, written_b) = printed.values()
    assert out_a == out_b and out_a.count("\n") == args.rows, "the two print sinks printed different lines"
    assert written_a == written_b, (written_a, written_b)
    print(f"identical output: {args.rows} lines, {written_a}")

    results: dict[str, dict[str, list[float]]] = {}
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        for scenario, sample_every in (("epoch", 1), ("write path, every row", 1), ("write path, no row", 10**9)):
            sinks = contenders(before, settings, sample_every)
            for _ in range(args.rounds):
                for name, sink in sinks.items():
                    if scenario == "epoch":
                        rate = timed(lambda s=sink: s.stage(df, epoch)(), args.rows)
                    else:  # pure Python on this thread: its CPU time, which other processes on the machine move less
                        chunks = batches if sample_every == 1 else small
                        rate = timed(lambda s=sink, c=chunks: write_all(s, c, epoch), args.rows, time.thread_time)
                    results.setdefault(scenario, {}).setdefault(name, []).append(rate)
    spark.stop()

    summary = {}
    for scenario, by_name in results.items():
        medians = {name: statistics.median(rates) for name, rates in by_name.items()}
        old, new = medians.values()
        # Each round times both back to back: the median of those ratios moves less with the machine's load.
        paired = statistics.median(b / a for a, b in zip(*by_name.values(), strict=True))
        summary[scenario] = {
            **{n: round(r) for n, r in medians.items()},
            "after / before": round(new / old, 3),
            "after / before, paired": round(paired, 3),
        }
        spread = {n: f"{min(r):,.0f} to {max(r):,.0f}" for n, r in by_name.items()}
        print(f"{scenario}: " + ", ".join(f"{n} {m:,.0f} rows/s ({spread[n]})" for n, m in medians.items()))
        if scenario != "epoch":  # per call: what the adapter adds to each `write` call
            calls = len(batches) if scenario == "write path, every row" else len(small)
            per_batch = {n: 1e6 * args.rows / m / calls for n, m in medians.items()}
            summary[scenario]["µs per call"] = {n: round(v, 2) for n, v in per_batch.items()}
            print("  µs per call: " + ", ".join(f"{n} {v:.2f}" for n, v in per_batch.items()))
        print(f"  after / before = {new / old:.3f} (of the medians), {paired:.3f} (median of the rounds' ratios)")
    recorded_args = {**vars(args), "results": str(args.results)}
    payload = {"args": recorded_args, "rows_per_second_median": summary, "rounds": results}
    path = record("print_sink_tiers", payload, args.results)
    print(f"recorded {path}")


if __name__ == "__main__":
    main()
