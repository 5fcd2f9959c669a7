"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.browser import open_page
from tests.e2e.dagster_dev import DagsterDev, running_dagster_dev
from tests.e2e.starvation import busy_cores


@pytest.fixture(scope="session")
def dagster_dev(
    tmp_path_factory: pytest.TempPathFactory, postgres_env: dict[str, str], kafka_env: dict[str, str]
) -> Iterator[DagsterDev]:
    """One `dagster dev` (webserver + daemon) per session over `shop.yaml` (generator → Postgres, backfillable)
    and `ticker.yaml` (Kafka topic `dagster_dev.topic` → Postgres), real Postgres and Kafka, local[2] Spark."""
    with running_dagster_dev(tmp_path_factory.mktemp("dagster_dev"), postgres_env, kafka_env) as dev:
        yield dev


@pytest.fixture
def page() -> Iterator[object]:
    """A page of a real headless Chromium (tests/e2e/browser.py)."""
    with open_page() as opened:
        yield opened


@pytest.fixture
def starved() -> Iterator[None]:
    """One busy process per core for the test's duration (tests/e2e/starvation.py)."""
    with busy_cores():
        yield
