"""The Dagster UI, in a real browser, over a real `dagster dev`: what an operator sees and clicks.

Proves that the pipelines' assets show up in the asset graph (generator source, Kafka topic, Postgres sinks), that
the `shop__backfill` job launched from its page's "Materialize" button is queued, run by the daemon and succeeds,
that the sink asset's page then shows the materialization metadata (`rows_written` 2000, `final_positions`), and
that the 2000 rows really are in Postgres. Screenshots of each step go to tests/artifacts/dagster_ui/.
"""

from __future__ import annotations

import os
import re

import pytest
from playwright import sync_api
from playwright.sync_api import expect

from tests.conftest import REPO
from tests.e2e.browser import CHROMIUM, UI_TIMEOUT_MS
from tests.e2e.dagster_dev import LOCATION, DagsterDev

ARTIFACTS = REPO / "tests" / "artifacts" / "dagster_ui"
RUN_ID = re.compile(r"/runs/([0-9a-f-]{36})$")
expect.set_options(timeout=UI_TIMEOUT_MS)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} missing (./dev test installs it)"),
]


def shot(page: sync_api.Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True, animations="disabled")


def test_backfill_launched_from_the_ui_succeeds_and_shows_its_metadata(
    dagster_dev: DagsterDev, page: sync_api.Page, pg_connect
) -> None:
    dev = dagster_dev

    # 1. The global asset lineage with every group expanded: both pipelines' nodes, named as in their files.
    groups = ",".join(f"global@global:{group}" for group in ("shop", "ticker", "kafka"))
    page.goto(f"{dev.url}/asset-groups?expanded={groups}")
    expect(page.get_by_text("Global asset lineage")).to_be_visible()
    # shop's generator (shop/orders) and the table it writes (postgres/<db>/<schema>/orders)
    expect(page.get_by_text("orders", exact=True)).to_have_count(2)
    expect(page.get_by_text(dev.topic, exact=True)).to_be_visible()  # ticker's Kafka source (kafka/<topic>)
    expect(page.get_by_text("ticks", exact=True)).to_be_visible()  # the table ticker writes
    for node in [*page.get_by_text("orders", exact=True).all(), page.get_by_text("ticks", exact=True)]:
        expect(node).to_be_visible()
    expect(page.get_by_text("Loading...")).to_have_count(0)  # the nodes' live status rows have arrived
    shot(page, "01_asset_graph.png")

    # 2. The job's page: its single asset, and the "Materialize" button launches the job without config.
    page.goto(f"{dev.url}/locations/{LOCATION}/jobs/shop__backfill")
    expect(page.get_by_text("Run shop.yaml's bounded sources to their end (job mode).")).to_be_visible()
    page.locator("button", has_text=re.compile(r"^Materialize$")).click()
    toast = page.get_by_text(re.compile(r"^Launched run [0-9a-f]{8}$"))
    expect(toast).to_be_visible()
    launched = toast.inner_text().split()[-1]
    view = page.get_by_role("link", name="View", exact=True)  # the toast's link to the run's page
    expect(view).to_be_visible()
    shot(page, "02_launch.png")
    view.click()
    page.wait_for_url(RUN_ID)
    match = RUN_ID.search(page.url)
    assert match is not None
    run_id = match.group(1)
    assert run_id.startswith(launched)

    # 3. Wait on the run by protocol (queued, launched by the daemon, Spark in the run worker), then look at it.
    assert dev.wait_for_run(run_id, timeout=180) == "SUCCESS", dev.log_tail()
    run = dev.graphql("query($id: ID!) { runOrError(runId: $id) { ... on Run { jobName } } }", {"id": run_id})
    assert run["runOrError"]["jobName"] == "shop__backfill"
    page.reload()
    expect(page.get_by_text("Success", exact=True).first).to_be_visible()
    expect(page.get_by_text("shop__backfill").first).to_be_visible()
    expect(page.get_by_text("Succeeded (1)")).to_be_visible()
    expect(page.get_by_text("Loading run logs")).to_have_count(0)  # the event log, with the check's result
    expect(page.get_by_text("rows_reconcile").first).to_be_visible()
    shot(page, "03_run_succeeded.png")

    # 4. The sink asset's page: the materialization's metadata from the engine's run summary.
    page.goto(f"{dev.url}/assets/{dev.table_key('orders').to_user_string()}")
    rows_written = page.locator("tr", has=page.get_by_text("rows_written", exact=True))
    expect(rows_written).to_contain_text("2000")
    final_positions = page.locator("tr", has=page.get_by_text("final_positions", exact=True))
    expect(final_positions).to_contain_text('"offset": 2000')
    expect(final_positions).to_contain_text('"orders"')
    shot(page, "04_asset_metadata.png")

    # 5. The instance agrees that this run materialized it, and the rows themselves are in Postgres.
    assert dev.client.get_run_status(run_id).value == "SUCCESS"
    with dev.instance() as instance:
        event = instance.get_latest_materialization_event(dev.table_key("orders"))
    assert event is not None and event.run_id == run_id
    with pg_connect() as conn:
        assert conn.execute(f'SELECT count(*), max(id) FROM "{dev.schema}".orders').fetchone() == (2000, 2000)
