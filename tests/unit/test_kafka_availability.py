"""Which failures are waited out, how an outage is logged, and librdkafka's repeated lines (no service needed)."""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.schema_registry import SchemaRegistryError

from streamling.errors import StreamlingError, embedded_error
from streamling.kafka.availability import Outage, is_unavailable, wait_out
from streamling.kafka.clients import kafka_config


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), True),
        (KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)), True),
        (KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)), True),
        (KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), False),
        (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), False),
        (SchemaRegistryError(503, 50301, "unavailable"), True),
        (SchemaRegistryError(404, 40403, "Schema not found"), False),
        (httpx.ConnectError("[Errno 111] Connection refused"), True),
        (StreamlingError.unavailable("cannot read metadata"), True),
        (StreamlingError.retry("topic 't' is not available: not found"), False),
        (ValueError("bad"), False),
    ],
)
def test_only_unreachable_services_are_waited_for(exc: BaseException, expected: bool) -> None:
    assert is_unavailable(exc) is expected


def test_an_outage_logs_once_when_it_starts_and_once_when_it_ends(caplog) -> None:
    outage = Outage("kafka source 'src'", "broker", timeout_sec=300)
    with caplog.at_level(logging.INFO, logger="streamling.kafka"):
        assert outage.failed("Local: Broker transport failure")
        assert outage.failed("Local: Broker transport failure")
        assert outage.ongoing
        outage.recovered()
        outage.recovered()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0] == (
        "kafka source 'src': broker unreachable (Local: Broker transport failure), waiting up to 300 s"
    )
    assert messages[1].startswith("kafka source 'src': broker reachable again after ")
    assert not outage.ongoing


def test_wait_out_gives_up_after_the_patience_with_the_original_error() -> None:
    attempts = []

    def attempt() -> None:
        attempts.append(1)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    with pytest.raises(KafkaException):
        wait_out(attempt, Outage("kafka sink 'out'", "broker", timeout_sec=0.0))
    assert len(attempts) == 2  # the first failure starts the outage; the next one finds the patience used up


def test_wait_out_raises_other_errors_at_once() -> None:
    attempts = []

    def attempt() -> None:
        attempts.append(1)
        raise SchemaRegistryError(404, 40401, "Subject not found")

    with pytest.raises(SchemaRegistryError):
        wait_out(attempt, Outage("kafka source 'src'", "Schema Registry", timeout_sec=300))
    assert len(attempts) == 1


def test_unavailable_errors_stay_retriable_across_a_spark_task() -> None:
    text = "Traceback ...\nstreamling.errors.StreamlingUnavailableError: kafka source 'src': broker unreachable\n"
    recovered = embedded_error(RuntimeError(text))
    assert recovered is not None and recovered.retriable and not recovered.user_facing
    assert recovered.message == "kafka source 'src': broker unreachable"


def test_librdkafka_repeats_are_dropped_from_the_log(caplog) -> None:
    logger = kafka_config({"kafka_brokers": "b:1"})["logger"]
    client = f"rdkafka#consumer-{uuid.uuid4().hex}"  # a line of its own, whatever this process logged before
    with caplog.at_level(logging.INFO, logger=logger.name):
        for attempt in range(5):
            logger.error("FAIL [%s]: Connect to ipv4#127.0.0.1:9 failed (after %dms)", client, attempt)
        logger.error("FAIL [%s]: SASL authentication failed", client)
    assert [r.getMessage() for r in caplog.records] == [
        f"FAIL [{client}]: Connect to ipv4#127.0.0.1:9 failed (after 0ms)",
        f"FAIL [{client}]: SASL authentication failed",
    ]
