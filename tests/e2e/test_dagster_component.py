"""`StreamlingPipelineComponent` in a real `dg` project: a temporary project (pyproject with `[tool.dg]`, a
`defs/` folder with one defs.yaml per pipeline) checked and listed by the installed `dg` CLI, no Spark needed.

The component is found through the `dagster_dg_cli.registry_modules` entry point of the installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.cli import cli_env

REPO = Path(__file__).resolve().parents[2]
DG = str(Path(sys.executable).with_name("dg"))
TYPE = "streamling_dagster.StreamlingPipelineComponent"


def project(root: Path, components: dict[str, str]) -> Path:
    """A dg project `shop` under `root`; `components` maps a defs folder to its defs.yaml attributes (YAML)."""
    (root / "src" / "shop" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [project]
            name = "shop"
            version = "0.1.0"
            requires-python = ">=3.11"

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "shop"
            """
        )
    )
    (root / "src" / "shop" / "__init__.py").write_text("")
    (root / "src" / "shop" / "defs" / "__init__.py").write_text("")
    (root / "src" / "shop" / "definitions.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path

            import dagster as dg


            @dg.definitions
            def defs() -> dg.Definitions:
                return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
            """
        )
    )
    for folder, attributes in components.items():
        where = root / "src" / "shop" / "defs" / folder
        where.mkdir()
        pipeline = attributes.split("pipeline:", 1)[1].split()[0]
        if (REPO / "pipelines" / pipeline).exists():
            (where / pipeline).write_text((REPO / "pipelines" / pipeline).read_text())
        (where / "defs.yaml").write_text(f"type: {TYPE}\nattributes:\n{textwrap.indent(attributes, '  ')}")
    return root


def dg(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = cli_env(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([DG, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_components_list_check_and_list_defs_across_two_pipelines(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "orders_to_kafka": "pipeline: orders_to_kafka.yaml\n",
            "orders": textwrap.dedent(
                """\
                pipeline: orders_hybrid.yaml
                group_name: shop
                owners: [team:data]
                tags: {tier: gold}
                define_inputs: false        # kafka/shop.orders is the other component's sink
                backfill_schedule: "0 3 * * *"
                """
            ),
        },
    )
    listed = dg(root, "list", "components", "--json")
    assert listed.returncode == 0, listed.stderr
    assert TYPE in {c["key"] for c in json.loads(listed.stdout)["items"]}

    checked = dg(root, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr

    shown = dg(root, "list", "defs", "--json")
    assert shown.returncode == 0, shown.stderr
    defs = json.loads(shown.stdout)
    assets = {a["asset_key"]: a for a in defs["assets"]}
    # one node for the topic: written by orders_to_kafka's sink, read by the hybrid's transform
    assert "kafka/shop.orders" in assets
    assert "kafka/shop.orders" in assets["orders_hybrid/priced"]["dependency_keys"]
    assert "clickhouse/default/orders_archive" in assets["orders_hybrid/priced"]["dependency_keys"]
    # define_inputs: false leaves the table undefined: Dagster adds a stub without a source or description
    assert "source" not in assets["clickhouse/default/orders_archive"]
    assert assets["kafka/shop.orders"]["source"] == "src/shop/defs/orders_to_kafka/defs.yaml:1"
    table = assets["postgres/default/shop/orders"]
    assert table["group_name"] == "shop"
    assert table["owners"] == [{"team": "data"}]
    assert {"key": "tier", "value": "gold"} in table["tags"]
    assert assets["kafka/shop.orders"]["group_name"] == "orders_to_kafka"  # the other component: defaults
    assert {j["name"] for j in defs["jobs"]} >= {
        "orders_hybrid__backfill",
        "orders_hybrid__stream",
        "orders_hybrid__backfill_then_stream",
        "orders_to_kafka__stream",
    }
    assert "orders_to_kafka__backfill" not in {j["name"] for j in defs["jobs"]}  # it has no bounded source
    assert [s["name"] for s in defs["schedules"]] == ["orders_hybrid__backfill_schedule"]
    assert {s["name"] for s in defs["sensors"]} >= {"orders_hybrid__stream_keeper", "orders_to_kafka__stream_keeper"}


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            "pipeline: orders_hybrid.yaml\npipline_typo: 1\n",
            "attributes.pipline_typo Additional properties are not allowed",
        ),
        ("pipeline: missing.yaml\n", "attribute 'pipeline' = 'missing.yaml': no such file"),
        (
            "pipeline: orders_hybrid.yaml\nbackfill_schedule: every day\n",
            "attribute 'backfill_schedule' = 'every day': 'every day' is not a cron expression",
        ),
        (
            "pipeline: order_totals.yaml\nbackfill_on_change: true\n",
            "attribute 'backfill_on_change' = True: order_totals.yaml cannot backfill",
        ),
    ],
)
def test_an_invalid_attribute_fails_dg_check_with_a_clear_message(
    tmp_path: Path, attributes: str, message: str
) -> None:
    root = project(tmp_path, {"orders": attributes})
    checked = dg(root, "check", "defs")
    assert checked.returncode != 0
    assert message in checked.stdout + checked.stderr, checked.stdout + checked.stderr


def test_asset_key_prefix_applies_to_every_key_and_edge(tmp_path: Path) -> None:
    root = project(tmp_path, {"orders": "pipeline: orders_hybrid.yaml\nasset_key_prefix: [acme, prod]\n"})
    shown = dg(root, "list", "defs", "--json")
    assert shown.returncode == 0, shown.stderr
    assets = {a["asset_key"]: a for a in json.loads(shown.stdout)["assets"]}
    assert set(assets) == {
        "acme/prod/clickhouse/default/orders_archive",
        "acme/prod/kafka/shop.orders",
        "acme/prod/orders_hybrid/priced",
        "acme/prod/postgres/default/shop/orders",
    }
    assert assets["acme/prod/postgres/default/shop/orders"]["dependency_keys"] == ["acme/prod/orders_hybrid/priced"]
