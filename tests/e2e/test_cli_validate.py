"""`streamling --validate` / `--dry-run` / a normal run of an invalid pipeline, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import run_cli, write


def unknown_sink(type_name: str) -> str:
    """The message for an unknown sink type, listing the sink types the CLI loads: the built-ins' entry point (this
    process's registry also holds types the tests register, which the CLI never sees)."""
    loaded = "blackhole, clickhouse, kafka, memory, postgres, postgres_aggregate, print, print_sink, webhook"
    return f"operator type '{type_name}' is not available; loaded sink types: {loaded}"


REPO = Path(__file__).resolve().parents[2]


def test_version_and_help(tmp_path: Path) -> None:
    version = run_cli(tmp_path, "--version")
    assert version.returncode == 0
    assert version.stdout.strip() == "streamling 0.1.0"
    helptext = run_cli(tmp_path, "--help")
    assert helptext.returncode == 0
    assert "--validate" in helptext.stdout and "--dry-run" in helptext.stdout and "--config" in helptext.stdout


def test_valid_pipeline_moves_no_data_and_touches_no_state(tmp_path: Path) -> None:
    result = run_cli(tmp_path, str(REPO / "pipelines" / "quickstart.yaml"), "--validate")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"success": True, "is_valid": True, "errors": [], "warnings": []}
    assert not (tmp_path / "state.db").exists()
    assert not (tmp_path / "checkpoints").exists()


def test_postgres_example_validates_without_a_database(tmp_path: Path) -> None:
    """The example's Postgres host does not exist: validation must not try to reach it."""
    unreachable = {"STREAMLING__POSTGRES_SINK__HOST": "postgres.invalid", "STREAMLING__POSTGRES_SINK__PASS": "s3cret"}
    result = run_cli(tmp_path, str(REPO / "pipelines" / "postgres_cdc.yaml"), "--validate", env=unreachable)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["is_valid"] is True
    assert "s3cret" not in result.stdout + result.stderr


def test_pipeline_location_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "sources: {a: {type: generator}}\nsinks: {b: {type: nope, from: a}}\n")
    result = run_cli(tmp_path, "--validate", env={"STREAMLING__PIPELINE_DEFINITION_LOCATION": str(path)})
    assert result.returncode == 2
    assert json.loads(result.stdout)["errors"] == [f"sink 'b': {unknown_sink('nope')}"]


def test_no_pipeline_given(tmp_path: Path) -> None:
    result = run_cli(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "Error: no pipeline given: pass PIPELINE_FILE or set STREAMLING__PIPELINE_DEFINITION_LOCATION"
    )


STRUCTURAL = [
    pytest.param(
        """
        sources:
          a: {type: generator}
          a2: {type: generator, rows: many}
        transforms:
          t: {type: sql, primary_key: id, sql: SELECT * FROM a UNION ALL SELECT * FROM raw.missing}
          u: {type: sql, sql: SELECT * FROM a}
        sinks:
          a: {type: print, from: t}
          p1: {type: kafka_sinkx, from: a}
          p2: {type: print, from: t, colour: red}
          p3: {type: print, from: nowhere}
          p4: {type: print, form: t}
          p5: {type: blackhole, from: p3}
        """,
        [
            "source 'a2' (type 'generator'): field 'rows': Input should be a valid integer, unable to parse string as an integer (got 'many')",
            "transform 'u' (type 'sql'): missing required field 'primary_key'",
            "sink 'a': the name 'a' is already used by source 'a'",
            f"sink 'p1': {unknown_sink('kafka_sinkx')}",
            "sink 'p2' (type 'print'): unknown field 'colour'",
            "sink 'p4' (type 'print'): missing required field 'from'",
            "sink 'p4' (type 'print'): unknown field 'form'",
            "transform 't': SQL references unknown node 'raw.missing'",
            "sink 'p3': 'from' references unknown node 'nowhere'",
            "sink 'p5': 'from' references sink 'p3'; only sources and transforms produce data",
        ],
        id="types-fields-references",
    ),
    pytest.param(
        """
        sources: {a: {type: generator}}
        transforms:
          t1: {type: sql, primary_key: id, sql: SELECT * FROM t2}
          t2: {type: sql, primary_key: id, sql: SELECT * FROM t1 UNION ALL SELECT * FROM a}
        sinks: {p: {type: print, from: t2}}
        """,
        ["pipeline has a cycle: t1 -> t2 -> t1"],
        id="cycle",
    ),
    pytest.param(
        """
        sources: {a: {type: generator}, b: {type: generator}}
        transforms: {t: {type: sql, primary_key: id, sql: SELECT id FROM a}}
        sinks: {p: {type: print, from: a}}
        """,
        ["Source(s) and/or transform(s) have no consumers: b, t. Remove them or connect them to a transform or sink."],
        id="orphans",
    ),
    pytest.param(
        """
        sources:
          a:
            type: generator
            telemetry:
              labels: {id: x, operator_type: x, topology_node_type: x, service_instance_id: x, __y: z,
                       9lives: x, team-name: x, ok: "a\\tb"}
          b:
            type: generator
            telemetry:
              labels: {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v, k9: v, k10: v,
                       k11: v, k12: v, k13: v, k14: v, k15: v, k16: v, k17: v, k18: v, k19: v, k20: v}
        sinks:
          p:
            type: print
            from: a
            telemetry: {labels: {long: "LONG", ctl: "a\\nb"}}
          q: {type: blackhole, from: b}
        """.replace("LONG", "x" * 257),
        [
            "source 'a': telemetry label 'id' is reserved",
            "source 'a': telemetry label 'operator_type' is reserved",
            "source 'a': telemetry label 'topology_node_type' is reserved",
            "source 'a': telemetry label 'service_instance_id' is reserved",
            "source 'a': telemetry label '__y' must not start with '__'",
            "source 'a': telemetry label '9lives' must match ^[a-zA-Z_][a-zA-Z0-9_]*$",
            "source 'a': telemetry label 'team-name' must match ^[a-zA-Z_][a-zA-Z0-9_]*$",
            "source 'b': telemetry.labels has 21 labels; at most 20 are allowed",
            "sink 'p': telemetry label 'long' value is longer than 256 bytes",
            "sink 'p': telemetry label 'ctl' value contains a control character",
        ],
        id="telemetry-labels",
    ),
]


@pytest.mark.parametrize(("text", "expected"), STRUCTURAL)
def test_structural_errors_via_validate_json_and_run(tmp_path: Path, text: str, expected: list[str]) -> None:
    assert_invalid_both_ways(tmp_path, write(tmp_path, text), expected)


def assert_invalid_both_ways(tmp_path: Path, path: Path, expected: list[str], env: dict | None = None) -> None:
    """The same errors, exactly, from --validate's JSON and from a normal run; nothing runs."""
    validated = run_cli(tmp_path, str(path), "--validate", env=env)
    assert validated.returncode == 2, validated.stderr
    assert json.loads(validated.stdout) == {
        "success": True,
        "is_valid": False,
        "errors": expected,
        "warnings": [],
    }
    ran = run_cli(tmp_path, str(path), env=env)
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert f"Error: pipeline '{path}' is invalid:\n" + "".join(f"  - {e}\n" for e in expected) in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "state.db").exists()


def test_job_mode_rejects_unbounded_sources_via_validate_json_and_run(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources: {live: {type: generator}, done: {type: generator, rows: 3}, also_live: {type: generator}}
        transforms: {t: {type: sql, primary_key: id, sql: SELECT * FROM live UNION ALL SELECT * FROM done}}
        sinks: {p: {type: print, from: t}, q: {type: blackhole, from: also_live}}
        """,
    )
    message = "job mode needs bounded sources, but these sources are unbounded: live, also_live"
    assert_invalid_both_ways(tmp_path, path, [message], env={"STREAMLING__JOB_MODE": "true"})


def test_schema_errors_via_validate_json_and_run(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          raw.tx: {type: generator, rows: 10, primary_key: id}
        transforms:
          totals:
            type: sql
            primary_key: name
            sql: SELECT name, sum(amount) AS total FROM raw.tx GROUP BY name
          slim:
            type: sql
            primary_key: account_id
            sql: SELECT id, amount FROM raw.tx
        sinks:
          a: {type: print, from: totals}
          b: {type: print, from: slim}
        """,
    )
    expected = [
        "SQL transform 'totals': aggregation (GROUP BY or an aggregate function) is not allowed; SQL transforms "
        "accept only stateless operations (projection, filter, union, unnest)",
        "Primary key validation failed for node 'slim': columns [\"account_id\"] not found in schema. "
        'Available columns: ["id", "amount", "_gs_op"]',
    ]
    assert_invalid_both_ways(tmp_path, path, expected)


def test_json_pipeline_file(tmp_path: Path) -> None:
    pipeline = {
        "sources": {"a": {"type": "generator", "rows": 1}},
        "sinks": {"b": {"type": "printer", "from": "a"}},
    }
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(pipeline))
    result = run_cli(tmp_path, str(path), "--validate")
    assert json.loads(result.stdout)["errors"] == [f"sink 'b': {unknown_sink('printer')}"]


def test_dry_run_reports_without_json(tmp_path: Path) -> None:
    path = write(tmp_path, "sources: {a: {type: generator}}\nsinks: {b: {type: nope, from: a}}\n")
    result = run_cli(tmp_path, str(path), "--dry-run")
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"Error: sink 'b': {unknown_sink('nope')}" in result.stderr


def test_bad_config_value_fails_startup_naming_field_and_value(tmp_path: Path) -> None:
    path = REPO / "pipelines" / "quickstart.yaml"
    env = {"STREAMLING__CHECKPOINT_INTERVAL_SEC": "soon"}
    message = (
        "invalid configuration: checkpoint_interval_sec = 'soon' (from STREAMLING__CHECKPOINT_INTERVAL_SEC): "
        "invalid duration 'soon': use a number or a value like '500ms', '5s', '2m'"
    )
    ran = run_cli(tmp_path, str(path), env=env)
    assert ran.returncode == 2
    assert ran.stderr.strip() == f"Error: {message}"
    validated = run_cli(tmp_path, str(path), "--validate", env=env)
    assert json.loads(validated.stdout)["errors"] == [message]


def test_config_file_flag(tmp_path: Path) -> None:
    (tmp_path / "prod.yaml").write_text("job_mode: true\n")
    path = write(tmp_path, "sources: {live: {type: generator}}\nsinks: {p: {type: print, from: live}}\n")
    result = run_cli(tmp_path, str(path), "--validate", "--config", "prod")
    assert json.loads(result.stdout)["errors"] == [
        "job mode needs bounded sources, but these sources are unbounded: live"
    ]


def test_validate_reports_a_primary_key_taken_from_the_avro_doc(tmp_path: Path, kafka) -> None:
    """A Kafka Avro source without `primary_key` feeding a Postgres sink: valid, with the key from the
    registered record's doc named under `warnings`."""
    topic = kafka.topic("doc_key", partitions=1)
    kafka.register(
        topic,
        {
            "type": "record",
            "name": "Row",
            "doc": '{"primaryKeys": ["id"]}',
            "fields": [{"name": "id", "type": "long"}, {"name": "v", "type": "string"}],
        },
    )
    path = write(
        tmp_path,
        f"""
        sources: {{src: {{type: kafka, topic: {topic}}}}}
        sinks: {{out: {{type: postgres, from: src, table: rows}}}}
        """,
    )
    result = run_cli(tmp_path, str(path), "--validate", env=kafka.env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "success": True,
        "is_valid": True,
        "errors": [],
        "warnings": [
            f"kafka source 'src': no primary_key given; using [\"id\"] declared in the doc of the Avro schema of "
            f"subject '{topic}-value'"
        ],
    }
