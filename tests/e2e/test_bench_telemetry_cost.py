"""bench/telemetry_cost.py in a tiny variant, as a user runs it, on the real broker and registry: the three
contenders (telemetry off, metrics, metrics with live inspection at its defaults and in every epoch) complete with the exact rows, the metrics runs
really export, and the result records each one's cost against off. Speed is not asserted (no timing assertions in
tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.bench


def test_telemetry_cost_bench_records_three_contenders(tmp_path: Path, kafka_env) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "telemetry_cost.py"),
            *("--records", "20000", "--runs", "1", "--warmup", "0", "--results", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [path] = tmp_path.glob("telemetry_cost-*.json")
    result = json.loads(path.read_text())
    assert set(result["contenders"]) == {"off", "metrics", "inspect", "inspect_every_epoch"}
    for stats in result["contenders"].values():
        [run] = stats["runs"]
        assert run["returncode"] == 0 and run["extra"]["rows_out"] == 20000
        assert stats["rec_per_sec"]["median"] > 0
    assert result["exports_received"] >= 2  # at least the final export of each metrics run
    assert set(result["cost_vs_off"]) == {"metrics", "inspect", "inspect_every_epoch"}
    assert "baseline" in done.stdout
