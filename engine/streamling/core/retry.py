"""When a failed request is tried again, and after how long.

Transport errors, timeouts, 408, 429 and 5xx are retried with exponential backoff and jitter, or after the
server's ``Retry-After`` (seconds or an HTTP date); any other status other than 2xx is final.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

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


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int
    """Retries after the first attempt."""
    retry_timeout_sec: float
    """No retry starts later than this after the first attempt."""
    backoff_sec: float
    backoff_max_sec: float

    def backoff(self, retry: int) -> float:
        """Delay before retry number `retry` (0-based): doubling from `backoff_sec` up to `backoff_max_sec`,
        drawn from its upper half so that many failed requests do not come back in lockstep."""
        ceiling = min(self.backoff_max_sec, self.backoff_sec * 2 ** min(retry, 60))
        return random.uniform(ceiling / 2, ceiling)

    def gives_up(self, attempts: int, elapsed_sec: float, wait_sec: float) -> bool:
        """True when no further attempt may start: the retries are used up, or the next one would begin after
        `retry_timeout_sec`."""
        return attempts > self.max_retries or elapsed_sec + wait_sec > self.retry_timeout_sec
