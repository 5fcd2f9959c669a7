"""Crash points for fault-injection tests and drills.

``STREAMLING_CRASH_AT=<point>:<epoch>`` makes the engine kill itself with SIGKILL (no cleanup, no
flush: exactly like a lost machine) when epoch `<epoch>` of any source reaches `<point>`:

- ``before_write``: the epoch was evaluated, no sink has written it;
- ``during_write``: a Postgres sink applied the epoch's rows inside its transaction, or an ``exactly_once`` Kafka
  sink produced them in its transaction, not committed yet (driver-side writes, i.e. ``parallelism: 1``; in a
  Spark task it would only kill that task's worker);
- ``after_write``: every sink wrote and flushed it, its position is not committed yet;
- ``during_commit``: the run checked its lease and is about to write the position (the state write in flight);
- ``after_commit``: its position is committed, ``epoch_committed`` has not run.

``STREAMLING_FREEZE_AT=<point>:<epoch>`` stops the engine's process with SIGSTOP there instead, as a long GC
pause, a suspended VM or a partitioned host would: with SIGCONT it carries on where it was, lease or not.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

ENV = "STREAMLING_CRASH_AT"
FREEZE_ENV = "STREAMLING_FREEZE_AT"
POINTS = ("before_write", "during_write", "after_write", "during_commit", "after_commit")
log = logging.getLogger("streamling.runtime")


def crash_point(point: str, epoch: int) -> None:
    here = f"{point}:{epoch}"
    for variable, what, sig in ((ENV, "killing", signal.SIGKILL), (FREEZE_ENV, "freezing", signal.SIGSTOP)):
        if os.environ.get(variable) == here:
            log.warning("%s=%s: %s the engine now", variable, here, what)
            for handler in logging.getLogger().handlers:
                handler.flush()
            # To this thread: a signal to the process lets the calling thread run on for a moment (far enough to
            # take the state backend's write lock) before the kernel stops it.
            signal.pthread_kill(threading.get_ident(), sig)
