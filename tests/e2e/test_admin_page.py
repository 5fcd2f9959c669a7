"""The admin page in a real headless Chromium while the `streamling` CLI runs a pipeline: the topology drawn as a
graph with rows/s per node, and a click on a node showing its live rows, which change as the stream goes on.
Screenshots go to tests/artifacts/admin_page/."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import REPO
from tests.e2e.browser import CHROMIUM
from tests.e2e.cli import start_inspectable, write
from tests.net import ADMIN_TOKEN

ARTIFACTS = REPO / "tests" / "artifacts" / "admin_page"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} missing (./dev test installs it)"),
]


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True, animations="disabled")


def test_the_page_shows_the_graph_and_a_nodes_live_rows_changing(tmp_path: Path, page: Page) -> None:
    pipeline = write(
        tmp_path,
        """
        sources:
          orders: {type: generator, rows_per_second: 300, record_batch_size: 60, primary_key: id}
        transforms:
          big_orders:
            type: sql
            primary_key: id
            sql: SELECT id, name, round(amount, 2) AS amount, _gs_op FROM orders WHERE amount > 10
        sinks:
          archive: {type: blackhole, from: big_orders}
          everything: {type: blackhole, from: orders}
        """,
    )
    engine, base = start_inspectable(tmp_path, pipeline, rows=6, refresh_sec=1)
    try:
        page.goto(f"{base}/?token={ADMIN_TOKEN}")  # once: the page keeps it in a cookie, and the URL drops it
        expect(page).to_have_url(f"{base}/")
        expect(page.locator("#pipeline")).to_have_text("Pipeline pipeline")
        for name in ("orders", "big_orders", "archive", "everything"):
            expect(page.locator(f'g.node[data-node="{name}"]')).to_be_visible()
        node = page.locator('g.node[data-node="big_orders"]')
        expect(node).to_have_attribute("data-health", "flowing")
        expect(node.locator("text.rate")).not_to_have_text("0 rows/s · 0 total")
        expect(page.locator("#status")).to_have_text("ready")
        assert page.locator("path.edge").count() == 3  # orders → big_orders → archive, orders → everything
        shot(page, "01_graph.png")

        node.click()
        expect(page.locator("#detail-title")).to_have_text("big_orders")
        rows = page.locator("#live-rows tr")
        expect(rows.first).to_be_visible()
        expect(page.locator("#live-head th")).to_have_text(["id", "name", "amount", "_gs_op"])
        first = rows.all_inner_texts()
        assert 1 <= len(first) <= 6
        assert all(float(r.split("\t")[2]) > 10 for r in first)  # the node's rows, after its filter
        shot(page, "02_live_rows.png")
        page.wait_for_function(
            "before => Array.from(document.querySelectorAll('#live-rows tr')).map(r => r.innerText).join('|') !== before",
            arg="|".join(first),
        )
        assert rows.all_inner_texts() != first
        shot(page, "03_live_rows_changed.png")
    finally:
        os.killpg(engine.pid, signal.SIGTERM)
        _, err = engine.communicate(timeout=120)
    assert engine.returncode == 0, err[-3000:]
