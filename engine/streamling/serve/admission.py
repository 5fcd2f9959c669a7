"""Which runs may start now: at most `limit` at once, in the order they were submitted.

Starting a run is what costs an engine (its settings, its SQL analysed on Spark, its sources opened), so starts are
limited (`engine.max_starting_runs`). The waiting runs go first come, first served: with a semaphore polled by each
waiting thread, fifty runs submitted together were admitted in the order their threads happened to wake, and the
last submission could be the first started or the last.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

POLL_SEC = 0.2
"""How often a waiting run looks at its stop flag (a stop must not wait for a start slot)."""


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._starting = 0
        self._queue: deque[threading.Event] = deque()
        self._changed = threading.Condition()

    def waiting(self) -> int:
        with self._changed:
            return len(self._queue)

    def line_up(self, stop: threading.Event) -> None:
        """Take the run's place in the line now (on submission), though it `enter`s later, from its own thread."""
        with self._changed:
            self._queue.append(stop)

    def enter(self, stop: threading.Event, on_wait: Callable[[int], None] | None = None) -> bool:
        """Wait for this run's turn and a free start slot; False when `stop` was set first. `on_wait` is told, once,
        how many runs wait (this one included) when the run cannot start at once; it is called without the
        admission's lock held (a submission takes the runs' lock, then this one's)."""
        with self._changed:
            if not any(waiting is stop for waiting in self._queue):
                self._queue.append(stop)
            told = False
            while not stop.is_set():
                if self._queue[0] is stop and self._starting < self.limit:
                    self._queue.popleft()
                    self._starting += 1
                    self._changed.notify_all()  # the next in line may have a slot too
                    return True
                if not told and on_wait is not None:
                    told = True
                    waiting = len(self._queue)
                    self._changed.release()  # the callback logs, and the log's handler takes the runs' lock
                    try:
                        on_wait(waiting)
                    finally:
                        self._changed.acquire()
                    continue
                self._changed.wait(POLL_SEC)
            self._queue.remove(stop)
            self._changed.notify_all()
            return False

    def leave(self) -> None:
        """A run admitted by `enter` started (or ended before it did): its slot goes to the next in line."""
        with self._changed:
            self._starting -= 1
            self._changed.notify_all()
