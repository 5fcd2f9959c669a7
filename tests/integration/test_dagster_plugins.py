"""A plugin written outside the repo, in Dagster: loaded by ``STREAMLING__PLUGIN__PATH`` or as an installed
distribution's entry point, its source and sink are assets keyed, described and annotated as their `reads()` and
`writes()` say, with lineage between them; the backfill job materializes in process (the real resources and the
session's Spark) and the sink gets the rows; the positions sensor reports the plugin's own backlog. A pipeline
naming a plugin id that is not loaded is an invalid file with the loader's message, and the others load."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from streamling.plugins import loader
from streamling.plugins.registry import REGISTRY
from streamling_dagster import build_definitions
from streamling_dagster.observations import LAG_CHECK
from streamling_dagster.resources import StreamlingResource
from tests.integration.test_dagster import SessionSpark
from tests.plugin_util import FEED, FeedPlugin, write_distribution, write_feed_pipelines, write_plugin

pytestmark = pytest.mark.integration


def key(text: str) -> dg.AssetKey:
    return dg.AssetKey.from_user_string(text)


@pytest.fixture
def by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FeedPlugin:
    """The plugin file in a folder of its own, named by ``STREAMLING__PLUGIN__PATH`` (the code location's
    settings and the run's come from the environment, as in a deployment)."""
    ns = f"feed_{uuid.uuid4().hex[:8]}"
    plugin = write_plugin(tmp_path / "outside", ns, FEED.format(ns=ns))
    monkeypatch.setenv("STREAMLING__PLUGIN__PATH", str(plugin))
    return write_feed_pipelines(tmp_path, ns)


@pytest.fixture
def by_entry_point(tmp_path: Path, site: Path, spark, monkeypatch: pytest.MonkeyPatch) -> Iterator[FeedPlugin]:
    """The plugin as an installed distribution (a dist-info folder on `sys.path` declaring the entry point),
    found as a code location finds installed plugins when it starts (the registry is this test's copy). It is
    not shipped with the job: installed plugins must be installed where Spark's Python workers run, so the
    workers get the folder on their ``PYTHONPATH`` (Spark starts workers with the context's environment)."""
    ns = f"dist_{uuid.uuid4().hex[:8]}"
    write_distribution(site, "acme-feed", {"feed": f"{ns}:PLUGIN"}, {ns: FEED.format(ns=ns)})
    for attribute in ("_types", "_functions", "_preprocessors"):
        monkeypatch.setattr(REGISTRY, attribute, dict(getattr(REGISTRY, attribute)))
    loader.load_installed(REGISTRY)
    environment = spark.sparkContext.environment
    before = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), before]))
    yield write_feed_pipelines(tmp_path, ns)
    if before is None:
        environment.pop("PYTHONPATH")
    else:
        environment["PYTHONPATH"] = before


@pytest.fixture(params=["by_path", "by_entry_point"])
def feed(request: pytest.FixtureRequest) -> FeedPlugin:
    return request.getfixturevalue(request.param)


def test_plugin_assets_lineage_backfill_and_backlog(feed: FeedPlugin, spark, tmp_path: Path) -> None:
    defs = build_definitions(feed.pipelines)
    graph = defs.resolve_asset_graph()

    api = graph.get(key("acme/partner_api/orders"))  # what the plugin source reads, keyed as reads() says
    assert api.description is not None
    assert api.description.startswith("Orders as the ACME partner API offers them.\n\nRead by source 'orders'")
    assert (api.metadata["endpoint"], api.metadata["partitions"]) == ("https://api.acme.example/orders", 1)
    assert api.kinds == {"acme"}
    archive = graph.get(key("objectstore/lake/orders"))  # what the plugin sink writes
    assert archive.parent_keys == {api.key}
    assert archive.description is not None
    assert archive.description.startswith("Order archive, JSON lines.\n\nWritten by sink 'archive' of feed.")
    assert (archive.metadata["bucket"], archive.metadata["format"]) == ("lake", "jsonl")
    assert (archive.is_materializable, archive.is_observable) == (True, False)  # bounded: a backfill
    assert sorted(j.name for j in defs.jobs or []) == ["feed__backfill"]

    # the file naming an id no plugin defines is shown invalid, with the loader's message listing what is loaded
    check = defs.get_asset_checks_def(dg.AssetCheckKey(key("typo/pipeline"), "pipeline_is_valid"))
    outcome = check()
    assert not outcome.passed
    assert outcome.description.startswith(
        f"{feed.pipelines / 'typo.yaml'}:2: source 'orders': operator type '{feed.namespace}.fed' is not available; "
        "loaded source types: "
    )
    assert f"{feed.namespace}.feed" in outcome.description

    streamling = StreamlingResource(
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "checkpoint_interval_sec": "200ms",
        }
    )
    run_assets = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]
    result = dg.materialize(
        run_assets,
        resources={"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})},
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    assert event.asset_key == archive.key
    assert event.materialization.metadata["rows_written"].value == 10
    assert event.materialization.metadata["final_positions"].value == {"orders": {"position": 10}}
    rows = [json.loads(line) for line in feed.archive.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == list(range(10))
    # the feed cannot tell the rows between two positions (no rows_between), so there is nothing to reconcile
    assert result.get_asset_check_evaluations() == []

    sensor = next(s for s in defs.sensors or [] if s.name == "streamling_committed_positions")
    tick = sensor(dg.build_sensor_context(resources={"streamling": streamling}))
    (observed,) = [e for e in tick.asset_events if isinstance(e, dg.AssetObservation)]
    assert observed.asset_key == archive.key
    # the plugin's backlog (by partition), named by the object its source reads
    assert observed.metadata["backlog"].value == {"orders": {"partner_api.orders": {"0": 15}}}
    assert observed.metadata["backlog_total"].value == 15
    assert observed.metadata["committed_positions"].value == {"orders": {"position": 10}}


def test_a_plugin_source_without_a_backlog_gets_no_lag_checks(by_path: FeedPlugin) -> None:
    (by_path.pipelines / "typo.yaml").unlink()
    (by_path.pipelines / "feed.yaml").write_text(
        f"sources:\n  ticks: {{type: {by_path.namespace}.ticker}}\n"
        f"sinks:\n  archive: {{type: {by_path.namespace}.archive, from: ticks, bucket: lake, path: /dev/null}}\n"
    )
    graph = build_definitions(by_path.pipelines).resolve_asset_graph()
    archive = key("objectstore/lake/orders")
    assert graph.get(archive).parent_keys == {key("acme/ticks")}
    assert graph.get(archive).is_observable  # it streams
    assert LAG_CHECK not in {c.name for c in graph.asset_check_keys if c.asset_key == archive}


def test_plugin_labels_follow_the_label_rules_and_a_failing_plugin_marks_only_its_file_invalid(
    by_path: FeedPlugin, spark, make_settings
) -> None:
    """A plugin's identity labels become metric dimensions like the YAML's: a key that breaks the rules is an
    error naming plugin, node and key, from ``--validate``'s analysis and in Dagster (without Spark); so is a
    plugin whose `reads()` raises. The valid file next to them loads."""
    from streamling.api import validate_pipeline

    ns, pipelines = by_path.namespace, by_path.pipelines
    (pipelines / "typo.yaml").unlink()
    sink = f"{ns}.archive, from: orders, bucket: lake, path: /dev/null"
    (pipelines / "labelled.yaml").write_text(
        f"sources:\n  orders: {{type: {ns}.feed, endpoint: o, rows: 1, held: 1}}\n"
        f"sinks:\n  out: {{type: {sink}, label: bad-key}}\n  other: {{type: {sink}, label: id}}\n"
    )
    (pipelines / "slash.yaml").write_text(
        f"sources:\n  orders: {{type: {ns}.feed, endpoint: a/b, rows: 1, held: 1}}\nsinks:\n  out: {{type: {sink}}}\n"
    )
    bad_key = f"plugin '{ns}.archive' (node 'out'): identity label 'bad-key' must match ^[a-zA-Z_][a-zA-Z0-9_]*$"
    reserved = f"plugin '{ns}.archive' (node 'other'): identity label 'id' is reserved"

    settings = make_settings(plugin__path=os.environ["STREAMLING__PLUGIN__PATH"])
    assert validate_pipeline(pipelines / "labelled.yaml", settings, spark).errors == [bad_key, reserved]

    defs = build_definitions(pipelines)
    errors = {
        name: defs.get_asset_checks_def(dg.AssetCheckKey(key(f"{name}/pipeline"), "pipeline_is_valid"))()
        for name in ("labelled", "slash")
    }
    assert errors["labelled"].description == (
        f"{pipelines / 'labelled.yaml'}:4: {bad_key}\n{pipelines / 'labelled.yaml'}:5: {reserved}"
    )
    assert errors["slash"].description == (
        f"{pipelines / 'slash.yaml'}:2: plugin '{ns}.feed' (node 'orders'): ValueError: endpoint 'a/b' must not "
        "contain '/'"
    )
    assert key("objectstore/lake/orders") in defs.resolve_asset_graph().get_all_asset_keys()
