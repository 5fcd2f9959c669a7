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
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from streamling.core.retry import RetryPolicy, is_retriable
from streamling.errors import StreamlingUnavailableError, first_line

log = logging.getLogger("streamling.kafka")
T = TypeVar("T")

BACKOFF_SEC = 0.5
BACKOFF_MAX_SEC = 10.0


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


class Outage:
    """One caller's view of one service being unreachable: when it began and whether it was logged."""

    def __init__(self, label: str, service: str, timeout_sec: float) -> None:
        self.label = label
        self.service = service
        self.timeout_sec = timeout_sec
        self.since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, reason: str) -> bool:
        """Record a failed attempt. True: keep waiting; False: the patience is used up and the caller fails."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning(
                "%s: %s unreachable (%s), waiting up to %.0f s", self.label, self.service, reason, self.timeout_sec
            )
            return True
        if now - self.since < self.timeout_sec:
            return True
        log.warning("%s: %s still unreachable after %.0f s; giving up", self.label, self.service, now - self.since)
        self.since = None
        return False

    def recovered(self) -> None:
        if self.since is not None:
            log.info("%s: %s reachable again after %.1f s", self.label, self.service, time.monotonic() - self.since)
            self.since = None


def wait_out(attempt: Callable[[], T], outage: Outage) -> T:
    """`attempt()`, retried with jittered exponential backoff while it fails because the service is unreachable;
    any other failure, or the last one after the patience, is raised as it is."""
    policy = RetryPolicy(
        max_retries=1 << 30,
        retry_timeout_sec=outage.timeout_sec,
        backoff_sec=BACKOFF_SEC,
        backoff_max_sec=BACKOFF_MAX_SEC,
    )
    retry = 0
    while True:
        try:
            result = attempt()
        except Exception as exc:
            if not is_unavailable(exc) or not outage.failed(describe(exc)):
                raise
            time.sleep(policy.backoff(retry))
            retry += 1
            continue
        outage.recovered()
        return result


def patience(options: Mapping[str, str]) -> float:
    """How long an unreachable broker or registry is waited out (`unavailable_timeout_sec`)."""
    return float(options.get("unavailable_timeout_sec", "300"))
