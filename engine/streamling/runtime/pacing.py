"""When a source closes an epoch. Shared by every streaming reader so all sources pace alike.

An epoch closes as soon as `max_rows` rows are pending (a backlog runs back-to-back at full size),
when the source has reached its end, or when `interval_sec` has passed since the previous epoch and
at least one row is pending. Trickling streams thus commit every `interval_sec`, while a backlog is
not slowed down by it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Pacer:
    max_rows: int
    interval_sec: float
    _last_close: float = field(default=-math.inf)

    def take(self, pending: int, at_end: bool = False, limit: int | None = None) -> int:
        """How many of the `pending` rows the next epoch takes; 0 when no epoch is due yet."""
        cap = min(self.max_rows, limit) if limit else self.max_rows
        if pending <= 0:
            return 0
        now = time.monotonic()
        if pending >= cap:
            self._last_close = now
            return cap
        if at_end or now - self._last_close >= self.interval_sec:
            self._last_close = now
            return pending
        return 0

    def next_end(self, start: int, available: int, at_end: bool = False, limit: int | None = None) -> int:
        """For a single offset counter: the end offset of the next epoch, or `start` when none is due."""
        return start + self.take(available - start, at_end, limit)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Pacer:
        return cls(max_rows=int(options["max_rows"]), interval_sec=float(options["interval_sec"]))

    @staticmethod
    def options(max_rows: int, interval_sec: float) -> dict[str, str]:
        return {"max_rows": str(max_rows), "interval_sec": repr(interval_sec)}
