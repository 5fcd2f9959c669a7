"""When a source closes an epoch. Shared by every streaming reader so all sources pace alike.

An epoch closes as soon as `max_rows` rows are pending (a backlog runs back-to-back at full size, but for a run's
first epoch, at most `FIRST_EPOCH_ROWS`),
when the source has reached its end, or when `interval_sec` has passed since the previous epoch and
at least one row is pending. Trickling streams thus commit every `interval_sec`, while a backlog is
not slowed down by it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

FIRST_EPOCH_ROWS = 10_000
"""On a start with a backlog, the first rows reach the sinks sooner for one more epoch boundary (~0.4 s) over the
whole backlog (measured, 50k Kafka records waiting → Postgres, warm engine: first row 1.9-2.4 s → 1.55-1.65 s)."""


@dataclass
class Pacer:
    max_rows: int
    interval_sec: float
    _last_close: float = field(default=-math.inf)
    _closed_first: bool = False

    def take(self, pending: int, at_end: bool = False, limit: int | None = None) -> int:
        """How many of the `pending` rows the next epoch takes; 0 when no epoch is due yet."""
        cap = min(self.max_rows, limit) if limit else self.max_rows
        if not self._closed_first:
            cap = min(cap, FIRST_EPOCH_ROWS)
        if pending <= 0:
            return 0
        now = time.monotonic()
        if pending >= cap:
            self._close(now)
            return cap
        if at_end or now - self._last_close >= self.interval_sec:
            self._close(now)
            return pending
        return 0

    def _close(self, now: float) -> None:
        self._last_close = now
        self._closed_first = True

    def next_end(self, start: int, available: int, at_end: bool = False, limit: int | None = None) -> int:
        """For a single offset counter: the end offset of the next epoch, or `start` when none is due."""
        return start + self.take(available - start, at_end, limit)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Pacer:
        return cls(max_rows=int(options["max_rows"]), interval_sec=float(options["interval_sec"]))

    @staticmethod
    def options(max_rows: int, interval_sec: float) -> dict[str, str]:
        return {"max_rows": str(max_rows), "interval_sec": repr(interval_sec)}
