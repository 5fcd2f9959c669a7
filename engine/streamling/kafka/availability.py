"""Waiting out a Kafka broker or Schema Registry that is unreachable for a while.

librdkafka reconnects by itself and a registry comes back by itself, so a transport failure is no reason to
fail the run. Callers keep trying for the connection's ``unavailable_timeout_sec`` (the patience) and only
then fail with the retriable error they raise today. An outage costs two log lines — one WARNING when the
waiting starts, one INFO when it ends — not one per attempt. Reasons are librdkafka's or the HTTP client's
error text, which names hosts but never credentials.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_never, wait_fixed

from streamling.core import outage
from streamling.core.outage import wait_out as _wait_out
from streamling.core.retry import is_retriable
from streamling.errors import StreamlingUnavailableError, first_line

log = logging.getLogger("streamling.kafka")
T = TypeVar("T")
QUEUE_FULL_POLL_SEC = 0.5
"""How long a producer whose local queue is full serves deliveries before it tries to produce again."""


@functools.cache
def _transient_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = (
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_RESOLVE",
        "_TIMED_OUT",
        "_WAIT_COORD",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "BROKER_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
    )
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


def transient_kafka_error(error) -> bool:  # type: ignore[no-untyped-def]
    """A librdkafka error (``KafkaError``) that goes away once the broker is reachable again."""
    return error.code() in _transient_codes() or bool(error.retriable())


def is_unavailable(exc: BaseException) -> bool:
    """The service could not be reached or answered "try later": worth waiting for."""
    from confluent_kafka import KafkaException
    from confluent_kafka.schema_registry import SchemaRegistryError

    if isinstance(exc, StreamlingUnavailableError):
        return True
    if isinstance(exc, KafkaException):
        return bool(exc.args) and transient_kafka_error(exc.args[0])
    if isinstance(exc, SchemaRegistryError):
        return is_retriable(exc.http_status_code)
    return isinstance(exc, ConnectionError | TimeoutError) or _http_transport_error(exc)


def _http_transport_error(exc: BaseException) -> bool:
    """The registry client's connect/read failures: ``TransportError`` of httpx or of httpx2, whichever the
    installed confluent-kafka uses."""
    return any(c.__name__ == "TransportError" and c.__module__ in ("httpx", "httpx2") for c in type(exc).__mro__)


def describe(exc: BaseException) -> str:
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "str"):
        return exc.args[0].str()
    return first_line(exc)


class Outage(outage.Outage):
    """An outage logged under ``streamling.kafka``."""

    def __init__(self, label: str, service: str, timeout_sec: float) -> None:
        super().__init__(label, service, timeout_sec, log)


def wait_out(attempt: Callable[[], T], outage: Outage) -> T:
    """`attempt()`, retried while the broker or registry is unreachable (`core.outage.wait_out`)."""
    return _wait_out(attempt, outage, is_unavailable, describe)


def patience(options: Mapping[str, str]) -> float:
    """How long an unreachable broker or registry is waited out (`unavailable_timeout_sec`)."""
    return float(options.get("unavailable_timeout_sec", "300"))


def produce_when_room(producer: Any, topic: str, **message: Any) -> None:
    """``producer.produce(topic, **message)``. While the producer's local queue is full (``BufferError``) it serves
    deliveries for a while and tries again, for as long as that takes: the queue empties as messages are delivered,
    or fail once ``message.timeout.ms`` is up. A caller producing row by row tries ``produce`` inline first and
    comes here on ``BufferError``: the call costs about a third of a ``produce``."""
    try:
        producer.produce(topic, **message)
    except BufferError:
        producer.poll(QUEUE_FULL_POLL_SEC)
        Retrying(
            retry=retry_if_exception_type(BufferError),
            wait=wait_fixed(QUEUE_FULL_POLL_SEC),
            stop=stop_never,
            sleep=producer.poll,
            reraise=True,
        )(producer.produce, topic, **message)
