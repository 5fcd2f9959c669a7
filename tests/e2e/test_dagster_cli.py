"""`dagster job execute` from a clean DAGSTER_HOME, as a script or a cron job would run a backfill."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg

from tests.e2e.cli import cli_env, write
from tests.plugin_util import FEED, write_feed_pipelines, write_plugin

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def test_backfill_job_from_the_command_line_writes_rows_and_records_metadata(
    tmp_path, postgres_env, pg_connect
) -> None:
    schema = f"c_{uuid.uuid4().hex[:8]}"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write(
        pipelines,
        f"""
        sources:
          orders: {{type: generator, rows: 2000, primary_key: id}}
        sinks:
          stored: {{type: postgres, from: orders, schema: {schema}, table: orders}}
        """,
        name="shop.yaml",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = cli_env(
        tmp_path,
        {**postgres_env, "DAGSTER_HOME": str(home), "STREAMLING_DAGSTER_PIPELINES": str(pipelines)},
    )
    done = subprocess.run(
        [DAGSTER, "job", "execute", "-m", "streamling_dagster", "-j", "shop__backfill"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # quiet start-up: no beta warnings from loading the definitions (Dagster itself warns that `dagster job
    # execute` is superseded; `python -m streamling_dagster.execute` does not, see below)
    for noise in ("BetaWarning", "is currently in beta"):
        assert noise not in done.stdout + done.stderr
    with pg_connect() as conn:
        assert conn.execute(f'SELECT count(*), max(id) FROM "{schema}".orders').fetchone() == (2000, 2000)
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["postgres", "default", schema, "orders"]))
    assert event is not None
    metadata = event.asset_materialization.metadata
    assert metadata["rows_written"].value == 2000
    assert metadata["final_positions"].value == {"orders": {"offset": 2000}}


def test_sigterm_to_a_streaming_job_stops_it_gracefully_canceled_with_positions_committed(
    tmp_path, postgres_env, pg_connect
) -> None:
    """SIGTERM (a pod eviction, `kill`) to `dagster job execute -j <pipeline>__stream`: the in-flight epoch
    commits, the run ends CANCELED (tagged as stopped by a signal), and the committed position is exactly
    what reached Postgres."""
    from streamling.state.sqlite import SqliteStateBackend

    schema = f"c_{uuid.uuid4().hex[:8]}"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write(
        pipelines,
        f"""
        sources:
          ticks: {{type: generator, rows_per_second: 2000, primary_key: id}}
        sinks:
          stored: {{type: postgres, from: ticks, schema: {schema}, table: ticks}}
        """,
        name="feed.yaml",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = cli_env(
        tmp_path,
        {**postgres_env, "DAGSTER_HOME": str(home), "STREAMLING_DAGSTER_PIPELINES": str(pipelines)},
    )
    config = tmp_path / "run.yaml"
    config.write_text("ops: {stream_feed: {config: {progress_interval_sec: 2, observe_interval_sec: 5}}}\n")
    process = subprocess.Popen(
        [DAGSTER, "job", "execute", "-m", "streamling_dagster", "-j", "feed__stream", "-c", str(config)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def stored() -> int:
        with pg_connect() as conn:
            try:
                return conn.execute(f'SELECT count(*) FROM "{schema}".ticks').fetchone()[0]
            except Exception:
                return 0

    deadline = time.time() + 180
    while stored() < 3000 and time.time() < deadline and process.poll() is None:
        time.sleep(0.5)
    assert process.poll() is None, process.stdout.read()[-3000:] if process.stdout else ""
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert "Stop requested: finishing the in-flight epoch, then stopping" in output
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (run,) = instance.get_runs()
        observed = instance.fetch_observations(
            dg.AssetKey(["postgres", "default", schema, "ticks"]),
            limit=1,
        ).records
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run.tags["streamling/stopped_by"] == "signal"
    with SqliteStateBackend("local_app_v1.feed", str(tmp_path / "state.db")) as state:
        committed = state.get("ticks:generator")
    with pg_connect() as conn:
        count, top = conn.execute(f'SELECT count(*), max(id) FROM "{schema}".ticks').fetchone()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert committed is not None and committed["offset"] == count == top  # ids 1..n: nothing lost, no gap
    (last,) = observed  # the final observation, taken after the stop
    assert last.asset_observation.metadata["committed_positions"].value == {"ticks": {"offset": count}}


def test_a_plugin_on_the_plugin_path_is_an_asset_with_lineage_in_the_dagster_cli(tmp_path: Path) -> None:
    """The code location loads ``STREAMLING__PLUGIN__PATH`` as runs do: the plugin source's object and the
    sink's are assets, one downstream of the other, and a file naming an unknown plugin id breaks nothing."""
    ns = f"feed_{uuid.uuid4().hex[:8]}"
    plugin = write_plugin(tmp_path / "outside", ns, FEED.format(ns=ns))
    feed = write_feed_pipelines(tmp_path, ns)
    env = cli_env(
        tmp_path,
        {
            "STREAMLING_DAGSTER_PIPELINES": str(feed.pipelines),
            "STREAMLING__PLUGIN__PATH": str(plugin),
            "DAGSTER_HOME": str(tmp_path),
        },
    )

    def dagster(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([DAGSTER, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    listed = dagster("asset", "list", "-m", "streamling_dagster", "--select", "acme/partner_api/orders+")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.split() == ["acme/partner_api/orders", "objectstore/lake/orders"]
    validated = dagster("definitions", "validate", "-m", "streamling_dagster")
    assert validated.returncode == 0, validated.stderr[-3000:]
    assert "All code locations passed validation." in validated.stdout + validated.stderr


def test_execute_for_scripts_tells_a_refusal_from_a_failure_and_waits_for_the_running_run(tmp_path: Path) -> None:
    """`python -m streamling_dagster.execute`: exit 3 when another run of the pipeline holds it (at once, or after
    `--wait`), 2 for a job that does not exist, and with `--wait` the run starts once the holder ended, exit 0. The
    holder is a run record marked STARTED in the instance (what a `dagster dev` run would leave there)."""
    import shutil

    from tests.conftest import REPO

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write(
        pipelines,
        "sources:\n  g: {type: generator, rows: 5, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n",
        name="gen.yaml",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "infra" / "dagster" / "dagster.yaml", home / "dagster.yaml")
    env = cli_env(tmp_path, {"DAGSTER_HOME": str(home), "STREAMLING_DAGSTER_PIPELINES": str(pipelines)})
    command = [sys.executable, "-m", "streamling_dagster.execute", "-j", "gen__backfill"]
    holder = dg.DagsterRun(
        job_name="gen__stream",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        tags={"streamling/pipeline": "gen"},
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_run(holder)

    def execute(*extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )

    refused = execute()
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "Warning" not in refused.stderr  # quiet: no beta or supersession warnings
    assert f"Error: pipeline 'gen' is already running in Dagster run {holder.run_id} (gen__stream, STARTED)" in (
        refused.stderr
    )
    assert "refused: no run was created" in refused.stderr
    started = time.monotonic()
    waited = execute("--wait", "3")
    assert waited.returncode == 3 and time.monotonic() - started >= 3
    assert f"waiting up to 3 s for run {holder.run_id} (gen__stream, STARTED) to end" in waited.stderr
    assert "(waited 3 s for it)" in waited.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert [r.run_id for r in instance.get_runs()] == [holder.run_id]  # nothing failed: no run was created
    missing = execute("-j", "nope__backfill")
    assert missing.returncode == 2 and "Error: -j: no job 'nope__backfill'" in missing.stderr
    # with a long wait, the run starts once the holder has ended
    waiting = subprocess.Popen(
        [*command, "--wait", "240"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert waiting.stdout is not None
    for line in waiting.stdout:
        if f"waiting up to 240 s for run {holder.run_id}" in line:
            break
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.report_run_failed(holder)  # the holder ends
    rest, _ = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, rest[-3000:]
    assert rest.rstrip().endswith("succeeded")
