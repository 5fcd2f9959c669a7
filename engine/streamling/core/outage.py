"""Waiting out a service that is unreachable for a while: a broker, a registry, a ClickHouse server.

Callers keep trying for their patience and only then fail with the retriable error they would raise at once. An
outage costs two log lines, one WARNING when the waiting starts and one INFO when it ends, not one per attempt. The
`Outage` keeps that state for every caller that shares it (one sink's calls, from several threads); `wait_out` is the
loop, tenacity's, with the waits of `core.retry.RetryPolicy` and the outage's patience as its stop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, retry_if_exception
from tenacity.stop import stop_base

from streamling.core.retry import RetryPolicy, failure, on_success
from streamling.errors import first_line

T = TypeVar("T")

BACKOFF_SEC = 0.5
BACKOFF_MAX_SEC = 10.0


class Outage:
    """One caller's view of one service being unreachable: when it began and whether it was logged."""

    def __init__(self, label: str, service: str, timeout_sec: float, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger("streamling")
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
            self.log.warning(
                "%s: %s unreachable (%s), waiting up to %.0f s", self.label, self.service, reason, self.timeout_sec
            )
            return True
        if now - self.since < self.timeout_sec:
            return True
        self.log.warning("%s: %s still unreachable after %.0f s; giving up", self.label, self.service, now - self.since)
        self.since = None
        return False

    def recovered(self) -> None:
        if self.since is not None:
            self.log.info(
                "%s: %s reachable again after %.1f s", self.label, self.service, time.monotonic() - self.since
            )
            self.since = None


class stop_when_patience_is_used_up(stop_base):
    """Tenacity's stop for an outage: each failed attempt is recorded with `outage` (`Outage.failed`, told why by
    `reason(state)`: the first one logs that the waiting starts), and the loop stops once the outage has lasted its
    patience."""

    def __init__(self, outage: Outage, reason: Callable[[RetryCallState], str]) -> None:
        self.outage = outage
        self.reason = reason

    def __call__(self, retry_state: RetryCallState) -> bool:
        return not self.outage.failed(self.reason(retry_state))


def wait_out(
    attempt: Callable[[], T],
    outage: Outage,
    unavailable: Callable[[BaseException], bool],
    describe: Callable[[BaseException], str] = first_line,
) -> T:
    """`attempt()`, retried with jittered exponential backoff while it fails because the service is unreachable;
    any other failure, or the last one after the patience, is raised as it is."""
    policy = RetryPolicy(
        max_retries=None, retry_timeout_sec=outage.timeout_sec, backoff_sec=BACKOFF_SEC, backoff_max_sec=BACKOFF_MAX_SEC
    )
    retrying = policy.retrying(
        on_success(retry_if_exception(unavailable), lambda _state: outage.recovered()),
        stop=stop_when_patience_is_used_up(outage, lambda state: describe(failure(state))),
    )
    return retrying(attempt)
