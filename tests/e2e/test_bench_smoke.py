"""The benchmark suite's smoke variant: one command, every scenario, every contender, exact sink contents.

Runs ``bench/suite.py --smoke`` as a user would, against the real local broker, registry and Postgres, with the
real CLI, the hand-written loop and Quix Streams (its venv is created on first use). Speed is not asserted here
(no timing assertions in tests); what is asserted is that the harness produces a complete result, and that every
run of every contender left exactly the expected rows in its sink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTENDERS = {"streamling", "hand_loop", "hand_loop_block", "quix"}

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


def _numbers(stats: dict, *keys: str) -> None:
    for key in keys:
        assert stats[key]["median"] > 0, (key, stats[key])
        assert stats[key]["min"] <= stats[key]["median"] <= stats[key]["max"], (key, stats[key])


def _exact(runs: list[dict], count_key: str) -> None:
    assert runs, "no counted runs"
    for run in runs:
        assert run["extra"][count_key] == run["extra"]["expected_rows"], run["extra"]
        assert run["returncode"] in (0, -15), run


def test_smoke_suite_records_every_scenario_and_peer(tmp_path: Path, postgres_env, kafka_env) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "suite.py"), "--smoke", "--results", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    [path] = tmp_path.glob("suite-*.json")
    table = path.with_suffix(".md").read_text()
    result = json.loads(path.read_text())
    assert result["smoke"] is True and result["runs"] == 1 and result["runs_note"]
    scenarios = result["scenarios"]
    assert set(scenarios) == {
        "kafka_avro_sql_blackhole",
        "kafka_avro_sql_postgres_upsert",
        "cold_start_first_row",
        "latency_steady_rate",
        "scale_curve",
        "density",
        "seed_steady_rate_clickhouse",
    }
    cells = scenarios["density"]["cells"]
    assert [(c["contender"], c["n"]) for c in cells] == [("engine", 2), ("hand_loop", 1)]
    for cell in cells:
        assert cell["exact"] is True, cell  # every table holds every produced record that passes the filter, once
        assert cell["cores"] > 0 and cell["pss_mb"] > 0 and cell["nth_first_row_sec"] >= 0, cell
    assert cells[0]["states_at_start"] == {"running": 2} and cells[0]["idle_cores_per_pipeline"] >= 0
    for cell in cells[:1]:  # ours: where the CPU and the memory are, by process and by JVM thread
        assert {"command", "jvm"} <= set(cell["cores_by_role"]) and {"command", "jvm"} <= set(cell["pss_mb_by_role"])
        assert cell["jvm_cores_by_thread"], cell
        assert "command" in cell["idle_cores_by_role"], cell  # the idle engine's CPU, by process (its driver polls)
        starts = cell["admission"]  # where the engine's starts went
        assert 0 < starts["starting_median_sec"] <= starts["starting_max_sec"] <= starts["starts_span_sec"], starts
    assert "## 6. Density" in table

    blackhole = scenarios["kafka_avro_sql_blackhole"]["sqls"]["filter"]
    upsert = scenarios["kafka_avro_sql_postgres_upsert"]
    for block, count_key, ours in (
        (blackhole, "rows_out", {"streamling", "streamling_engine"}),  # also on a warm engine, measured whole
        (upsert, "rows_in_sink", {"streamling"}),
    ):
        assert set(block["contenders"]) == CONTENDERS | ours
        for stats in block["contenders"].values():
            _numbers(stats, "rec_per_sec", "cpu_sec_per_million", "peak_rss_mb")
            _exact(stats["runs"], count_key)
        assert set(block["ratios"]) == (CONTENDERS | ours) - {"streamling"}
        assert all(r["rec_per_sec"] > 0 for r in block["ratios"].values())
    assert set(blackhole["ratios_engine"]) == CONTENDERS
    for run in blackhole["contenders"]["streamling_engine"]["runs"]:  # the engine's tree is in its figures
        assert {"command", "jvm", "python_workers"} <= set(run["cpu_sec_by_role"]), run
    for run in blackhole["contenders"]["streamling"]["runs"]:  # where the memory and the CPU are, per process role
        assert {"command", "jvm", "python_workers"} <= set(run["rss_at_peak_mb"]) <= set(run["cpu_sec_by_role"])
        assert abs(sum(run["rss_at_peak_mb"].values()) - run["peak_rss_mb"]) < 1
        assert abs(sum(run["cpu_sec_by_role"].values()) - run["cpu_sec"]) < 0.1
    assert upsert["expected_rows"] == 1125  # ids 0..1249 (5,000 records, key space 1,250) without multiples of 10

    cold = scenarios["cold_start_first_row"]
    assert set(cold["contenders"]) == CONTENDERS | {"streamling_warm"}  # ours also on a warm `streamling serve`
    assert cold["warm_engine_rss_mb"] > 0
    for stats in cold["contenders"].values():
        _numbers(stats, "first_row_sec", "peak_rss_mb")
        _exact(stats["runs"], "rows_in_sink")
        assert stats["first_row_sec"]["max"] <= stats["wall_sec"]["max"]

    latency = scenarios["latency_steady_rate"]
    assert set(latency["contenders"]) == CONTENDERS
    for stats in latency["contenders"].values():
        _numbers(stats, "p50_ms", "p99_ms", "achieved_rate")
        assert stats["p50_ms"]["median"] <= stats["p99_ms"]["median"] <= stats["max_ms"]["median"]
        _exact(stats["runs"], "rows_in_sink")
    assert set(latency["ratios"]) == CONTENDERS - {"streamling"}

    cells = scenarios["scale_curve"]["cells"]
    cluster = {("cluster:1", 2), ("cluster:2", 2)} if os.geteuid() == 0 else set()  # the cluster needs root
    assert {(c["master"], c["partitions"]) for c in cells} == {("local[1]", 2), ("local[2]", 2)} | cluster
    if cluster:
        assert scenarios["scale_curve"]["cluster"]["workers"] == 2
    for cell in cells:
        _numbers(cell, "rec_per_sec", "cpu_sec_per_million")
        _exact(cell["runs"], "rows_out")

    steady = scenarios["seed_steady_rate_clickhouse"]  # Kafka → SQL enrichment → the embedded ClickHouse
    assert set(steady["contenders"]) == CONTENDERS | {"streamling_engine"} and steady["runs"] == 1
    for name, stats in steady["contenders"].items():
        _numbers(stats, "cores", "p99_ms", "achieved_rate")
        for run in stats["runs"]:  # the table held every produced id (the suite stops otherwise), each row once
            assert run["extra"]["rows_in_table"] == run["extra"]["produced"] > 0, (name, run["extra"])
            assert run["extra"]["cores_by_role"], (name, run["extra"])

    for heading in ("## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7."):
        assert heading in table
    for contender in CONTENDERS:
        assert f"| {contender} |" in table
