"""`on_error` / `dead_letter` validation on the Kafka source and the Postgres sink: exact messages, no Spark."""

from __future__ import annotations

import textwrap

import pytest

from streamling.topology.pipeline import load_pipeline


def errors(source_extra: str = "", sink_extra: str = "") -> list[str]:
    text = f"""
        sources:
          src: {{type: kafka, topic: events{source_extra}}}
        sinks:
          out: {{type: postgres, from: src, table: t, primary_key: id{sink_extra}}}
        """
    return load_pipeline(textwrap.dedent(text))[1].errors


def test_both_targets_are_accepted() -> None:
    assert errors(", on_error: dead_letter, dead_letter: {topic: events_dlq}") == []
    assert errors(sink_extra=", on_error: dead_letter, dead_letter: {table: streamling_dlq.events}") == []
    assert errors(", on_error: fail") == []


@pytest.mark.parametrize(
    ("source_extra", "sink_extra", "message"),
    [
        (
            ", on_error: dead_letter",
            "",
            "source 'src' (type 'kafka'): field 'dead_letter' ({topic: …} or {table: …}) is required with "
            "on_error: dead_letter",
        ),
        (
            "",
            ", dead_letter: {table: dlq}",
            "sink 'out' (type 'postgres'): field 'dead_letter' applies only with on_error: dead_letter",
        ),
        (
            ", on_error: skip",
            "",
            "source 'src' (type 'kafka'): field 'on_error': Input should be 'fail' or 'dead_letter' (got 'skip')",
        ),
        (
            ", on_error: dead_letter, dead_letter: {topic: a, table: b}",
            "",
            "source 'src' (type 'kafka'): field 'dead_letter': set exactly one of 'topic' (a Kafka topic) or "
            "'table' (a Postgres table) (got {'topic': 'a', 'table': 'b'})",
        ),
        (
            ", on_error: dead_letter, dead_letter: {}",
            "",
            "source 'src' (type 'kafka'): field 'dead_letter': set exactly one of 'topic' (a Kafka topic) or "
            "'table' (a Postgres table) (got {})",
        ),
        (
            ", on_error: dead_letter, dead_letter: {topic: 'bad topic!'}",
            "",
            "source 'src' (type 'kafka'): field 'dead_letter.topic': must be a Kafka topic name: 1 to 249 of the "
            "characters a-z A-Z 0-9 . _ - (got 'bad topic!')",
        ),
        (
            "",
            ", on_error: dead_letter, dead_letter: {table: a.b.c}",
            "sink 'out' (type 'postgres'): field 'dead_letter.table': must be 'table' or 'schema.table' (got 'a.b.c')",
        ),
        (
            "",
            f", on_error: dead_letter, dead_letter: {{table: s.{'x' * 64}}}",
            "sink 'out' (type 'postgres'): field 'dead_letter.table': must be at most 63 bytes (a Postgres "
            f"identifier) (got 's.{'x' * 64}')",
        ),
        (
            "",
            ", on_error: dead_letter, dead_letter: {table: t, partitions: 3}",
            "sink 'out' (type 'postgres'): unknown field 'dead_letter.partitions'",
        ),
    ],
)
def test_invalid_error_handling_names_node_and_field(source_extra: str, sink_extra: str, message: str) -> None:
    assert errors(source_extra, sink_extra) == [message]


def test_target_options_for_executors_keep_secrets_under_password_keys() -> None:
    """Spark redacts option values whose key contains `password`; the JSON blob must carry no secret."""
    from streamling.builtins.plugin import DEAD_LETTER_DESTINATIONS
    from streamling.config import load_settings
    from streamling.dead_letters import DeadLetterTarget
    from streamling.spec import DeadLetterSpec

    settings = load_settings(
        environ={
            "STREAMLING__KAFKA_SINK__SECURITY_PROTOCOL": "sasl_plaintext",
            "STREAMLING__KAFKA_SINK__SASL_PASSWORD": "kafka-s3cret",
            "STREAMLING__KAFKA_SINK__SCHEMA_REGISTRY_PASSWORD": "registry-s3cret",
            "STREAMLING__POSTGRES_SINK__PASS": "pg-s3cret",
        }
    )
    for spec in ({"topic": "dlq"}, {"table": "s.dead"}):
        target = DeadLetterTarget.of(DeadLetterSpec.model_validate(spec), settings, "src", "kafka source 'src'", None)
        options = target.to_options()
        assert "s3cret" not in options["dead_letter"] and "s3cret" not in repr(target)
        assert all("password" in k for k, v in options.items() if "s3cret" in v)
        assert DeadLetterTarget.from_options(options) == target
        assert type(target) in DEAD_LETTER_DESTINATIONS
