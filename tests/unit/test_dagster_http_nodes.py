"""What the Dagster control plane shows of HTTP nodes: no credentials in asset metadata or descriptions."""

from __future__ import annotations

import textwrap
from pathlib import Path

from streamling.topology.pipeline import load_pipeline
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.translator import node_targets as _targets

TEXT = textwrap.dedent("""
    sources:
      src: {type: generator}
    transforms:
      enrich:
        type: handler
        from: src
        primary_key: id
        url: https://svc:pw@enrich.example.com/v1?api_key=k123
        headers: {X-Api-Key: k456, Accept: application/json}
        secret_name: partner
    sinks:
      notify: {type: webhook, from: enrich, url: "https://hooks.example.com/h?sig=k789"}
    """)


def test_http_nodes_show_no_credentials() -> None:
    pipeline, report = load_pipeline(TEXT)
    assert report.errors == []
    pf = PipelineFile(name="p", path=Path("p.yaml"), text=TEXT, pipeline=pipeline)
    enrich, notify = pipeline.nodes["enrich"], pipeline.nodes["notify"]
    assert _targets(enrich) == {"type": "handler", "url": "https://***@enrich.example.com/v1?api_key=***"}
    assert _targets(notify) == {"type": "webhook", "url": "https://hooks.example.com/h?sig=***"}
    shown = pf.node_yaml(enrich) + pf.node_yaml(notify)
    for secret in ("pw", "k123", "k456", "k789"):
        assert secret not in shown
    assert "Accept: application/json" in shown
