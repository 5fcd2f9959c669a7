"""One active run per pipeline: a lease in the state backend, renewed by a heartbeat while the run lives.

The lease is named after the pipeline (its name, the file name without extension) inside the state
namespace (the application id): exactly what two runs would share if both ran — positions are stored under
that namespace — wherever the file lies and whichever directory either was started from.

A second run that finds the lease held watches the holder's renewals: one moves, so the holder is alive and
the second run is refused. None moves, so the holder is dead or frozen, and the second run takes the lease
once it expires, `lease_ttl_sec` after the last renewal. A holder on the same machine (same boot and
process namespace) whose process is gone is dead for certain: its lease is taken at once, so a restart
after a crash does not wait. A holder that cannot renew for a whole TTL stops before its next commit: by
then another run may hold the lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from streamling.core.scope import in_this_run
from streamling.errors import LeaseLostError, StreamlingError, first_line
from streamling.state import Fence, JsonDoc, LeaseHolder, StateBackend

log = logging.getLogger("streamling.runtime")
HEARTBEATS_PER_TTL = 6


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        info = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}"


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), so a reused pid is not taken for its holder."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(")", 1)[1].split()[19] if stat else None


def this_process() -> JsonDoc:
    """How the lease names its holder: for people (pid, host, since) and for proving it dead (the rest)."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "since": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_namespace": _pid_namespace(),
        "started": _start_time(pid),
    }


def provably_dead(holder: JsonDoc) -> bool:
    """True only when the holder ran on this machine since its last boot, in our process namespace, and its
    process is gone (or the pid now belongs to a later process). Anything else may be alive."""
    me = this_process()
    if not holder.get("started") or not me["boot_id"] or not me["pid_namespace"]:
        return False
    if any(holder.get(k) != me[k] for k in ("host", "boot_id", "pid_namespace")):
        return False
    return _start_time(int(holder["pid"])) != holder["started"]


def already_running(pipeline: str, holder: JsonDoc) -> str:
    return (
        f"pipeline '{pipeline}' is already running (pid {holder.get('pid')}, host {holder.get('host')}, "
        f"since {holder.get('since')})"
    )


class RunLease:
    """The run's lease on its pipeline: `acquire` before touching anything, `check` before each commit,
    `release` at the end (also after a failure or a stop)."""

    def __init__(self, state: StateBackend, pipeline: str, path: Path | None, ttl_sec: float, run_id: str) -> None:
        self.state = state
        self.pipeline = pipeline
        self.name = f"pipeline:{pipeline}"
        self.ttl_sec = ttl_sec
        self.heartbeat_sec = ttl_sec / HEARTBEATS_PER_TTL
        self.token = run_id
        self.holder = {**this_process(), "pipeline": pipeline, "path": str(path) if path else None, "run": run_id}
        self._valid_until = 0.0  # monotonic: past this, another run may hold the lease
        self.fence: Fence | None = None
        """What this run's commits carry once it holds the lease; kept after `release`, so a commit that lands
        after the release is refused by the state backend and the sinks rather than written."""
        self._lost: str | None = None
        self._held = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, stop: threading.Event) -> bool:
        """Take the lease, waiting while its holder might be dead; raise when the holder is alive. False when
        `stop` was set while waiting."""
        seen: LeaseHolder | None = None
        replace: str | None = None
        while not stop.is_set():
            asked = time.monotonic()
            current = self.state.acquire_lease(self.name, self.token, self.holder, self.ttl_sec, replace)
            if current is None:
                self._taken(asked, seen)
                return True
            if current.token != replace and provably_dead(current.holder):
                log.info(
                    "pipeline '%s': the run holding its lease (pid %s on this host) is gone; taking the lease over",
                    self.pipeline,
                    current.holder.get("pid"),
                )
                replace = current.token
                continue
            if seen is None:
                seen = current
                log.info(
                    "pipeline '%s' is held by the run of pid %s on %s (since %s); waiting for its heartbeat "
                    "(every %.1f s), or for its lease to expire (%.0f s after its last one) if it is dead",
                    self.pipeline,
                    current.holder.get("pid"),
                    current.holder.get("host"),
                    current.holder.get("since"),
                    self.heartbeat_sec,
                    self.ttl_sec,
                )
            elif current.token != seen.token or current.renewals != seen.renewals:
                raise StreamlingError.user(already_running(self.pipeline, current.holder))
            stop.wait(min(1.0, self.heartbeat_sec / 2))
        return False

    def _taken(self, asked: float, previous: LeaseHolder | None) -> None:
        self._valid_until = asked + self.ttl_sec
        self._held = True
        generation = self.state.lease_generation(self.name, self.token)
        if generation is None:  # taken and lost again within one round trip: as if it had expired
            generation = 0
            self._lost = "its run lease was taken by another run as soon as it was granted"
        self.fence = Fence(self.name, self.token, generation)
        if previous is not None:
            log.info(
                "pipeline '%s': took over the run lease of pid %s on %s",
                self.pipeline,
                previous.holder.get("pid"),
                previous.holder.get("host"),
            )
        self._thread = threading.Thread(
            target=in_this_run(self._beat), name=f"streamling-lease-{self.pipeline}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        failing = False
        while not self._done.wait(self.heartbeat_sec):
            asked = time.monotonic()
            try:
                renewed = self.state.renew_lease(self.name, self.token, self.ttl_sec)
            except Exception as exc:  # the backend is unreachable: try again until the lease runs out
                if not failing:
                    log.warning("pipeline '%s': cannot renew the run lease: %s", self.pipeline, first_line(exc))
                failing = True
                if time.monotonic() > self._valid_until:
                    self._lost = f"could not renew its run lease for {self.ttl_sec:.0f} s ({first_line(exc)})"
                    return
                continue
            if not renewed:
                self._lost = "its run lease expired and another run took it"
                return
            if failing:
                log.info("pipeline '%s': run lease renewed again", self.pipeline)
                failing = False
            self._valid_until = asked + self.ttl_sec

    def check(self) -> None:
        """Raise when the lease may be someone else's now: nothing may be committed after that."""
        if not self._held:
            return
        lost = self._lost
        if lost is None and time.monotonic() > self._valid_until:
            lost = f"its run lease was not renewed for {self.ttl_sec:.0f} s"
        if lost is not None:
            raise LeaseLostError(
                f"pipeline '{self.pipeline}': {lost}; stopping without committing, as another run may be writing "
                "its positions",
                retriable=True,
            )

    def release(self) -> None:
        if not self._held:
            return
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat_sec + 5)
        self._held = False
        if self._lost is not None:
            return
        try:
            self.state.release_lease(self.name, self.token)
        except Exception as exc:  # it expires by itself
            log.warning("pipeline '%s': cannot release the run lease: %s", self.pipeline, first_line(exc))
