"""Print sink line format and sampling across batches."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

from streamling.builtins.print_sink import PrintOptions, PrintSink
from streamling.config import load_settings
from streamling.plugin import ArrowSink, Context, Epoch
from streamling.topology.pipeline import load_pipeline


def sink(sample_every: int | None = None, global_every: int = 1) -> PrintSink:
    """Built as a plugin's sink is tested: plain Python, its options and a driver context with the settings."""
    settings = load_settings(
        config="/nonexistent/x", environ={"STREAMLING__PRINT_SINK__SAMPLE_EVERY": str(global_every)}
    )
    return PrintSink(PrintOptions(sample_every=sample_every), Context("p", "print", settings=settings))


EPOCH = Epoch("s", 1, {}, {})


def test_every_row_with_kind_and_json(capsys) -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"id": 1, "price": Decimal("1.50"), "_gs_op": "i"},
            {"id": 2, "price": None, "_gs_op": "u"},
            {"id": 3, "price": Decimal("0"), "_gs_op": "d"},
        ]
    )
    sink().write(batch, EPOCH)
    assert capsys.readouterr().out.splitlines() == [
        '1 -> (sample_every=1) [Insert] {"id": 1, "price": "1.50", "_gs_op": "i"}',
        '2 -> (sample_every=1) [Update] {"id": 2, "price": null, "_gs_op": "u"}',
        '3 -> (sample_every=1) [Delete] {"id": 3, "price": "0.00", "_gs_op": "d"}',
    ]


def test_sampling_continues_across_batches(capsys) -> None:
    s = sink(sample_every=3)
    for lo in (0, 4, 5):  # batches of 4, 1 and 5 rows: ids 1..10
        hi = {0: 4, 4: 5, 5: 10}[lo]
        s.write(pa.RecordBatch.from_pylist([{"id": i + 1, "_gs_op": "i"} for i in range(lo, hi)]), EPOCH)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["1", "4", "7", "10"]
    assert lines[1] == '4 -> (sample_every=3) [Insert] {"id": 4, "_gs_op": "i"}'


def test_global_sample_every_applies_when_sink_sets_none(capsys) -> None:
    s = sink(global_every=2)
    s.write(pa.RecordBatch.from_pylist([{"id": i, "_gs_op": "i"} for i in range(5)]), EPOCH)
    assert len(capsys.readouterr().out.splitlines()) == 3


ORIGINAL_PRINT_SINK = """
sources:
  src: {type: generator, rows: 5, primary_key: id}
sinks:
  print.src:
    from: src
    type: print_sink
    options:
      mode: %s
"""


def test_print_sink_is_the_original_plugin_examples_name_for_print() -> None:
    pipeline, report = load_pipeline(ORIGINAL_PRINT_SINK % "batch")
    assert report.errors == []
    node = pipeline.nodes["print.src"]
    assert issubclass(node.optype.operator.cls, PrintSink) and node.spec.options.mode == "batch"


def test_the_print_sink_is_the_built_in_written_on_the_arrow_level() -> None:
    """docs/writing-a-plugin.md points plugin authors at it as the living example of that tier."""
    pipeline, report = load_pipeline("sources: {src: {type: generator}}\nsinks: {out: {type: print, from: src}}")
    assert report.errors == []
    assert issubclass(pipeline.nodes["out"].optype.operator.cls, ArrowSink)


def test_print_sink_mode_other_than_batch_is_named_with_its_value() -> None:
    _, report = load_pipeline(ORIGINAL_PRINT_SINK % "row")
    assert report.errors == [
        "sink 'print.src' (type 'print_sink'): field 'options.mode': Input should be 'batch' (got 'row')"
    ]


def test_the_control_plane_shows_a_print_node_as_written_when_it_sets_no_field() -> None:
    """An Arrow-level node's spec holds its options; all defaults, they are not shown as an empty map."""
    from pathlib import Path

    from streamling_dagster.pipelines import PipelineFile

    text = "sources: {src: {type: generator}}\nsinks: {out: {type: print, from: src}}\n"
    pipeline, _ = load_pipeline(text)
    pf = PipelineFile(name="p", path=Path("p.yaml"), text=text, pipeline=pipeline)
    assert pf.node_yaml(pipeline.nodes["out"]) == "out:\n  type: print\n  from: src\n"


def test_the_control_plane_sees_the_print_nodes_as_before_they_moved_to_the_arrow_level(make_settings) -> None:
    """The backfill sensor digests each node's dumped spec, and the asset metadata and the admin API show it: a
    print node dumps its fields at the top level (``print_sink``'s ``mode`` under ``options``), as its spec did
    when it was a Spark-level operator, so moving it changed no digest and triggered no reprocessing."""
    from streamling import load_pipeline

    text = """
sources:
  s: {type: generator, rows: 10, primary_key: id}
sinks:
  out: {type: print, from: s, sample_every: 5}
  old: {type: print_sink, from: s}
"""
    pipeline, report = load_pipeline(text, job_mode=True, settings=make_settings())
    assert pipeline is not None, report.errors
    common = {"batch_flush_interval": None, "batch_size": None, "from": "s", "num_records_before_stop": None}
    common |= {"parallelism": None, "primary_key": None, "telemetry": None}
    assert pipeline.nodes["out"].spec.model_dump(mode="json", by_alias=True) == {
        **common,
        "sample_every": 5,
        "type": "print",
    }
    assert pipeline.nodes["old"].spec.model_dump(mode="json", by_alias=True) == {
        **common,
        "options": {"mode": "batch"},
        "sample_every": None,
        "type": "print_sink",
    }
    # in the order it had (the asset description and the admin API show the dump as it comes)
    order = ["type", "telemetry", "primary_key", "from", "sample_every", "num_records_before_stop", "parallelism"]
    order += ["batch_size", "batch_flush_interval"]
    assert list(pipeline.nodes["out"].spec.model_dump(mode="json", by_alias=True)) == order
    assert list(pipeline.nodes["old"].spec.model_dump(mode="json", by_alias=True)) == [*order, "options"]
    # and the labels they may take: a node with an options block identifies itself by its type, as before
    assert (pipeline.nodes["out"].identity_keys, pipeline.nodes["old"].identity_keys) == ((), ("type",))
