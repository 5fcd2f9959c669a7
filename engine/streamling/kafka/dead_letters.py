"""Dead letters on a Kafka topic (``kafka_sink`` connection): produced and flushed before the epoch that skipped
them commits; a replay produces them again (at-least-once). See `streamling.dead_letters`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from streamling.errors import StreamlingError
from streamling.kafka.availability import produce_when_room
from streamling.kafka.clients import connection_options, ensure_topic, kafka_config, producer

if TYPE_CHECKING:
    from streamling.config.model import Settings
    from streamling.dead_letters import DeadLetter, DeadLetterTarget

FLUSH_TIMEOUT_SEC = 60.0
TOPIC_PARTITIONS = 1


def producer_options(settings: Settings) -> dict[str, str]:
    """The ``kafka_sink`` connection without the registry's: dead letters are raw bytes, never registered."""
    return {k: v for k, v in connection_options(settings.kafka_sink).items() if k.startswith("kafka_")}


def prepare_topic(target: DeadLetterTarget) -> None:
    assert target.topic is not None
    ensure_topic(target.kafka, target.topic, TOPIC_PARTITIONS, target.label)


def produce(target: DeadLetterTarget, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
    config = kafka_config(target.kafka, **{"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    config.pop("logger", None)  # executors log through their own stderr
    out = producer(config)
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None and len(failures) < 5:
            failures.append(err.str())

    for letter in letters:
        headers = [*letter.headers, *target.headers(letter, failed_at)]
        key = letter.key if letter.topic is not None else (letter.primary_key or "").encode()
        value = letter.value if letter.topic is not None else (letter.row or "").encode()
        produce_when_room(out, target.topic, value=value, key=key, headers=headers, on_delivery=delivered)
    remaining = out.flush(FLUSH_TIMEOUT_SEC)
    if remaining:
        failures.append(f"{remaining} messages still undelivered after {FLUSH_TIMEOUT_SEC:.0f}s")
    if failures:
        raise StreamlingError.retry(f"{target.label}: dead-letter topic '{target.topic}': {'; '.join(failures)}")
