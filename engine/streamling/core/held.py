"""Clients a process keeps between epochs (Kafka consumers and producers, Schema Registry clients, Postgres pools,
Avro decoders, plugin instances), owned by the runs that use them, and closed when the last of those ends.

A CLI run is the only run of its process, which ends with it. A warm engine (`streamling serve`) hosts run after run,
in its driver and in Spark's Python workers, which outlive every run: a client kept per process and configuration
would stay open after its run ended, and the engine's memory would grow with every pipeline it ever ran. So each
client is `held` under a key, by the runs that asked for it:

- on the driver, the asking run is the one whose thread asks (`RUN_SCOPE`), and the engine `retire`s a run when it
  ends: its clients that no other run holds are closed at once;
- in a Spark task, the asking run is the task's (``streamling.run``, a Spark local property the run's threads set,
  `PipelineRunner.bind_thread`), and the runs the engine retired recently travel with every task
  (``streamling.retired``); a worker retires them when a task starts, before it takes anything. A worker runs one
  task at a time, so nothing it closes there is in use. A worker's client unused for `IDLE_SEC` is closed at a
  task's start too (a quiet source's consumer is opened again when data comes).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamling.core.scope import RUN_SCOPE

log = logging.getLogger("streamling.runtime")
T = TypeVar("T")

RUN_PROPERTY = "streamling.run"
RETIRED_PROPERTY = "streamling.retired"
PROCESS = "process"
"""The owner of what is held outside any run (a CLI run's driver, a validation): never retired."""
IDLE_SEC = 600.0
RETIRED_KEPT = 256
"""How many retired runs travel with each task: enough for runs ended between two tasks of a busy worker."""


@dataclass
class _Held:
    value: Any
    close: Callable[[Any], None] | None
    owners: set[str] = field(default_factory=set)
    used: float = field(default_factory=time.monotonic)


class Held:
    """The process's held clients. One instance per process: `HELD`."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, Hashable], _Held] = {}
        self._lock = threading.RLock()
        self.retired: deque[str] = deque(maxlen=RETIRED_KEPT)
        """Runs retired in this process, newest last (the driver's list is what tasks carry)."""
        self._retired_set: set[str] = set()

    def get(self, kind: str, key: Hashable, open_: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
        """The client of `kind` for `key`, opened by `open_` on first use; `close` releases it (None: dropping it
        is enough)."""
        owner, retired, in_task = _asking()
        with self._lock:
            if retired:
                self._retire_many(retired)
            if in_task:
                self._expire(time.monotonic() - IDLE_SEC)
            entry = self._entries.get((kind, key))
            if entry is not None:
                entry.owners.add(owner)
                entry.used = time.monotonic()
                return entry.value  # type: ignore[no-any-return]
        value = open_()  # outside the lock: opening may wait on a network (a pool probes its server)
        with self._lock:
            entry = self._entries.get((kind, key))
            if entry is None:
                entry = self._entries[(kind, key)] = _Held(value, close)  # type: ignore[arg-type]
            elif close is not None:  # another thread opened it meanwhile: keep one
                close(value)
            entry.owners.add(owner)
            entry.used = time.monotonic()
            return entry.value  # type: ignore[no-any-return]

    def retire(self, owner: str) -> int:
        """`owner` ended: close what only it held. Returns how many clients were closed."""
        with self._lock:
            return self._retire_many([owner])

    def _retire_many(self, owners: list[str]) -> int:
        fresh = [o for o in owners if o not in self._retired_set and o != PROCESS]
        if not fresh:
            return 0
        for owner in fresh:
            if len(self.retired) == self.retired.maxlen:
                self._retired_set.discard(self.retired[0])
            self.retired.append(owner)
            self._retired_set.add(owner)
        closed = 0
        for key, entry in list(self._entries.items()):
            if entry.owners & self._retired_set:
                entry.owners -= self._retired_set
                if not entry.owners:
                    self._close(key, entry)
                    closed += 1
        return closed

    def _expire(self, before: float) -> None:
        for key, entry in list(self._entries.items()):
            if entry.used < before:
                self._close(key, entry)

    def _close(self, key: tuple[str, Hashable], entry: _Held) -> None:
        del self._entries[key]
        if entry.close is None:
            return
        try:
            entry.close(entry.value)
        except Exception as exc:  # a client that fails to close is gone all the same
            log.debug("closing a %s failed: %s", key[0], exc)

    def count(self, kind: str | None = None) -> int:
        with self._lock:
            return sum(1 for k in self._entries if kind is None or k[0] == kind)

    def retired_property(self) -> str:
        """The retired runs as the Spark local property tasks carry."""
        return ",".join(self.retired)


def _asking() -> tuple[str, list[str], bool]:
    """The run asking (a task's ``streamling.run``, else the driver thread's run scope), the runs retired by the time
    a task was launched, and whether this is a task."""
    pyspark = sys.modules.get("pyspark")  # a Spark task's worker has imported it; a process without it has no task
    context = pyspark.TaskContext.get() if pyspark is not None else None
    if context is not None:
        owner = context.getLocalProperty(RUN_PROPERTY) or PROCESS
        retired = context.getLocalProperty(RETIRED_PROPERTY) or ""
        return owner, [r for r in retired.split(",") if r], True

    return RUN_SCOPE.get() or PROCESS, [], False


HELD = Held()
