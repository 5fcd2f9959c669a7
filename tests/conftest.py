"""Shared fixtures: one SparkSession per test session, services started once via infra/services."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.net import ADMIN_TOKEN

REPO = Path(__file__).resolve().parent.parent
SERVICES = REPO / "infra" / "services"

# Keep the suite's Spark small and quiet on a 2-core CI machine.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Tests of how a failure ends a run see it end: the restart strategy (on by default) would start it again first.
# The restart tests (tests/unit/test_restarts.py, tests/e2e/test_restart_strategy.py, test_cli_run.py) turn it on.
os.environ.setdefault("STREAMLING__RESTART_STRATEGY__TYPE", "none")
# Token files of the engines and admin APIs tests start go to a folder of the test session, not ~/.streamling.
os.environ.setdefault(
    "STREAMLING_HOME", os.path.join(os.environ.get("TMPDIR", "/tmp"), f"streamling-home-{os.getpid()}")
)


@pytest.fixture(scope="session")
def spark():
    from streamling.config.model import SparkSettings
    from streamling.spark.session import build_session

    session = build_session(SparkSettings(master="local[2]", shuffle_partitions=2))
    yield session
    session.stop()


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., object]:
    """Settings isolated in tmp_path; keyword overrides use dotted keys."""
    from streamling.config import load_settings

    def build(environ: dict[str, str] | None = None, **overrides: object):
        base = {
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "spark.master": "local[2]",
            "spark.shuffle_partitions": 2,
            "checkpoint_interval_sec": "200ms",
            "record_batch_interval_ms": 50,
            "admin_api_token": ADMIN_TOKEN,
            "restart_strategy.type": "none",
        }
        base.update({k.replace("__", "."): v for k, v in overrides.items()})
        config = tmp_path / "empty-config.yaml"  # never the working directory's config.yaml
        config.write_text("{}\n")
        return load_settings(config=str(config), environ=environ or {}, overrides=base)

    return build


@pytest.fixture
def write_pipeline(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "pipeline.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A folder on this process's `sys.path`, where `tests.plugin_util.write_distribution` installs a plugin
    distribution for `importlib.metadata` to find."""
    folder = tmp_path / "site"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def services(*args: str) -> str:
    """Run ``infra/services`` (up/down/status/env); tests use it to restart a service mid-run."""
    return subprocess.run([sys.executable, str(SERVICES), *args], check=True, capture_output=True, text=True).stdout


def _service_env(name: str) -> Iterator[dict[str, str]]:
    """Start `name` once; yield its STREAMLING__ variables; stop it afterwards if this session started it."""
    was_running = "ready" in services("status", name)
    services("up", name)
    env = {}
    for line in services("env", name).splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    yield env
    if not was_running:
        services("down", name)


@pytest.fixture(scope="session")
def postgres_env() -> Iterator[dict[str, str]]:
    """A real Postgres 15 on loopback."""
    yield from _service_env("postgres")


@pytest.fixture(scope="session")
def kafka_env() -> Iterator[dict[str, str]]:
    """A real Kafka-protocol broker (noida-db) and the local Confluent-API schema registry."""
    registry = _service_env("registry")
    broker = _service_env("kafka")
    env = {**next(registry), **next(broker)}
    yield env
    # Spark's Python workers keep Kafka clients cached; end them before the broker, or they log reconnects.
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    gc.collect()  # and release this process's own clients (admin handles log reconnects too)
    for started in (broker, registry):
        next(started, None)


@pytest.fixture
def kafka(kafka_env: dict[str, str]):
    from tests.kafka_util import KafkaTestbed

    bed = KafkaTestbed(kafka_env)
    yield bed
    bed.close()


@pytest.fixture(scope="session")
def spark_cluster_env() -> Iterator[dict[str, str]]:
    """A real standalone Spark cluster (master + worker) on loopback."""
    yield from _service_env("spark")


@pytest.fixture(scope="session")
def shared_nothing_cluster_env() -> Iterator[dict[str, str]]:
    """A standalone Spark cluster of two workers that share nothing with this checkout (`infra/services up
    spark-cluster`); its variables set `spark.environment_archive: auto`."""
    yield from _service_env("spark-cluster")


@pytest.fixture
def pg_connect(postgres_env: dict[str, str]):
    import psycopg

    prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"

    def connect() -> psycopg.Connection:
        return psycopg.connect(
            host=postgres_env[prefix + "HOST"],
            port=int(postgres_env[prefix + "PORT"]),
            user=postgres_env[prefix + "USER"],
            password=postgres_env[prefix + "PASSWORD"],
            dbname=postgres_env[prefix + "DATABASE"],
            autocommit=True,
        )

    return connect


@pytest.fixture(scope="session")
def clickhouse_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The real ClickHouse engine, embedded (chdb): one data path for the whole session, because chdb allows
    one per process — tests isolate themselves by database instead. Source and sink share it."""
    path = str(tmp_path_factory.mktemp("clickhouse") / "data")
    return {"STREAMLING__CLICKHOUSE_SOURCE__PATH": path, "STREAMLING__CLICKHOUSE_SINK__PATH": path}


@pytest.fixture
def clickhouse(clickhouse_env: dict[str, str]):
    """A client on the session's embedded engine and a fresh database name for this test."""
    import uuid

    from streamling.clickhouse.client import get_client
    from streamling.config.model import ClickHouseConnectionSettings

    settings = ClickHouseConnectionSettings(path=clickhouse_env["STREAMLING__CLICKHOUSE_SOURCE__PATH"])

    class Reopening:
        """The process's embedded client, asked for at each use: a Dagster backfill-then-stream run in this process
        releases the embedded engine after its backfill (`release_embedded` closes the client it had)."""

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(get_client(settings, "test"), name)

    client = Reopening()
    database = f"db_{uuid.uuid4().hex[:10]}"
    client.command(f"CREATE DATABASE {database}")
    yield client, database
    client.command(f"DROP DATABASE IF EXISTS {database}")


@pytest.fixture
def server():
    """A real HTTP server on loopback (pytest-httpserver), threaded; expectations are set by each test."""
    from pytest_httpserver import HTTPServer

    srv = HTTPServer(threaded=True)
    srv.start()
    yield srv
    srv.clear()
    if srv.is_running():
        srv.stop()
