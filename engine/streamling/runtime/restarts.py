"""The restart strategy: a run that failed for a reason other than the user's own starts again from its last
committed epochs, after a backoff, a bounded number of times within a window (Flink's ``exponential-delay``
restart strategy bounded like its ``failure-rate`` one; Kafka Connect restarts failed tasks the same way).

What restarts: a lost or late Spark Python worker, a failed Spark task, a service outage that outlived its patience
(`StreamlingError.retriable`), and internal errors. What fails at once: the user's own errors (bad SQL, a type
mismatch, a record that does not decode without a dead-letter target: `StreamlingError.user`), an invalid pipeline,
and a lost lease (another run may hold the pipeline by then; see `runtime/lease.py`). A restart is the run's own:
its lease stays held, its operators are terminated and initialised again, and every source resumes from the
state backend exactly as a new process would, with sinks that applied an uncommitted epoch skipping its replay.

Each restart is one WARN line (``restarting … (attempt 2 of at most 5 within 10m): <cause>``) and one count of
the ``restarts`` metric. The loop is tenacity's; the policy (which failure, how long to wait, when to give up) is
this module's.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying

from streamling.config.model import RestartStrategySettings
from streamling.errors import InvalidPipelineError, LeaseLostError, StreamlingError, first_line

log = logging.getLogger("streamling.runtime")
T = TypeVar("T")


def restartable(exc: BaseException) -> bool:
    """Whether a run that failed with `exc` may start again from its last committed epochs."""
    if isinstance(exc, LeaseLostError | InvalidPipelineError):
        return False
    if isinstance(exc, StreamlingError):
        return exc.retriable or not exc.user_facing
    return isinstance(exc, Exception)  # an internal error (KeyboardInterrupt and the like end the run)


class RestartPolicy:
    """How long to wait before the next attempt, and whether there is one: the delay grows with the failures
    within `failure_window_sec` (so it resets once they are old), and more than `max_failures` there ends the run."""

    def __init__(self, settings: RestartStrategySettings) -> None:
        self.settings = settings
        self.failures: deque[float] = deque()

    def failed(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.failures.append(now)
        while self.failures and self.failures[0] < now - self.settings.failure_window_sec:
            self.failures.popleft()

    @property
    def recent(self) -> int:
        return len(self.failures)

    def gives_up(self) -> bool:
        return self.settings.type == "none" or self.recent > self.settings.max_failures

    def delay(self) -> float:
        s = self.settings
        if s.type == "fixed-delay":
            base = s.initial_backoff_sec
        else:
            base = min(s.max_backoff_sec, s.initial_backoff_sec * s.backoff_multiplier ** max(0, self.recent - 1))
        return max(0.0, base * (1 + random.uniform(-s.jitter_factor, s.jitter_factor)))


class Restarts:
    """Runs attempts of one run until one ends without a restartable failure or the policy gives up. A `stop` during
    a backoff ends the wait; the attempt that follows is expected to see `stop` and return at once."""

    def __init__(
        self,
        settings: RestartStrategySettings,
        what: str,
        stop: threading.Event,
        on_restart: Callable[[BaseException], None] = lambda _exc: None,
    ) -> None:
        self.policy = RestartPolicy(settings)
        self.what = what
        self.stop = stop
        self.on_restart = on_restart
        self.count = 0
        """Restarts so far."""
        self.last_error: str | None = None
        """The one line of the last failure that was restarted."""

    def run(self, attempt: Callable[[], T]) -> T:
        def retry(state: RetryCallState) -> bool:
            outcome = state.outcome
            exc = outcome.exception() if outcome is not None else None
            if exc is None or self.stop.is_set() or not restartable(exc):
                return False
            self.policy.failed()
            return not self.policy.gives_up()

        def announce(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            assert exc is not None and state.next_action is not None
            self.count += 1
            self.last_error = first_line(exc)
            s = self.policy.settings
            log.warning(
                "%s failed; restarting from its last committed epochs in %.1fs (restart %d; failure %d of at most "
                "%d within %gs): %s",
                self.what,
                state.next_action.sleep,
                self.count,
                self.policy.recent,
                s.max_failures,
                s.failure_window_sec,
                self.last_error,
            )
            self.on_restart(exc)

        retrying = Retrying(
            retry=retry,
            wait=lambda _state: self.policy.delay(),
            sleep=self.stop.wait,
            before_sleep=announce,
            reraise=True,
        )
        return retrying(attempt)
