"""Cross-pipeline lineage in the Dagster UI, in Chromium, over a real `dagster dev` loading the shipped orders
pipelines (copied from pipelines/): the Kafka topic `shop.orders` that orders_to_kafka writes and the hybrid
orders_hybrid (and order_totals) read is one node of the global lineage, with its edge from the writer's pipeline
and to each reader's; the archive's ClickHouse table likewise joins orders_archive to orders_hybrid.

No data moves: lineage is what the definitions declare. Screenshots go to tests/artifacts/dagster_ui/.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest
from playwright import sync_api
from playwright.sync_api import expect

from tests.conftest import REPO
from tests.e2e import test_dagster_ui as ui
from tests.e2e.dagster_dev import DagsterDev, running_dagster_dev
from tests.e2e.test_dagster_ui import shot

pytestmark = ui.pytestmark  # skipped without Debian's chromium
SHIPPED = ("orders_archive", "orders_to_kafka", "orders_hybrid", "order_totals")


@pytest.fixture(scope="module")
def shipped_dev(
    tmp_path_factory: pytest.TempPathFactory, postgres_env: dict[str, str], kafka_env: dict[str, str]
) -> Iterator[DagsterDev]:
    root = tmp_path_factory.mktemp("dagster_lineage")
    pipelines = root / "shipped"
    pipelines.mkdir()
    for name in SHIPPED:
        shutil.copy(REPO / "pipelines" / f"{name}.yaml", pipelines)
    with running_dagster_dev(root, postgres_env, kafka_env, pipelines, ready_job="orders_hybrid__backfill") as dev:
        yield dev


def lineage_lists(page: sync_api.Page) -> tuple[str, str]:
    """The asset page's Lineage section: the text of its upstream and of its downstream list."""
    section = page.locator("body").inner_text()
    after = section.split("Upstream assets", 1)[1]
    upstream, _, rest = after.partition("Downstream assets")
    return upstream, rest.split("Definition", 1)[0]


def test_a_topic_written_by_one_pipeline_and_read_by_a_hybrid_is_one_node(
    shipped_dev: DagsterDev, page: sync_api.Page
) -> None:
    dev = shipped_dev

    # 1. Groups collapsed: one box per pipeline, edges between the boxes of different pipelines.
    page.goto(f"{dev.url}/asset-groups")
    expect(page.get_by_text("Global asset lineage")).to_be_visible()
    for group in SHIPPED:
        expect(page.get_by_text(group, exact=True).first).to_be_visible()
    shot(page, "lineage_01_pipelines.png")

    # 2. Every group expanded: the topic and the archive table are one node each, however many pipelines use them.
    groups = ",".join(f"global@global:{group}" for group in SHIPPED)
    page.goto(f"{dev.url}/asset-groups?expanded={groups}")
    expect(page.get_by_text("shop.orders", exact=True)).to_have_count(1)
    expect(page.get_by_text("shop.orders", exact=True)).to_be_visible()
    expect(page.get_by_text("live_orders", exact=True)).to_be_visible()  # the writer's transform
    expect(page.get_by_text("priced", exact=True)).to_be_visible()  # the hybrid's transform
    expect(page.get_by_text("Loading...")).to_have_count(0)
    shot(page, "lineage_02_expanded.png")

    # 3. The topic's page: upstream is the writer's pipeline, downstream the hybrid's and order_totals'.
    page.goto(f"{dev.url}/assets/kafka/shop.orders")
    expect(page.get_by_text("Upstream assets")).to_be_visible()
    expect(page.get_by_text("orders_hybrid / priced").first).to_be_visible()
    expect(page.get_by_text("orders_to_kafka / live_orders").first).to_be_visible()  # the lists have loaded
    upstream, downstream = lineage_lists(page)
    assert "orders_to_kafka / live_orders" in upstream
    assert "orders_hybrid" not in upstream
    assert "orders_hybrid / priced" in downstream
    assert "shop / totals_by_customer" in downstream  # order_totals' aggregate table, straight from the topic
    shot(page, "lineage_03_topic.png")

    # 4. The topic's neighbourhood graph: writer's transform → topic → hybrid's transform.
    page.goto(f"{dev.url}/assets/kafka/shop.orders?view=lineage&lineageScope=neighbors")
    for label in ("live_orders", "shop.orders", "priced", "totals_by_customer"):
        expect(page.get_by_text(label, exact=True).first).to_be_visible()
    shot(page, "lineage_04_topic_graph.png")

    # 5. The archive table: written by orders_archive, backfilled by the hybrid — one node too.
    page.goto(f"{dev.url}/assets/clickhouse/default/orders_archive")
    expect(page.get_by_text("Upstream assets")).to_be_visible()
    expect(page.get_by_text("orders_hybrid / priced").first).to_be_visible()  # the lists have loaded
    expect(page.get_by_text("orders_archive / archived_orders").first).to_be_visible()
    upstream, downstream = lineage_lists(page)
    assert "orders_archive / archived_orders" in upstream
    assert "orders_hybrid / priced" in downstream
    shot(page, "lineage_05_archive.png")


def test_the_hybrid_offers_backfill_stream_and_both(shipped_dev: DagsterDev, page: sync_api.Page) -> None:
    """The backfill-then-stream shape a newcomer is meant to see: the hybrid's three jobs."""
    page.goto(f"{shipped_dev.url}/jobs")
    for job in ("orders_hybrid__backfill", "orders_hybrid__stream", "orders_hybrid__backfill_then_stream"):
        expect(page.get_by_text(job, exact=True).first).to_be_visible()
    expect(page.get_by_text("orders_to_kafka__backfill", exact=True)).to_have_count(0)  # stream-only
    shot(page, "lineage_06_jobs.png")


def test_the_sink_asset_page_links_the_stream_that_feeds_it(shipped_dev: DagsterDev, page: sync_api.Page) -> None:
    """Dagster's own job list on an asset page names only asset jobs; the `streamling/jobs` metadata links the
    stream job too, and the link opens that job in its code location."""
    page.goto(f"{shipped_dev.url}/assets/postgres/default/shop/orders")
    link = page.get_by_role("link", name="orders_hybrid__stream", exact=True)
    expect(link).to_be_visible()
    expect(page.get_by_role("link", name="orders_hybrid__backfill_then_stream", exact=True)).to_be_visible()
    shot(page, "lineage_07_sink_jobs.png")
    link.click()
    page.wait_for_url(re.compile(r"/jobs/orders_hybrid__stream"))
    expect(
        page.get_by_text("Stream orders_hybrid.yaml: terminate the run to stop it gracefully.").first
    ).to_be_visible()
