"""Dead letters on a Kafka topic (``kafka_sink`` connection, ``dead_letter: {topic: …}``): produced and flushed
before the epoch that skipped them commits; a replay produces them again (at-least-once). See
`streamling.dead_letters`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from streamling.dead_letters import DeadLetter, DeadLetterTarget
from streamling.errors import StreamlingError
from streamling.kafka.availability import produce_when_room
from streamling.kafka.clients import connection_options, ensure_topic, kafka_config, producer

if TYPE_CHECKING:
    import psycopg

    from streamling.config.model import PostgresSinkSettings, Settings
    from streamling.spec import DeadLetterSpec

FLUSH_TIMEOUT_SEC = 60.0
TOPIC_PARTITIONS = 1
HEADER_PREFIX = "streamling."
SASL_PASSWORD = "kafka_sasl_password"
PASSWORD = f"dead_letter_{SASL_PASSWORD}"


@dataclass(frozen=True)
class TopicDeadLetters(DeadLetterTarget):
    """A topic of the ``kafka_sink`` connection, created with one partition when missing."""

    kind = "topic"
    topic: str
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_spec(
        cls, spec: DeadLetterSpec, settings: Settings, node: str, label: str, postgres: PostgresSinkSettings | None
    ) -> TopicDeadLetters:
        assert spec.topic is not None
        return cls(settings.application_id, node, label, topic=spec.topic, kafka=producer_options(settings))

    @property
    def where(self) -> str:
        return f"topic '{self.topic}'"

    def prepare(self) -> None:
        ensure_topic(self.kafka, self.topic, TOPIC_PARTITIONS, self.label)

    def write(self, letters: Sequence[DeadLetter], failed_at: datetime, cur: psycopg.Cursor | None) -> None:
        produce(self, letters, failed_at)

    def carried(self) -> tuple[dict[str, Any], dict[str, str]]:
        kafka = {k: v for k, v in self.kafka.items() if k != SASL_PASSWORD}
        return {"topic": self.topic, "kafka": kafka}, {PASSWORD: self.kafka.get(SASL_PASSWORD, "")}

    @classmethod
    def arrived(cls, head: tuple[str, str, str], fields: dict[str, Any], secrets: Mapping[str, str]) -> Self:
        kafka = dict(fields["kafka"])
        if secrets.get(PASSWORD):
            kafka[SASL_PASSWORD] = secrets[PASSWORD]
        return cls(*head, topic=fields["topic"], kafka=kafka)

    def headers(self, letter: DeadLetter, failed_at: datetime) -> list[tuple[str, bytes]]:
        """The ``streamling.*`` headers a dead letter carries on a topic: which node failed it, when and why."""
        fields: dict[str, Any] = {
            "application_id": self.application_id,
            "node": self.node,
            "error": letter.error,
            "failed_at": failed_at.isoformat(),
        }
        if letter.topic is not None:
            fields.update(topic=letter.topic, partition=letter.partition, offset=letter.offset)
        return [(HEADER_PREFIX + k, str(v).encode()) for k, v in fields.items()]


def producer_options(settings: Settings) -> dict[str, str]:
    """The ``kafka_sink`` connection without the registry's: dead letters are raw bytes, never registered."""
    return {k: v for k, v in connection_options(settings.kafka_sink).items() if k.startswith("kafka_")}


def produce(target: TopicDeadLetters, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
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
