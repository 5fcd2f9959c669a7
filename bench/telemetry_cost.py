"""Benchmark: what observability costs on the original's benchmark (suite scenario 1: Kafka Avro → SQL projection →
blackhole, 4 partitions, the real CLI on local[2]).

    .venv/bin/python bench/telemetry_cost.py [--records N] [--runs K] [--warmup K] [--only metrics,inspect]

Contenders, alternating run by run on the same topic:

- **off**: no collector, no admin API: nothing is observed (the Spark plans are those of a run without telemetry);
- **metrics**: per-node counts observed every epoch, exported over OTLP/HTTP (protobuf) every 5 s to a receiver in
  this process, plus the admin API with its Prometheus endpoint;
- **inspect**: the same, plus live inspection at its defaults (every node's rows sampled every 30 s);
- **inspect_every_epoch**: live inspection sampling every node in every epoch (``refresh_in_secs: 1``), the worst
  case: what one sampled epoch costs.

Every run's output is checked (exact row count). Prints and records input rec/s and CPU-s per million records
(medians), and each contender's cost against **off** (target: under 3 %).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_data
from harness import RESULTS, Measurement, measure, record
from suite import SQL, Sizes, Suite, delete_topics, expected_blackhole, progress, summary, throughput, written_by

KEYS = ("rec_per_sec", "cpu_sec_per_million", "peak_rss_mb", "wall_sec")
EXPORT_SEC = 5
CONTENDERS = ("off", "metrics", "inspect", "inspect_every_epoch")


class Receiver(BaseHTTPRequestHandler):
    """Takes OTLP/HTTP exports and answers 200, counting them (the collector is not installable here)."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.exports += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def contender_env(name: str, receiver_port: int, admin_port: int) -> dict[str, str]:
    if name == "off":
        return {}
    env = {
        "STREAMLING__OPEN_TELEMETRY_METRICS__INGESTION_ENDPOINT": f"http://127.0.0.1:{receiver_port}/v1/metrics",
        "STREAMLING__OPEN_TELEMETRY_METRICS__BATCH_INTERVAL_SECS": str(EXPORT_SEC),
        "STREAMLING__ADMIN_API_PORT": str(admin_port),
    }
    if name.startswith("inspect"):
        env["STREAMLING__LIVE_DATA_INSPECT_ENABLED"] = "true"
    if name == "inspect_every_epoch":
        env["STREAMLING__LIVE_DATA_INSPECT__REFRESH_IN_SECS"] = "1"
    return env


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--records", type=int, default=5_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--job", default="projection", choices=sorted(SQL))
    args.add_argument("--results", type=Path, default=RESULTS)
    args.add_argument("--only", default="", help="comma-separated contenders to run besides off (default: all)")
    opts = args.parse_args()
    unknown = set(filter(None, opts.only.split(","))) - set(CONTENDERS[1:])
    if unknown:
        args.error(f"--only: unknown contender(s) {sorted(unknown)}; choose from {', '.join(CONTENDERS[1:])}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver_port = server.server_address[1]
    env = kafka_data.services_env("kafka", "registry")
    suite = Suite(env, Path(tempfile.mkdtemp(prefix="streamling-bench-telemetry-")), Sizes(), opts.runs, opts.warmup)
    contenders = ("off", *(c for c in CONTENDERS[1:] if not opts.only or c in opts.only.split(",")))
    expected = expected_blackhole(opts.job, opts.records)
    runs: dict[str, list[Measurement]] = {c: [] for c in contenders}
    try:
        topic = suite.topic("telemetry", opts.records, 4)
        print(f"{opts.job}: {SQL[opts.job]}  (expects {expected:,} rows)", flush=True)
        for i, label in suite.rounds():
            for name in contenders:
                cmd, run_env = suite.command("streamling", topic, opts.job, None, batch=500_000)
                run_env |= contender_env(name, receiver_port, 19_700 + i)
                m = measure(cmd, run_env, suite.work)
                written = written_by("streamling", m) if m.returncode == 0 else None
                suite.check(name, "streamling", m, written, expected)
                m.extra = {**throughput(m, opts.records), "rows_out": written}
                progress(label, name, m)
                if i >= suite.warmup:
                    runs[name].append(m)
    finally:
        delete_topics(env, suite.topics)
        server.shutdown()
    results = {name: summary(r, KEYS) for name, r in runs.items()}
    base = results["off"]
    cost = {
        name: {
            "throughput_loss_pct": round(
                100 * (1 - results[name]["rec_per_sec"]["median"] / base["rec_per_sec"]["median"]), 1
            ),
            "cpu_increase_pct": round(
                100 * (results[name]["cpu_sec_per_million"]["median"] / base["cpu_sec_per_million"]["median"] - 1), 1
            ),
        }
        for name in contenders[1:]
    }
    payload = {
        "records": opts.records,
        "partitions": 4,
        "job": opts.job,
        "sql": SQL[opts.job],
        "runs": opts.runs,
        "warmup": opts.warmup,
        "export_interval_sec": EXPORT_SEC,
        "exports_received": Receiver.exports,
        "contenders": results,
        "cost_vs_off": cost,
    }
    path = record("telemetry_cost", payload, opts.results)
    print()
    print(f"{'':>19} {'rec/s':>10} {'CPU-s/M':>8} {'peak RSS MB':>12} {'vs off':>24}")
    for name in contenders:
        r = results[name]
        vs = (
            f"{cost[name]['throughput_loss_pct']:+.1f} % loss, {cost[name]['cpu_increase_pct']:+.1f} % CPU"
            if name in cost
            else "baseline"
        )
        print(
            f"{name:>19} {r['rec_per_sec']['median']:>10,.0f} {r['cpu_sec_per_million']['median']:>8.2f} "
            f"{r['peak_rss_mb']['median']:>12,.0f} {vs:>24}"
        )
    print(f"exports received: {Receiver.exports}; recorded {path}")


if __name__ == "__main__":
    main()
