"""Spark's per-run checkpoint folders, and knowing which of them belong to a live run.

A run's folders are ``<checkpoint_root>/<app>/<source>/run-<run id>-<n>``. While the run lives, its process
holds an exclusive `flock` on ``<checkpoint_root>/<app>/.runs/<run id>.lock``; the kernel drops it when
the process ends, however it ends (SIGKILL included). A folder is stale, and removed, only when that lock
can be taken, so no run ever deletes the folders of a live one — another run of the same pipeline, another
pipeline that shares the application id and a source name, or a run whose state backend is elsewhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from pathlib import Path

log = logging.getLogger("streamling.runtime")
LOCKS = ".runs"


def safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _run_of(folder: str) -> str:
    """``run-<run id>-<n>`` → the run id (a folder of an older version, ``run-<hex>``, has no lock: stale)."""
    return folder.removeprefix("run-").split("-", 1)[0]


class RunFolders:
    def __init__(self, root: Path, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self._lock_path = root / LOCKS / f"{run_id}.lock"
        self._lock_fd: int | None = None

    def folder(self, source: str) -> Path:
        return self.root / safe_name(source) / f"run-{self.run_id}-{uuid.uuid4().hex[:6]}"

    def claim(self) -> None:
        """Hold this run's lock, so that other runs leave its folders alone."""
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while a sweeper is deciding about the new file
            try:
                if os.stat(self._lock_path).st_ino == os.fstat(fd).st_ino:
                    self._lock_fd = fd
                    return
            except FileNotFoundError:
                pass
            os.close(fd)  # a sweeper unlinked the file between our open and our lock: make it again

    def sweep(self, sources: list[str]) -> None:
        """Remove the folders (and locks) of runs that are not alive; called once this run holds its lock."""
        for source in sources:
            base = self.root / safe_name(source)
            if not base.is_dir():
                continue
            for folder in base.iterdir():
                run = _run_of(folder.name)
                if folder.name.startswith("run-") and run != self.run_id and not self._alive(run):
                    log.debug("Removing the checkpoint folder %s of a run that ended", folder)
                    shutil.rmtree(folder, ignore_errors=True)
        locks = self.root / LOCKS
        if locks.is_dir():
            for lock in locks.glob("*.lock"):
                if lock.stem != self.run_id:
                    self._alive(lock.stem)  # unlinks the lock of a run that is gone

    def _alive(self, run: str) -> bool:
        """Whether run `run` still holds its lock; if it does not, its lock file is removed."""
        path = self.root / LOCKS / f"{run}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
        return False

    def release(self) -> None:
        """At the end of the run, after its folders were removed."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._lock_path)
        os.close(self._lock_fd)
        self._lock_fd = None
