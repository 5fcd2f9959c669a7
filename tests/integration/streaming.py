"""Running an unbounded pipeline in-process until a condition holds, then stopping it gracefully."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from streamling import run_pipeline
from streamling.runtime.executor import RunSummary


class Background:
    def __init__(self, path: Path, settings, spark) -> None:
        self.stop = threading.Event()
        self.summary: RunSummary | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(path, settings, spark), daemon=True)
        self.thread.start()

    def _run(self, path: Path, settings, spark) -> None:
        try:
            self.summary = run_pipeline(path, settings, spark, stop=self.stop)
        except BaseException as exc:
            self.error = exc

    def wait_until(self, condition: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return
            if not self.thread.is_alive():
                raise AssertionError(f"pipeline ended early: {self.error!r}")
            time.sleep(0.1)
        raise AssertionError("condition not reached in time")

    def finish(self, timeout: float = 60) -> RunSummary:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "pipeline did not stop"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary

    def failure(self, timeout: float = 90) -> BaseException:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "pipeline did not fail in time"
        assert self.error is not None, "pipeline ended without an error"
        return self.error
