"""Client configuration for confluent-kafka and the Schema Registry.

Connection settings travel to Spark executors as data-source options, so they are flattened into a
string map here. Secret values use option keys containing ``password``: Spark redacts those in plans
and logs (``spark.redaction.regex``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamling.core.held import HELD
from streamling.errors import StreamlingError

if TYPE_CHECKING:  # the settings models are the driver's: workers get `connection_options`' strings
    from streamling.config.model import KafkaConnectionSettings

log = logging.getLogger("streamling.kafka")
REPEAT_WINDOW_SEC = 60.0
PRODUCER_CLOSE_SEC = 5.0


class _DropRepeats(logging.Filter):
    """librdkafka logs every failed reconnect, so an unreachable broker would flood the log: the first line of
    each kind passes, its repeats (numbers aside) within REPEAT_WINDOW_SEC do not."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < REPEAT_WINDOW_SEC:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


_CLIENT_LOG = logging.getLogger("streamling.kafka.client")
_CLIENT_LOG.addFilter(_DropRepeats())


def connection_options(settings: KafkaConnectionSettings) -> dict[str, str]:
    from streamling.config.model import KafkaSourceSettings

    opts = {
        "kafka_brokers": settings.brokers,
        "kafka_security_protocol": settings.security_protocol,
        "registry_url": settings.schema_registry_url,
        "unavailable_timeout_sec": str(settings.unavailable_timeout_sec),
    }
    optional = {
        "kafka_sasl_mechanism": settings.sasl_mechanism,
        "kafka_sasl_username": settings.sasl_username,
        "kafka_sasl_password": settings.sasl_password.get_secret_value() if settings.sasl_password else None,
        "registry_username": settings.schema_registry_username,
        "registry_password": (
            settings.schema_registry_password.get_secret_value() if settings.schema_registry_password else None
        ),
        "kafka_client_id": settings.client_id,
    }
    if isinstance(settings, KafkaSourceSettings):
        optional["kafka_group_id"] = settings.consumer_group_id
    opts.update({k: v for k, v in optional.items() if v})
    return opts


def kafka_config(options: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    """librdkafka configuration from connection options."""
    config: dict[str, Any] = {
        "bootstrap.servers": options["kafka_brokers"],
        "security.protocol": options.get("kafka_security_protocol", "plaintext"),
        "logger": _CLIENT_LOG,  # librdkafka's own log lines, not raw stderr; repeats dropped
        # librdkafka's own: 100 ms, doubling to 10 s while a broker is down. A longer first backoff also delays a
        # new client's first connection to the broker its metadata names (by up to half of it, measured: a run's
        # start and its first epoch waited 0.5 s at 1 s in one of ten clients).
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 10_000,
    }
    if "sasl" in config["security.protocol"]:
        for key in ("mechanism", "username", "password"):
            value = options.get(f"kafka_sasl_{key}")
            if value:
                config[f"sasl.{key}"] = value
    if options.get("kafka_client_id"):
        config["client.id"] = options["kafka_client_id"]
    config.update(extra)
    return config


def subject_of(topic: str) -> str:
    """The Schema Registry subject of a topic's values (the default TopicNameStrategy)."""
    return f"{topic}-value"


def registry(options: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """One Schema Registry client per process and connection (it caches schemas by id, which never change).

    Its cache of a subject's latest version is switched off (`cache.latest.ttl.sec` 0; by default it never
    expires): a process that runs pipelines one after another (`streamling serve`, a test session) would
    otherwise start every later run with the reader schema the first run fetched. Closed once no run uses it
    (`core/held.py`)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = (options["registry_url"], options.get("registry_username"), options.get("registry_password"))

    def open_() -> Any:
        conf: dict[str, Any] = {"url": options["registry_url"], "cache.latest.ttl.sec": 0}
        if options.get("registry_username"):
            conf["basic.auth.user.info"] = f"{options['registry_username']}:{options.get('registry_password', '')}"
        return SchemaRegistryClient(conf)

    return HELD.get("schema registry client", key, open_, lambda client: client.close())


def producer(config: Mapping[str, Any]):  # type: ignore[no-untyped-def]
    """One producer per Python worker and configuration, reused across epochs, closed once no run writes with it
    (`core/held.py`; every epoch flushed its records before it committed, so nothing is pending then)."""
    from confluent_kafka import Producer

    key = json.dumps({k: v for k, v in config.items() if k != "logger"}, sort_keys=True)
    return HELD.get("kafka producer", key, lambda: Producer(dict(config)), _close_producer)


def _close_producer(found: Any) -> None:
    """What an ended run left undelivered belongs to no committed epoch (it is written again by the run that
    replays it), so after a short flush it is dropped rather than waited for."""
    found.flush(PRODUCER_CLOSE_SEC)
    found.purge(in_queue=True, in_flight=True, blocking=False)
    found.close()


def ensure_topic(options: Mapping[str, str], topic: str, partitions: int, label: str) -> None:
    """Create `topic` unless it exists (another writer may create it at the same moment)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka_config(options))
    try:
        existing = admin.list_topics(timeout=10).topics
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot reach Kafka brokers {options['kafka_brokers']}: {exc}") from None
    if topic in existing:
        log.info("%s: topic '%s' already exists, skipping creation", label, topic)
        return
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic]
    try:
        future.result(timeout=30)
        log.info("%s: created topic '%s' with %d partitions", label, topic, partitions)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" in str(exc):
            log.info("%s: topic '%s' already exists, skipping creation", label, topic)
            return
        raise StreamlingError.retry(f"failed to create topic '{topic}': {exc}") from None
