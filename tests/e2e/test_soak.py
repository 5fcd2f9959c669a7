"""The soak's five-minute version (`bench/soak.py`): two Kafka sources, a dynamic table, SQL, and Postgres,
ClickHouse and exactly-once Kafka sinks under a steady load while every kind of fault is injected once (SIGKILL,
Postgres restart and read-only failover, broker restart, registry outage, CPU starvation); then every sink holds
every input record exactly once. The hour-long run and its figures are in bench/README.md; timing targets are
reported there, not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_five_minutes_of_load_and_faults_end_with_every_sink_exact(tmp_path, postgres_env, kafka_env) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [
            sys.executable,
            "soak.py",
            "--duration",
            "300",
            "--fault-every",
            "5",
            "--quiet-sec",
            "5",
            "--faults",
            "sigkill,postgres_read_only,broker_restart,postgres_restart,registry_outage,cpu_starvation",
            "--rate",
            "100",
            "--seed",
            "11",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    (recorded,) = out.glob("soak-*.json")
    result = json.loads(recorded.read_text())
    log = (tmp_path / "work" / "engine.log").read_text()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-5000:]
    assert result["checks"]["exact"], result["checks"]
    assert result["checks"]["input_records"] >= 100 * 2 * 200  # the load ran
    kinds = [f["kind"] for f in result["faults"]]
    assert kinds[:3] == ["sigkill", "postgres_read_only", "broker_restart"], result["faults"]
    assert result["engine_starts"] >= 2 and result["unexpected_exits"] == []
