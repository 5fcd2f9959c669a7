"""The control plane asks operators, not type names: a plugin source and sink registered here (no built-in type in
the pipeline) get the asset keys, descriptions and metadata their `reads()`/`writes()` give, and their lag is what
the source's `backlog()` says — in the asset graph, in *Observe* and in the stream-health checks, over a real
(sqlite) state backend, without Spark or services."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import pytest

from streamling.operators import ExternalObject, Sink, Source
from streamling.plugins.registry import REGISTRY
from streamling.spec import SinkSpec, SourceSpec
from streamling.state import StateBackend
from streamling_dagster import build_definitions
from streamling_dagster.observations import LAG_CHECK
from streamling_dagster.resources import StreamlingResource

FEED_WAITING = {"0": 40, "1": 2}
"""The records the partner API says it holds per partition, so the backlog is these minus the cursor."""


class FeedSpec(SourceSpec):
    type: Literal["acme.feed"]
    endpoint: str


class Feed(Source[FeedSpec]):
    """A partner API read by partition; its cursor (partition → offset) is its position."""

    def reads(self) -> list[ExternalObject]:
        return [
            ExternalObject(
                "acme",
                ("partner_api", self.spec.endpoint),
                "Orders as the ACME partner API offers them.",
                {"endpoint": f"https://api.acme.example/{self.spec.endpoint}", "partitions": 2},
            )
        ]

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        saved = state.get(f"{self.name}:cursor")
        return {k: v for k, v in saved.items() if k != "updated_at"} if saved else None

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        return {p: held - int((position or {}).get(p, 0)) for p, held in FEED_WAITING.items()}


class ArchiveSpec(SinkSpec):
    type: Literal["acme.archive"]
    bucket: str


class Archive(Sink[ArchiveSpec]):
    def writes(self) -> list[ExternalObject]:
        return [
            ExternalObject(
                "objectstore",
                (self.spec.bucket, "orders"),
                "Order archive, one Parquet file per epoch.",
                {"bucket": self.spec.bucket, "format": "parquet"},
            )
        ]


PIPELINE = """
sources:
  orders: {type: acme.feed, endpoint: orders}
sinks:
  archive: {type: acme.archive, from: orders, bucket: lake}
orchestration: {stream_max_lag: 10}
"""


@pytest.fixture
def acme_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Registers the two operators for this test only (the registry is restored afterwards)."""
    REGISTRY.types("source")  # the built-ins first, so the copy holds them
    monkeypatch.setattr(REGISTRY, "_types", dict(REGISTRY._types))
    REGISTRY.register("acme.feed", FeedSpec, Feed)
    REGISTRY.register("acme.archive", ArchiveSpec, Archive)
    yield


def key(text: str) -> dg.AssetKey:
    return dg.AssetKey.from_user_string(text)


def test_plugin_objects_become_assets_with_their_description_metadata_and_lag(
    tmp_path: Path, acme_plugin: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamling.state.sqlite import SqliteStateBackend

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "feed.yaml").write_text(textwrap.dedent(PIPELINE))
    db = tmp_path / "state.db"
    monkeypatch.setenv("STREAMLING__STATE_BACKEND__SQLITE__DATABASE_PATH", str(db))
    defs = build_definitions(pipelines)
    graph = defs.resolve_asset_graph()

    api = graph.get(key("acme/partner_api/orders"))  # the object the source reads, keyed as reads() says
    assert api.description is not None
    assert api.description.startswith(
        "Orders as the ACME partner API offers them.\n\nRead by source 'orders' of feed.\n\n```yaml\norders:\n"
    )
    assert api.metadata["endpoint"] == "https://api.acme.example/orders"
    assert api.metadata["partitions"] == 2
    assert (api.group_name, api.kinds) == ("acme", {"acme"})

    archive = graph.get(key("objectstore/lake/orders"))  # what the sink writes, keyed as writes() says
    assert archive.parent_keys == {key("acme/partner_api/orders")}
    assert archive.description is not None
    assert archive.description.startswith(
        "Order archive, one Parquet file per epoch.\n\nWritten by sink 'archive' of feed."
    )
    assert (archive.metadata["bucket"], archive.metadata["format"]) == ("lake", "parquet")
    assert (archive.group_name, archive.kinds) == ("feed", {"objectstore"})
    assert (archive.is_materializable, archive.is_observable) == (False, True)  # it streams: observed
    # the source knows its backlog behind what it reads, so the sink gets the stream-health checks
    assert {c.name for c in graph.asset_check_keys if c.asset_key == archive.key} == {
        LAG_CHECK,
        "stream_freshness",
    }

    with SqliteStateBackend("local_app_v1.feed", str(db)) as state:
        state.put_many(
            {
                "orders:cursor": {"0": 10, "1": 2, "updated_at": 1_700_000_000_000},
                "orders:__epoch__": {"epoch": 3, "updated_at": 1_700_000_000_000},
            }
        )
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(asset_selection=[archive.key])  # *Observe* on the sink's page
    assert result.success
    (observed,) = [e.event_specific_data.asset_observation for e in result.all_events if e.is_asset_observation]
    # positions by partition are named by the object the source reads (its path), like a Kafka topic's
    assert observed.metadata["committed_positions"].value == {"orders": {"partner_api.orders": {"0": 10, "1": 2}}}
    assert observed.metadata["backlog"].value == {"orders": {"partner_api.orders": {"0": 30, "1": 0}}}
    assert observed.metadata["backlog_total"].value == 30

    sensor = next(s for s in defs.sensors or [] if s.name == "streamling_committed_positions")
    tick = sensor(dg.build_sensor_context(resources={"streamling": StreamlingResource()}))
    lag = next(e for e in tick.asset_events if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == LAG_CHECK)
    assert (lag.asset_key, lag.passed) == (archive.key, False)
    assert lag.description == "30 records wait after the committed positions (limit 10)"
