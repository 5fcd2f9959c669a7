"""Records the broker deleted (retention, `DeleteRecords`) before the source read them: a clear error naming the
topic, partition and how many, or with ``on_data_loss: skip`` one WARNING and the `records_lost` metric. The real
broker deletes them (`AdminClient.delete_records` moves the partition's earliest offset, as retention does)."""

from __future__ import annotations

import logging
import uuid

import pytest
from confluent_kafka import TopicPartition

from streamling import run_pipeline
from streamling.errors import StreamlingError
from streamling.state.sqlite import SqliteStateBackend
from tests.integration.collect_sink import COLLECTED
from tests.otlp_receiver import OtlpReceiver

SCHEMA = {"type": "record", "name": "Tx", "fields": [{"name": "id", "type": "long"}]}


def test_a_retention_gap_fails_naming_what_was_lost_unless_skipped(
    spark, make_settings, write_pipeline, kafka, tmp_path, caplog
) -> None:
    topic = kafka.topic("gap", partitions=2)
    kafka.produce_avro(topic, SCHEMA, [{"id": i} for i in range(10)], partition_of=lambda i: 0)
    key = uuid.uuid4().hex
    text = f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest LOSS}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """
    receiver = OtlpReceiver("http/protobuf").start()
    settings = make_settings(
        environ=kafka.env,
        job_mode=True,
        **{
            "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
            "open_telemetry_metrics.batch_interval_secs": 0.3,
        },
    )
    try:
        run_pipeline(write_pipeline(text.replace("LOSS", "")), settings, spark)
        assert sorted(r["id"] for _, r in COLLECTED.pop(key)) == list(range(10))
        kafka.produce_avro(topic, SCHEMA, [{"id": i} for i in range(10, 20)], partition_of=lambda i: 0)
        for deleted in kafka.admin.delete_records([TopicPartition(topic, 0, 15)]).values():
            deleted.result(timeout=30)

        with pytest.raises(StreamlingError) as failed:
            run_pipeline(write_pipeline(text.replace("LOSS", "")), settings, spark)
        assert failed.value.message == (
            f"kafka source 'src': topic '{topic}' partition 0: 5 records (offsets 10 to 14) were deleted by the broker "
            "before they were read; its earliest offset is now 15. Set on_data_loss: skip to go on from there"
        )
        assert not failed.value.retriable
        assert COLLECTED.pop(key, []) == []
        with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
            assert state.get(f"src:{topic}:0")["offset"] == 10  # nothing committed past the gap

        caplog.set_level(logging.WARNING, logger="streamling.kafka")
        run_pipeline(write_pipeline(text.replace("LOSS", ", on_data_loss: skip")), settings, spark)
    finally:
        receiver.stop()
    assert sorted(r["id"] for _, r in COLLECTED.pop(key)) == list(range(15, 20))
    lost = [r.getMessage() for r in caplog.records if "deleted by the broker" in r.getMessage()]
    assert lost == [
        f"kafka source 'src': topic '{topic}' partition 0: 5 records (offsets 10 to 14) were deleted by the broker "
        "before they were read; on_data_loss: skip goes on from offset 15"
    ]
    point = receiver.latest("records_lost_total", "src")
    assert point is not None and point.value == 5
