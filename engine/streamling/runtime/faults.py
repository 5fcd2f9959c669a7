"""Crash points for fault-injection tests and drills.

``STREAMLING_CRASH_AT=<point>:<epoch>`` makes the engine kill itself with SIGKILL (no cleanup, no
flush: exactly like a lost machine) when epoch `<epoch>` of any source reaches `<point>`:

- ``before_write``: the epoch was evaluated, no sink has written it;
- ``during_write``: a Postgres sink applied the epoch's rows inside its transaction, not committed yet
  (driver-side writes, i.e. ``parallelism: 1``; in a Spark task it would only kill that task's worker);
- ``after_write``: every sink wrote and flushed it, its position is not committed yet;
- ``after_commit``: its position is committed, ``epoch_committed`` has not run.
"""

from __future__ import annotations

import logging
import os
import signal

ENV = "STREAMLING_CRASH_AT"
POINTS = ("before_write", "during_write", "after_write", "after_commit")
log = logging.getLogger("streamling.runtime")


def crash_point(point: str, epoch: int) -> None:
    wanted = os.environ.get(ENV)
    if wanted and wanted == f"{point}:{epoch}":
        log.warning("%s=%s: killing the engine now", ENV, wanted)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
