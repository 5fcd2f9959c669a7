"""The engine owns the embedded ClickHouse engine (chdb, real): every run in one `streamling serve` shares it, so a
pipeline writing one embedded table and another reading a second run side by side; a run in another process that
cannot open the data path says which process holds it (pid, command, run) instead of chdb's
``Error initializing EmbeddedServer: . (BAD_ARGUMENTS)``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg

from streamling.config.layers import settings_from_document
from streamling_dagster.backfill_sensor import evaluate
from streamling_dagster.pipelines import discover
from tests.e2e.cli import run_cli, write
from tests.e2e.engine import Engine, settings_document, submit_all
from tests.waiting import wait_for


def test_two_runs_share_the_embedded_engine_and_another_process_is_told_who_holds_it(tmp_path: Path) -> None:
    data = tmp_path / "ch"
    env = {"STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data), "STREAMLING__CLICKHOUSE_SINK__PATH": str(data)}
    seed = write(
        tmp_path,
        """
        sources:
          accounts: {type: generator, rows: 30000, key_space: 30000, primary_key: id}
        sinks:
          archive: {type: clickhouse, from: accounts, table: archive}
        """,
        "seed.yaml",
    )
    # A stream into one table while a backfill reads the other, in the same engine.
    stream = write(
        tmp_path,
        """
        sources:
          live: {type: generator, rows_per_second: 500, record_batch_size: 1000, primary_key: id}
        sinks:
          events: {type: clickhouse, from: live, table: events}
        """,
        "stream.yaml",
    )
    backfill = write(
        tmp_path,
        """
        sources:
          history: {type: clickhouse, table_name: archive, columns: "id, amount", primary_key: id}
        sinks:
          copy: {type: clickhouse, from: history, table: archive_copy}
        """,
        "backfill.yaml",
    )
    engine = Engine(tmp_path, env)
    try:
        job = settings_document(tmp_path, {**env, "STREAMLING__JOB_MODE": "true"})
        (seeded,) = submit_all(engine, [seed], job)
        wait_for(lambda: engine.get(f"/runs/{seeded}")["done"], 180, "the seed")
        assert engine.get(f"/runs/{seeded}")["state"] == "succeeded"
        (streaming,) = submit_all(engine, [stream], settings_document(tmp_path, env))
        wait_for(lambda: engine.get(f"/runs/{streaming}")["sources"].get("live", {}).get("epochs", 0) >= 2, 120)
        (copied,) = submit_all(engine, [backfill], job)
        wait_for(lambda: engine.get(f"/runs/{copied}")["done"], 180, "the backfill")
        copy_view = engine.get(f"/runs/{copied}")
        assert copy_view["state"] == "succeeded", copy_view["error"]
        assert copy_view["summary"]["sink_rows"] == {"copy": 30000}
        assert engine.get(f"/runs/{streaming}")["state"] == "running"  # untouched by the other run

        # The Dagster backfill sensor watches `archive`'s largest key. Here, in another process, the embedded data
        # path cannot be opened while the engine's runs hold it; with `engine_url` set the engine reads it.
        (pf,) = [f for f in discover(tmp_path, settings_from_document(job)) if f.path.name == "backfill.yaml"]
        alone = evaluate(pf, settings_from_document(job), None, "sensor")
        assert isinstance(alone, dg.SkipReason)
        assert alone.skip_message.startswith("cannot check clickhouse default.archive (cursor kept): ")
        engine_settings = {**job, "engine_url": engine.url, "engine": {**job["engine"], "token": engine.token}}
        first = evaluate(pf, settings_from_document(engine_settings), None, "sensor")
        assert isinstance(first, dg.SensorResult) and len(first.run_requests or []) == 1, first
        assert json.loads(first.cursor or "{}")["tables"] == {"default.archive max(id)": "30000"}
        again = evaluate(pf, settings_from_document(engine_settings), first.cursor, "sensor")
        assert isinstance(again, dg.SkipReason)
        assert "clickhouse default.archive max(id) still 30000" in (again.skip_message or "")

        # Another process asks for the same data path: one line naming the engine, at once (no restart for it).
        other = run_cli(
            tmp_path,
            str(backfill),
            env={**env, "STREAMLING__JOB_MODE": "true", "STREAMLING__RESTART_STRATEGY__TYPE": "none"},
        )
        assert other.returncode == 1, other.stderr
        errors = [line for line in other.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1
        assert re.fullmatch(
            rf"Error: .*the embedded ClickHouse data path {re.escape(str(data))} is open in another process \(pid "
            rf"{engine.proc.pid} on \S+: streamling serve --port 0, run {seeded}, since \S+\); chdb opens a data path "
            r"in one process at a time: .*",
            errors[0],
        ), errors[0]
        assert "BAD_ARGUMENTS" not in other.stderr
    finally:
        assert engine.stop() == 0
