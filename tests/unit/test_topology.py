"""Structural validation: every message asserted exactly. These checks need no Spark."""

from __future__ import annotations

import textwrap

import pytest

from streamling.topology.pipeline import load_pipeline

GEN = "{type: generator, rows: 10}"


def errors(text: str, job_mode: bool = False) -> list[str]:
    pipeline, report = load_pipeline(textwrap.dedent(text), job_mode=job_mode)
    assert (pipeline is None) == (not report.is_valid)
    return report.errors


def test_valid_pipeline_with_dotted_names_and_empty_transforms() -> None:
    pipeline, report = load_pipeline(
        textwrap.dedent(f"""
        sources:
          raw.transactions: {GEN}
        transforms: {{}}
        sinks:
          out.print: {{type: print, from: raw.transactions}}
        """)
    )
    assert report.errors == []
    assert pipeline is not None
    assert pipeline.downstream("raw.transactions") == ["out.print"]


def test_unknown_operator_type_lists_the_loaded_ones() -> None:
    from streamling.plugins.registry import REGISTRY

    found = errors(f"""
        sources:
          a: {GEN}
        sinks:
          b: {{type: acme.partner_sink, from: a}}
        """)
    assert found == [
        f"sink 'b': operator type 'acme.partner_sink' is not available; loaded sink types: "
        f"{', '.join(REGISTRY.types('sink'))} (no plugin with namespace 'acme' is loaded: set STREAMLING__PLUGIN__PATH "
        "or install a package with a 'streamling.plugins' entry point)"
    ]
    listed = found[0].split("loaded sink types: ")[1].split(" (")[0].split(", ")
    assert {
        "blackhole",
        "clickhouse",
        "kafka",
        "postgres",
        "postgres_aggregate",
        "print",
        "print_sink",
        "webhook",
    } <= set(listed)


def test_unknown_field_on_builtin_type() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        sinks:
          b: {{type: print, from: a, colour: red}}
        """) == ["sink 'b' (type 'print'): unknown field 'colour'"]


def test_missing_required_field() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          t: {{type: sql, sql: SELECT * FROM a}}
        sinks:
          b: {{type: print, from: t}}
        """) == ["transform 't' (type 'sql'): missing required field 'primary_key'"]


def test_invalid_field_value() -> None:
    assert errors("""
        sources:
          a: {type: generator, rows: -5}
        sinks:
          b: {type: print, from: a}
        """) == ["source 'a' (type 'generator'): field 'rows': Input should be greater than or equal to 0 (got -5)"]


def test_from_references_unknown_node() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        sinks:
          b: {{type: print, from: a}}
          c: {{type: print, from: nowhere}}
        """) == ["sink 'c': 'from' references unknown node 'nowhere'"]


def test_sql_from_references_unknown_node() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          t: {{type: sql, primary_key: id, sql: "SELECT * FROM a UNION ALL SELECT * FROM raw.missing"}}
        sinks:
          b: {{type: print, from: t}}
        """) == ["transform 't': SQL references unknown node 'raw.missing'"]


def test_from_may_not_name_a_sink() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        sinks:
          b: {{type: print, from: a}}
          c: {{type: print, from: b}}
        """) == ["sink 'c': 'from' references sink 'b'; only sources and transforms produce data"]


def test_cycle_is_reported_with_its_path() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          t1: {{type: sql, primary_key: id, sql: "SELECT * FROM a UNION ALL SELECT * FROM t2"}}
          t2: {{type: sql, primary_key: id, sql: "SELECT * FROM t1"}}
        sinks:
          b: {{type: print, from: t2}}
        """) == ["pipeline has a cycle: t1 -> t2 -> t1"]


def test_orphans_are_listed() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
          unused_source: {GEN}
        transforms:
          t: {{type: sql, primary_key: id, sql: SELECT * FROM a}}
          dangling: {{type: sql, primary_key: id, sql: SELECT * FROM a}}
        sinks:
          b: {{type: print, from: t}}
        """) == [
        "Source(s) and/or transform(s) have no consumers: unused_source, dangling. "
        "Remove them or connect them to a transform or sink."
    ]


def test_duplicate_node_names_across_sections() -> None:
    assert (
        errors(f"""
        sources:
          a: {GEN}
        sinks:
          a: {{type: print, from: a}}
        """)[0]
        == "sink 'a': the name 'a' is already used by source 'a'"
    )


def test_missing_sections_and_unknown_top_level_key() -> None:
    assert errors("""
        source:
          a: {type: generator}
        """) == [
        "unknown top-level key 'source'; expected sources, transforms, sinks",
        "pipeline must define at least one source",
        "pipeline must define at least one sink",
    ]


def test_invalid_yaml_names_line() -> None:
    assert errors("sources: [unclosed\n") == [
        "pipeline is not valid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"
    ]


def _labelled(labels: str, node: str = "{type: generator, rows: 1") -> str:
    return f"""
        sources:
          a: {node}, telemetry: {{labels: {labels}}}}}
        sinks:
          b: {{type: print, from: a}}
        """


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("{id: x}", "source 'a': telemetry label 'id' is reserved"),
        ("{topology_node_type: x}", "source 'a': telemetry label 'topology_node_type' is reserved"),
        ("{operator_type: x}", "source 'a': telemetry label 'operator_type' is reserved"),
        ("{service_instance_id: x}", "source 'a': telemetry label 'service_instance_id' is reserved"),
        ("{__meta: x}", "source 'a': telemetry label '__meta' must not start with '__'"),
        ("{'9lives': x}", "source 'a': telemetry label '9lives' must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
        ("{'team-name': x}", "source 'a': telemetry label 'team-name' must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
        ("{team: '" + "x" * 257 + "'}", "source 'a': telemetry label 'team' value is longer than 256 bytes"),
        ('{team: "a\\nb"}', "source 'a': telemetry label 'team' value contains a control character"),
        ('{team: "a\\u0000b"}', "source 'a': telemetry label 'team' value contains a control character"),
    ],
)
def test_telemetry_label_rules(labels: str, message: str) -> None:
    assert errors(_labelled(labels)) == [message]


def test_label_value_may_contain_tab_and_256_bytes() -> None:
    assert errors(_labelled('{team: "a\\tb", tier: "' + "é" * 128 + '"}')) == []


def test_at_most_twenty_labels() -> None:
    labels = "{" + ", ".join(f"k{i}: v" for i in range(21)) + "}"
    assert errors(_labelled(labels)) == ["source 'a': telemetry.labels has 21 labels; at most 20 are allowed"]
    twenty = "{" + ", ".join(f"k{i}: v" for i in range(20)) + "}"
    assert errors(_labelled(twenty)) == []


def test_per_kind_identity_label_is_reserved_for_plugins() -> None:
    from streamling.plugins.registry import REGISTRY

    assert REGISTRY.lookup("source", "generator") is not None
    # A print sink has no identity key, so 'url' or 'topic' are free for it.
    assert (
        errors(f"""
        sources:
          a: {GEN}
        sinks:
          b: {{type: print, from: a, telemetry: {{labels: {{topic: t, url: u}}}}}}
        """)
        == []
    )


def test_job_mode_rejects_unbounded_sources_by_name() -> None:
    text = """
        sources:
          bounded: {type: generator, rows: 5}
          live_a: {type: generator}
          live_b: {type: generator, rows_per_second: 10}
        transforms:
          t: {type: sql, primary_key: id, sql: "SELECT * FROM bounded UNION ALL SELECT * FROM live_a"}
        sinks:
          b: {type: print, from: t}
          c: {type: blackhole, from: live_b}
        """
    assert errors(text) == []
    assert errors(text, job_mode=True) == [
        "job mode needs bounded sources, but these sources are unbounded: live_a, live_b"
    ]


def test_primary_key_accepts_comma_list_and_list() -> None:
    pipeline, _ = load_pipeline(
        textwrap.dedent(f"""
        sources:
          a: {GEN}
        transforms:
          t: {{type: sql, primary_key: "id, name", sql: SELECT * FROM a}}
          u: {{type: sql, primary_key: [id, name], sql: SELECT * FROM t}}
        sinks:
          b: {{type: print, from: u}}
        """)
    )
    assert pipeline is not None
    assert pipeline.nodes["t"].spec.primary_key_columns() == ["id", "name"]
    assert pipeline.nodes["u"].spec.primary_key_columns() == ["id", "name"]


def test_orchestration_block_is_accepted_and_ignored_by_the_engine() -> None:
    from streamling.topology.pipeline import load_pipeline

    text = """
sources: {a: {type: generator, rows: 5}}
sinks: {b: {type: blackhole, from: a}}
orchestration: {backfill_schedule: "0 3 * * *"}
"""
    pipeline, report = load_pipeline(text)
    assert report.errors == [] and pipeline is not None
    assert set(pipeline.nodes) == {"a", "b"}
