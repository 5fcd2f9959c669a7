"""A partitioned backfill in a real browser over the session's `dagster dev`: the operator picks one range in the
asset's partition view and launches it, the partition shows as materialized, and after the pipeline's SQL is
edited, launching the same range again re-applies its rows (seen in Postgres). Screenshots go to
tests/artifacts/dagster_ui/."""

from __future__ import annotations

import json
import re

import dagster as dg
from confluent_kafka.admin import NewTopic
from playwright import sync_api
from playwright.sync_api import expect

from tests.e2e.dagster_dev import DagsterDev, ranged_pipeline
from tests.e2e.test_dagster_ui import pytestmark, shot  # noqa: F401  (skipped without Debian's chromium)
from tests.kafka_util import KafkaTestbed

TOAST = re.compile(r"^Launched run ([0-9a-f]{8})$")


def launch_range(dev: DagsterDev, page: sync_api.Page, asset: str, key: str, screenshot: str) -> str:
    """Materialize… in the asset's partition view, one partition picked in the dialog; returns the run's id."""
    page.goto(f"{dev.url}/assets/{asset}?view=partitions")
    page.get_by_role("button", name=re.compile("Materialize")).first.click()
    page.get_by_text("Select a partition or create one").click()
    # Dagster's MiddleTruncate renders a hidden copy of the key to measure it: the visible one is the option.
    page.get_by_role("dialog").last.get_by_text(key, exact=True).filter(visible=True).first.click()
    page.keyboard.press("Escape")  # closes the partition list, not the dialog
    expect(page.get_by_text("1 partition", exact=True)).to_be_visible()
    shot(page, screenshot)
    page.get_by_role("button", name="Launch 1 run").click()
    toast = page.get_by_text(TOAST)
    expect(toast).to_be_visible()
    prefix = TOAST.match(toast.inner_text()).group(1)
    with dev.instance() as instance:
        (run,) = [
            r for r in instance.get_runs(dg.RunsFilter(tags={"dagster/partition": key})) if r.run_id.startswith(prefix)
        ]
    return run.run_id


def test_a_range_is_backfilled_from_the_partition_view_and_a_rerun_reapplies_it(
    dagster_dev: DagsterDev,
    page: sync_api.Page,
    kafka_env,
    pg_connect,
) -> None:
    dev = dagster_dev
    topic = f"{dev.topic}_ranged"
    bed = KafkaTestbed(kafka_env)
    try:
        bed.admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
        for i in range(100):
            bed.send(topic, json.dumps({"id": i, "v": i}).encode(), key=str(i).encode())
        bed.flush()
    finally:
        bed.close()
    nodes = dev.graphql("query { assetNodes { assetKey { path } } }")["assetNodes"]
    (path,) = [n["assetKey"]["path"] for n in nodes if n["assetKey"]["path"][-1] == "ranged"]
    asset = "/".join(path)

    def stored() -> dict[int, int]:
        with pg_connect() as conn:
            return dict(conn.execute(f'SELECT id, v FROM "{dev.schema}".ranged').fetchall())

    first = launch_range(dev, page, asset, "0-50", "05_partition_launch.png")
    assert dev.wait_for_run(first, timeout=180) == "SUCCESS", dev.log_tail()
    assert stored() == {i: i for i in range(50)}  # offsets 0-50 only
    page.goto(f"{dev.url}/assets/{asset}?view=partitions")
    expect(page.get_by_text("Materialized (1)")).to_be_visible()
    expect(page.get_by_text("Missing (1)")).to_be_visible()
    shot(page, "06_partition_done.png")

    # The SQL changes: the same range, launched again, is read from its start and its rows are re-applied.
    (dev.pipelines / "ranged.yaml").write_text(ranged_pipeline(dev.schema, dev.topic, factor=5))
    again = launch_range(dev, page, asset, "0-50", "07_partition_rerun.png")
    assert dev.wait_for_run(again, timeout=180) == "SUCCESS", dev.log_tail()
    assert stored() == {i: 5 * i for i in range(50)}
    with dev.instance() as instance:
        key = dg.AssetKey(path)
        assert instance.get_materialized_partitions(key) == {"0-50"}
        (record,) = instance.fetch_materializations(key, limit=1).records
    assert record.run_id == again
    assert record.asset_materialization.metadata["rows_written"].value == 50
