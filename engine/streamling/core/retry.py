"""When a failed call is tried again, after how long, and when to give up: the one retry policy of every loop that waits
out a failure (Postgres, Kafka and the registry, ClickHouse, HTTP requests, SQLite's WAL switch), as tenacity `Retrying`
objects.

A loop that backs off waits by `RetryPolicy.wait`: it doubles from ``backoff_sec`` up to ``backoff_max_sec`` and draws
each wait from the upper half of that, so that many callers failing together do not come back in lockstep; an HTTP
server's ``Retry-After`` (seconds or an HTTP date) replaces it (`wait_retry_after`). It gives up by `RetryPolicy.stop`,
once the retries are used up or the next attempt would start after ``retry_timeout_sec``. A service waited out for its
patience (a broker, the registry) stops on that instead (`core.outage`), and the Kafka producer's full-queue and flush
loops poll at a fixed step. What is retried is each system's own predicate; everything else raises at once. An outage is
logged once when it starts and once when it ends, not once per attempt (`log_first_failure`, `on_success`; the services
waited out for their patience keep that state in `core.outage.Outage`, shared by every caller).

HTTP: transport errors, timeouts, 408, 429 and 5xx are retried; any other status other than 2xx is final.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

RETRIABLE_STATUSES = frozenset({408, 429})


def is_retriable(status: int) -> bool:
    return status in RETRIABLE_STATUSES or 500 <= status <= 599


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None when absent or
    unreadable, so the backoff applies instead."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def failure(state: RetryCallState) -> BaseException:
    """The exception the attempt `state` describes ended with."""
    exc = state.outcome.exception() if state.outcome is not None else None
    assert exc is not None, "a failed attempt"
    return exc


class wait_retry_after(wait_base):
    """The wait a failure asks for (its ``retry_after_sec``: a server's ``Retry-After``), else `fallback`'s."""

    def __init__(self, fallback: wait_base) -> None:
        self.fallback = fallback

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        asked = getattr(outcome.exception(), "retry_after_sec", None) if outcome is not None else None
        return float(asked) if asked is not None else self.fallback(retry_state)


class on_success(retry_base):
    """`retry`, and `then(state)` when the call ends in a success (the state tells after how many attempts): the
    one place an outage is known to be over."""

    def __init__(self, retry: retry_base, then: Callable[[RetryCallState], None]) -> None:
        self.retry = retry
        self.then = then

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.retry(retry_state):
            return True
        outcome = retry_state.outcome
        if outcome is not None and not outcome.failed:
            self.then(retry_state)
        return False


def log_first_failure(
    log: logging.Logger,
    first: Callable[[RetryCallState], str],
    later: Callable[[RetryCallState], str] | None = None,
    then: Callable[[RetryCallState], None] | None = None,
) -> Callable[[RetryCallState], None]:
    """A ``before_sleep`` hook: one WARNING at an outage's first failure (`first`), DEBUG for each one after it
    (`later`), and `then(state)` before every retry (a retry count)."""

    def announce(state: RetryCallState) -> None:
        if state.attempt_number == 1:
            log.warning("%s", first(state))
        elif later is not None:
            log.debug("%s", later(state))
        if then is not None:
            then(state)

    return announce


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int | None
    """Retries after the first attempt; None: as many as fit in `retry_timeout_sec`."""
    retry_timeout_sec: float
    """No retry starts later than this after the first attempt."""
    backoff_sec: float
    backoff_max_sec: float

    def wait(self) -> wait_base:
        """The wait before retry number n (0-based): the ceiling doubles from `backoff_sec` up to
        `backoff_max_sec`, and the wait is drawn from its upper half (half the ceiling, plus up to the other half
        at random) so that many failed calls do not come back in lockstep."""
        half, half_max = self.backoff_sec / 2, self.backoff_max_sec / 2
        return wait_exponential(multiplier=half, max=half_max) + wait_random_exponential(multiplier=half, max=half_max)

    def stop(self) -> stop_base:
        """Give up when no further attempt may start: the retries are used up, or the next one would begin after
        `retry_timeout_sec`."""
        deadline = stop_before_delay(self.retry_timeout_sec)
        return deadline if self.max_retries is None else stop_after_attempt(self.max_retries + 1) | deadline

    def retrying(
        self,
        retry: retry_base,
        *,
        wait: wait_base | None = None,
        stop: stop_base | None = None,
        before_sleep: Callable[[RetryCallState], None] | None = None,
        give_up: Callable[[RetryCallState], Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Retrying:
        """A tenacity loop of this policy: `retry` says which outcomes are tried again; `wait` and `stop` default
        to the policy's own; `before_sleep` is told of each retry; `give_up(state)` raises (or returns) what the
        call ends with once the policy gives up, else its last error is raised as it is."""
        return Retrying(
            retry=retry,
            wait=wait if wait is not None else self.wait(),
            stop=stop if stop is not None else self.stop(),
            before_sleep=before_sleep,
            retry_error_callback=give_up,
            sleep=sleep,
            reraise=True,
        )

    def async_retrying(
        self,
        retry: retry_base,
        *,
        wait: wait_base | None = None,
        before_sleep: Callable[[RetryCallState], None] | None = None,
        give_up: Callable[[RetryCallState], Any] | None = None,
        started: float | None = None,
    ) -> AsyncRetrying:
        """`retrying` for coroutines: the waits are ``asyncio.sleep``, so other requests go on meanwhile. `started`
        (``time.monotonic()``): when the call's first attempt began, for a caller that made it before entering the
        loop (`stop` and the attempt's reported duration count from there)."""

        def since_started(state: RetryCallState) -> None:
            if started is not None and state.attempt_number == 1:
                state.start_time = started

        return AsyncRetrying(
            retry=retry,
            wait=wait if wait is not None else self.wait(),
            stop=self.stop(),
            before=since_started,
            before_sleep=before_sleep,
            retry_error_callback=give_up,
            reraise=True,
        )
