"""The Kafka fields kept from the original: `schema_id_overrides`, `message_max_bytes`, `deduplicate` and the
setting `kafka_source.lag_report_interval_ms` — how they validate and what they configure (no broker)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from streamling.config import load_settings
from streamling.errors import StreamlingError
from streamling.kafka.lag import LagReporter
from streamling.kafka.sink import KafkaSink, KafkaSinkSpec
from streamling.topology.pipeline import load_pipeline


def errors(text: str) -> list[str]:
    return load_pipeline(textwrap.dedent(text))[1].errors


def source(fields: str) -> str:
    return f"""
        sources:
          src: {{type: kafka, topic: t, {fields}}}
        sinks:
          out: {{type: print, from: src}}
        """


def test_schema_id_overrides_parse_as_from_to_pairs() -> None:
    pipeline, report = load_pipeline(
        textwrap.dedent(source("schema_id_overrides: [{from: 5, to: 7}, {from: 6, to: 7}]"))
    )
    assert report.errors == []
    assert pipeline is not None
    assert pipeline.nodes["src"].spec.overrides() == {5: 7, 6: 7}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            "schema_id_overrides: [{from: 5, to: 7}, {from: 5, to: 8}]",
            "field 'schema_id_overrides': schema id 5 is overridden twice",
        ),
        ("schema_id_overrides: [{from: 5}]", "missing required field 'schema_id_overrides.0.to'"),
        (
            "schema_id_overrides: [{from: 0, to: 1}]",
            "field 'schema_id_overrides.0.from': Input should be greater than 0",
        ),
        (
            "schema_id_overrides: [{from: 1, to: 2, via: 3}]",
            "unknown field 'schema_id_overrides.0.via'",
        ),
        (
            "data_format: json, schema: {id: bigint}, schema_id_overrides: [{from: 1, to: 2}]",
            "field 'schema_id_overrides' applies only to data_format 'avro'",
        ),
    ],
)
def test_bad_schema_id_overrides_are_named(fields: str, message: str) -> None:
    (error,) = errors(source(fields))
    assert error.startswith("source 'src' (type 'kafka'): ")
    assert message in error


def sink_spec(**fields: object) -> KafkaSinkSpec:
    return KafkaSinkSpec.model_validate({"type": "kafka", "from": "src", "topic": "out", **fields})


def test_message_max_bytes_sets_the_producer_limit_and_deduplicate_defaults_on(tmp_path: Path) -> None:
    settings = load_settings(config=str(tmp_path / "x"), environ={})
    sink = KafkaSink("out", sink_spec(message_max_bytes=2_000_000), settings)
    assert sink.producer_config()["message.max.bytes"] == 2_000_000
    default = KafkaSink("out", sink_spec(), settings)
    assert "message.max.bytes" not in default.producer_config()  # librdkafka's own default (1000000)
    assert default.spec.deduplicate is True
    assert sink_spec(deduplicate=False).deduplicate is False


@pytest.mark.parametrize("value", [999, 1_000_000_001])
def test_message_max_bytes_outside_what_the_producer_accepts_is_rejected(value: int) -> None:
    (error,) = errors(f"""
        sources:
          src: {{type: generator, rows: 1}}
        sinks:
          out: {{type: kafka, from: src, topic: out, primary_key: id, message_max_bytes: {value}}}
        """)
    assert error.startswith("sink 'out' (type 'kafka'): field 'message_max_bytes': Input should be")


def test_lag_report_interval_setting(tmp_path: Path) -> None:
    assert load_settings(config=str(tmp_path / "x"), environ={}).kafka_source.lag_report_interval_ms == 30_000
    env = {"STREAMLING__KAFKA_SOURCE__LAG_REPORT_INTERVAL_MS": "5s"}
    assert load_settings(config=str(tmp_path / "x"), environ=env).kafka_source.lag_report_interval_ms == 5000
    with pytest.raises(StreamlingError, match=r"kafka_source\.lag_report_interval_ms = '-1'"):
        load_settings(config=str(tmp_path / "x"), environ={"STREAMLING__KAFKA_SOURCE__LAG_REPORT_INTERVAL_MS": "-1"})


def test_lag_report_is_high_watermark_minus_committed_offset(caplog) -> None:
    """A stand-in consumer (only the two watermark numbers the broker would give): the arithmetic and the line."""

    class Watermarks:
        def get_watermark_offsets(self, tp, timeout: float, cached: bool) -> tuple[int, int]:
            return (0, {0: 120, 1: 40}[tp.partition])

        def close(self) -> None:
            pass

    committed: dict[str, int] | None = None
    reporter = LagReporter("kafka source 'src'", "t", 0, lambda: committed, Watermarks)
    assert reporter.report() is None  # no position yet
    committed = {"1": 40, "0": 100}
    caplog.set_level("INFO", logger="streamling.kafka")
    assert reporter.report() == {0: 20, 1: 0}
    assert caplog.messages == [
        "kafka source 'src' lag on topic 't': 20 records after the committed offsets (partition 0: 20, partition 1: 0)"
    ]
    reporter.stop()
