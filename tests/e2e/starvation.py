"""What a crowded node does to a run, as helpers the e2e tests share: busy processes on every core, and Spark's
Python workers killed with SIGKILL mid-epoch until the run has restarted."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

DAEMON = "-m streamling.spark.worker_daemon"
RESTARTED = "restarting from its last committed epochs"
RESTARTING = {
    "STREAMLING__RESTART_STRATEGY__TYPE": "exponential-delay",
    "STREAMLING__RESTART_STRATEGY__MAX_FAILURES": "25",
    "STREAMLING__RESTART_STRATEGY__INITIAL_BACKOFF_SEC": "0.5",
    "STREAMLING__RESTART_STRATEGY__MAX_BACKOFF_SEC": "2",
}
"""A restart strategy that outlasts a Killer (tests/conftest.py turns restarts off for every other test)."""


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_cores() -> Iterator[None]:
    """One busy process per core while the block runs."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 2)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


def python_workers(under: int) -> list[psutil.Process]:
    """The Python workers Spark's workers' daemon forked, below process `under` (not the daemon itself)."""
    out = []
    for p in psutil.Process(under).children(recursive=True):
        try:
            parent = p.parent()
            # the daemon itself, not Spark's launcher scripts, whose arguments name the daemon module too
            if parent is not None and DAEMON in " ".join(parent.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


class Killer:
    """Kills the run's Python workers every `every` seconds until `output` shows a restart (or `limit` kills).

    Often: a kill only fails a task when it meets a worker running one (an idle worker is forked again by the
    daemon), and a warm engine can end the run within a few seconds; at 1.5 s a loaded machine once saw the engine's
    run end with no restart."""

    def __init__(self, root: int, output: list[str], every: float = 0.4, limit: int = 120) -> None:
        self.kills = 0
        self.stop = threading.Event()

        def run() -> None:
            while not self.stop.wait(every) and self.kills < limit:
                if any(RESTARTED in line for line in output):
                    return
                for worker in python_workers(root):
                    try:
                        worker.send_signal(signal.SIGKILL)
                        self.kills += 1
                    except psutil.Error:
                        continue

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


def follow(proc: subprocess.Popen) -> list[str]:
    """`proc`'s stderr lines as they come (a list that grows)."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines
