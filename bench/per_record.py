"""Scenario 1, record by record: where our CPU goes against the block-decoding hand loop's (issue 40).

    .venv/bin/python bench/per_record.py [--records 5000000] [--runs 2] [--results DIR]

The suite's scenario 1 says *how much* (rec/s, CPU-s per million); this says *where*, in microseconds of CPU per
record, so that each part of the gap can be named with what would remove it. On one 4-partition topic of the
scenario-1 data (`kafka_data.py`) and a 10k-record one, every run measured as its whole process tree (CPU by
process role, `harness.role`, and by thread, `/proc/PID/task`):

- ours, the CLI, with the suite's 500k-record epochs and with 2.5M-record ones (the difference, per epoch, is the
  per-epoch cost), and on the 10k-record topic (the fixed cost of a run: start-up and shut-down);
- ours on a warm engine (`streamling serve`, one uncounted run first; its tree measured beside the client);
- the block-decoding hand loop on both topics;

then, in this process, on 300k messages of one partition, the CPU per record of each Python stage: librdkafka's
`consume`, `Message.headers()` (ours reads the `dbz.op` header of every record for `_gs_op`), our block decoder,
the `_gs_op` column, the Arrow IPC write that hands a batch to the JVM, and the block loop's decode + projection.
Prints the account and records ``results/per_record-<UTC>.json``. The JVM's own split (Arrow → rows, generated
code, the JIT) needs its profiler: bench/README.md, *Scenario 1 per record*, says how it was taken.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import kafka_data
from harness import Measurement, measure, record, role
from suite import ENGINE, Sizes, Suite, WarmEngine, delete_topics, written_by

JOB = "projection"
EPOCH_ROWS = 500_000
"""The suite's `record_batch_size` in scenario 1."""
BIG_EPOCH_ROWS = 2_500_000
SMALL = 10_000
STAGE_RECORDS = 300_000
TICKS = os.sysconf("SC_CLK_TCK")


class Threads:
    """CPU seconds per (process role, thread name) of one or more trees while a run lasts: a thread's last reading
    is kept, so threads that ended before the run did still count. Numbers in names are folded (``C2
    CompilerThread0`` → ``C# CompilerThre``, as Linux cuts names to 15 characters)."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.seen: dict[tuple[int, str], tuple[str, float]] = {}
        self.before: dict[tuple[int, str], float] = {}
        self.stop = threading.Event()
        for key, (_, cpu) in self._read().items():
            self.before[key] = cpu
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _read(self) -> dict[tuple[int, str], tuple[str, float]]:
        out = {}
        for root in self.roots:
            try:
                top = psutil.Process(root)
                tree = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for p in tree:
                kind = role(p, root) or "other"
                try:
                    tids = os.listdir(f"/proc/{p.pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        with open(f"/proc/{p.pid}/task/{tid}/stat") as f:
                            stat = f.read()
                    except OSError:
                        continue
                    name = re.sub(r"\d+", "#", stat[stat.index("(") + 1 : stat.rindex(")")])
                    fields = stat[stat.rindex(")") + 2 :].split()
                    out[(p.pid, tid)] = (f"{kind}: {name}", (int(fields[11]) + int(fields[12])) / TICKS)
        return out

    def _run(self) -> None:
        while not self.stop.is_set():
            self.seen.update(self._read())
            time.sleep(0.1)

    def done(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self.seen.update(self._read())
        out: Counter[str] = Counter()
        for key, (name, cpu) in self.seen.items():
            out[name] += cpu - self.before.get(key, 0.0)
        return {k: round(v, 2) for k, v in out.most_common() if v >= 0.01}


def run(s: Suite, contender: str, topic: str, records: int, batch: int, engine: WarmEngine | None) -> dict:
    cmd, env = s.command(contender, topic, JOB, None, batch=batch)
    beside = engine.proc.pid if engine is not None and contender == ENGINE else None
    holder: list[Threads] = []

    def started(proc) -> None:  # type: ignore[no-untyped-def]
        holder.append(Threads([proc.pid, *([beside] if beside else [])]))

    m: Measurement = measure(cmd, env, s.work, started=started, beside=beside)
    threads = holder[0].done()
    if m.returncode != 0 or written_by(contender, m) != records:
        sys.exit(f"{contender} on {records:,} records failed (exit {m.returncode}):\n{m.stderr_tail}")
    epochs = re.search(r"(\d+) epochs", m.stderr)
    return {
        "contender": contender,
        "records": records,
        "batch": batch,
        "epochs": int(epochs.group(1)) if epochs else None,
        "wall_sec": m.wall_sec,
        "cpu_sec": m.cpu_sec,
        "cpu_sec_by_role": m.cpu_sec_by_role,
        "cpu_sec_by_thread": threads,
        "peak_rss_mb": m.peak_rss_mb,
    }


def stages(env: dict[str, str], topic: str, n: int) -> dict[str, float]:
    """CPU µs per record of each Python stage, in this process, on the same `n` messages of partition 0 (the best
    of three)."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from hand_loop import ColumnarJob

    from streamling.kafka.avro import AvroDecoder
    from streamling.kafka.source.decoding import op_of_headers

    consumer = Consumer(
        {
            "bootstrap.servers": env["STREAMLING__KAFKA_SOURCE__BROKERS"],
            "group.id": f"per-record-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 << 20,
            "receive.message.max.bytes": 1_000_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages: list = []
    began = time.process_time()
    while len(messages) < n:
        messages += consumer.consume(min(10_000, n - len(messages)), timeout=5)
    out = {"consume (librdkafka's fetch and parse, a Message object each; all threads)": time.process_time() - began}
    consumer.close()

    def best(work) -> tuple[float, object]:  # type: ignore[no-untyped-def]
        times, result = [], None
        for _ in range(3):
            began = time.process_time()
            result = work()
            times.append(time.process_time() - began)
        return min(times), result

    began = time.process_time()
    headers = [m.headers() for m in messages]  # a Message builds its header list at the first call, then caches it
    out["Message.headers(), first call (the dbz.op header)"] = time.process_time() - began
    out["op_of_headers (_gs_op from the header)"], ops = best(lambda: [op_of_headers(h) for h in headers])
    out["Message.value()"], values = best(lambda: [m.value() for m in messages])
    registry = SchemaRegistryClient({"url": env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]})
    latest = registry.get_latest_version(f"{topic}-value")
    decoder = AvroDecoder(
        json.loads(latest.schema.schema_str),
        latest.version,
        f"{topic}-value",
        topic,
        lambda i: (registry.get_schema(i).schema_str, []),
        reader_id=latest.schema_id,
    )
    decoder.decode(values[:1000], messages[:1000], 0, None)  # type: ignore[index]
    chunks = range(0, n, 10_000)  # the readers' and the loop's 10k-message polls
    out["ours: AvroDecoder.decode, one block per 10k"], batches = best(
        lambda: [decoder.decode(values[i : i + 10_000], messages[i : i + 10_000], 0, None) for i in chunks]  # type: ignore[index]
    )
    out["ours: the _gs_op column and the RecordBatch"], rbs = best(
        lambda: [
            pa.RecordBatch.from_arrays(
                [*b.columns, pa.array(ops[i * 10_000 : (i + 1) * 10_000], pa.string())],  # type: ignore[index]
                names=[*b.schema.names, "_gs_op"],
            )
            for i, b in enumerate(batches)  # type: ignore[arg-type]
        ]
    )

    def ipc() -> int:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, rbs[0].schema) as writer:  # type: ignore[index]
            for b in rbs:  # type: ignore[attr-defined]
                writer.write_batch(b)
        return sink.getbuffer().nbytes

    out["ours: Arrow IPC stream write (the hand-off to the JVM, into memory)"], _ = best(ipc)
    job = ColumnarJob(JOB, registry)
    job.apply(values[:1000])  # type: ignore[index]
    out["block loop: decode + projection (ColumnarJob.apply per 10k)"], _ = best(
        lambda: [job.apply(values[i : i + 10_000]) for i in chunks]  # type: ignore[index]
    )
    return {k: round(v / n * 1e6, 3) for k, v in out.items()}


def median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["cpu_sec"])[len(runs) // 2]


def account(cells: dict[str, dict], records: int) -> dict:
    """The gap to the block loop in µs of CPU per record, split into fixed, per-epoch and per-record parts."""

    def us(cpu: float) -> float:
        return round(cpu / records * 1e6, 3)

    ours, big, small = cells["cli"], cells["cli_big_epochs"], cells["cli_small"]
    loop, loop_small = cells["block"], cells["block_small"]
    if ours["epochs"] <= big["epochs"]:
        sys.exit(f"--records {records:,}: too few for epochs of {EPOCH_ROWS:,} and {BIG_EPOCH_ROWS:,} to differ")
    per_epoch = (ours["cpu_sec"] - big["cpu_sec"]) / (ours["epochs"] - big["epochs"])
    fixed = small["cpu_sec"]
    steady = ours["cpu_sec"] - fixed - per_epoch * ours["epochs"]
    loop_steady = loop["cpu_sec"] - loop_small["cpu_sec"]
    by_role = {
        k: us(v - small["cpu_sec_by_role"].get(k, 0.0) - per_epoch_share)
        for k, v in ours["cpu_sec_by_role"].items()
        for per_epoch_share in [
            (v - big["cpu_sec_by_role"].get(k, 0.0)) / (ours["epochs"] - big["epochs"]) * ours["epochs"]
        ]
    }
    return {
        "total_us": {
            "ours_cli": us(ours["cpu_sec"]),
            "ours_engine": us(cells["engine"]["cpu_sec"]),
            "block_loop": us(loop["cpu_sec"]),
        },
        "gap_us": us(ours["cpu_sec"] - loop["cpu_sec"]),
        "fixed_us": {
            "ours": us(fixed),
            "ours_engine": us(cells["engine_small"]["cpu_sec"]),
            "block_loop": us(loop_small["cpu_sec"]),
        },
        "per_epoch_cpu_sec": round(per_epoch, 3),
        "epochs": ours["epochs"],
        "per_epoch_us": us(per_epoch * ours["epochs"]),
        "steady_us": {"ours": us(steady), "block_loop": us(loop_steady)},
        "ours_steady_us_by_role": by_role,
    }


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--records", type=int, default=5_000_000)
    args.add_argument("--runs", type=int, default=2, help="runs per cell; the run of median CPU is kept")
    args.add_argument("--results", type=Path)
    opts = args.parse_args()
    if opts.records <= BIG_EPOCH_ROWS:
        sys.exit(f"--records must exceed {BIG_EPOCH_ROWS:,}: the per-epoch cost is two epoch sizes' difference")
    env = kafka_data.services_env("postgres", "kafka", "registry")
    s = Suite(env, Path(tempfile.mkdtemp(prefix="streamling-per-record-")), Sizes(), opts.runs, 0)
    big = s.topic("per_record", opts.records, 4)
    small = s.topic("per_record_small", SMALL, 4)
    cells: dict[str, list[dict]] = {}
    plan = [
        ("cli", "streamling", big, opts.records, EPOCH_ROWS),
        ("cli_big_epochs", "streamling", big, opts.records, BIG_EPOCH_ROWS),
        ("cli_small", "streamling", small, SMALL, EPOCH_ROWS),
        ("engine", ENGINE, big, opts.records, EPOCH_ROWS),
        ("engine_small", ENGINE, small, SMALL, EPOCH_ROWS),
        ("block", "hand_loop_block", big, opts.records, EPOCH_ROWS),
        ("block_small", "hand_loop_block", small, SMALL, EPOCH_ROWS),
    ]
    engine = WarmEngine(s)
    s.engine_url = engine.url
    try:
        run(s, ENGINE, big, opts.records, EPOCH_ROWS, engine)  # the engine's first run: not counted
        for _ in range(opts.runs):
            for name, contender, topic, records, batch in plan:
                r = run(s, contender, topic, records, batch, engine)
                cells.setdefault(name, []).append(r)
                print(
                    f"  {name:>15}: {r['wall_sec']:6.1f} s, {r['cpu_sec']:6.2f} CPU-s, {r['epochs']} epochs, "
                    f"{r['cpu_sec_by_role']}",
                    flush=True,
                )
        stage_us = stages(env, big, min(STAGE_RECORDS, opts.records // 4 // 10_000 * 10_000))
    finally:
        engine.stop()
        delete_topics(env, s.topics)
    chosen = {k: median_run(v) for k, v in cells.items()}
    result = account(chosen, opts.records)
    print(json.dumps(result, indent=2))
    for k, v in stage_us.items():
        print(f"  {v:6.3f} µs  {k}")
    payload = {"records": opts.records, "runs": opts.runs, "cells": cells, "account": result, "stages_us": stage_us}
    path = record("per_record", payload, *([opts.results] if opts.results else []))
    print(f"recorded {path}")


if __name__ == "__main__":
    main()
