"""Finishing epochs on a thread of their own, so the next epoch's Spark work overlaps this one's writes.

A micro-batch does everything that needs Spark (evaluation, shuffles, collecting rows as Arrow) and hands
the rest — deferred sink writes, flushes, the position commit, finalizers — to the committer, which
finishes epochs strictly one after another. The hand-off waits until the previous epoch is finished, so
at most one epoch is being finished while the next one is computed, epoch N+1 is never written before
epoch N is committed, and nothing runs after a failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from streamling.core.scope import in_this_run


class Committer:
    def __init__(self, name: str, on_done: Callable[[], None] | None = None) -> None:
        """`on_done` is called after each job, failed or not, once the committer is idle again (the run's
        supervisor looks at its queries then, instead of polling)."""
        self._cond = threading.Condition()
        self._on_done = on_done
        self._pending: Callable[[], None] | None = None
        self._busy = False
        self._closed = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=in_this_run(self._loop), name=f"streamling-commit-{name}", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue `job` once the previous one finished; False (job dropped) after a failure or close."""
        with self._cond:
            self._cond.wait_for(lambda: not (self._busy or self._pending) or self.error or self._closed)
            if self.error is not None or self._closed:
                return False
            self._pending = job
            self._cond.notify_all()
            return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                job, self._pending, self._busy = self._pending, None, True
            try:
                job()
            except BaseException as exc:
                with self._cond:
                    self.error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                if self._on_done is not None:
                    self._on_done()

    def idle(self) -> bool:
        with self._cond:
            return not self._busy and self._pending is None

    def close(self, timeout: float | None = None) -> None:
        """Finish what was handed off (unless a job failed), then end the thread."""
        with self._cond:
            if self.error is not None:
                self._pending = None
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
