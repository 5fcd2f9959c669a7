"""A directory of pipelines as the engine's desired state (``streamling serve --pipelines DIR``), as Redpanda
Connect's streams mode runs a directory of config files.

Every ``*.yaml``, ``*.yml`` and ``*.json`` file directly in the directory is a pipeline named after the file, run
with the engine's own settings, in a state-backend namespace of its own, ``<application_id>.<name>`` (pipelines of
one directory often share source names, and a namespace holds one pipeline's positions per source name). The
directory is looked at every ``engine.pipelines_poll_sec``:

- a new file is started (its run validates it first, as any run does, and ends ``invalid`` when it is not);
- a changed file (its content, not its time) is validated first (structure, then its SQL and schemas on the
  engine's Spark, moving no data); a valid one replaces the running version, which drains (its in-flight epoch
  commits) before the new one starts from the committed positions; an invalid one is reported (an ``Error:`` line
  in the engine's log, ``invalid`` with its errors in ``GET /runs``) and the running version is left alone;
- a removed file's run drains and stops.

A run that ends on its own (a bounded pipeline finished, or failed after its restart strategy gave up) is not
started again until its file changes.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamling.errors import StreamlingError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamling.config import Settings
    from streamling.serve.runs import Run, Runs

log = logging.getLogger("streamling.serve")

SUFFIXES = (".yaml", ".yml", ".json")
DRAIN_SEC = 120.0


@dataclass
class Entry:
    """One pipeline file: what was last validated and the run of its valid version."""

    path: Path
    digest: str | None = None
    """The content last looked at (valid or not)."""
    run: Run | None = None
    problems: list[str] = field(default_factory=list)
    """Why the file's current content does not run (the running version, if any, is the previous one)."""

    def view(self) -> dict[str, Any]:
        run = self.run
        state = "invalid" if self.problems else (run.state if run is not None else "pending")
        errors = list(self.problems) or ([run.error] if run is not None and run.error else [])
        return {
            "file": str(self.path),
            "state": state,
            "run": run.id if run is not None else None,
            "run_state": run.state if run is not None else None,
            "errors": errors,
        }


class PipelineDirectory:
    def __init__(self, path: Path, runs: Runs, settings: Settings, spark: SparkSession, poll_sec: float) -> None:
        from streamling.config.layers import settings_document

        self.path = path
        self.runs = runs
        self.settings = settings
        self.document = settings_document(settings)
        self.spark = spark
        self.poll_sec = poll_sec
        self.entries: dict[str, Entry] = {}
        """Written by the directory's thread only; the API reads copies."""
        self._thread: threading.Thread | None = None

    def start(self, stopping: threading.Event) -> None:
        if not self.path.is_dir():
            raise StreamlingError.user(f"streamling serve: the pipelines directory {self.path} does not exist")
        self.sync()
        self._thread = threading.Thread(target=self._loop, args=(stopping,), name="streamling-pipelines", daemon=True)
        self._thread.start()

    def _loop(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.poll_sec):
            try:
                self.sync()
            except Exception as exc:  # the next look tries again; the running pipelines are not touched
                log.error("pipelines directory %s: %s", self.path, first_line(exc))

    def files(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for path in sorted(self.path.iterdir()):
            if path.suffix.lower() not in SUFFIXES or path.name.startswith(".") or not path.is_file():
                continue
            if path.stem in found:
                log.error(
                    "Error: pipelines directory %s: %s and %s both define pipeline '%s'; %s is ignored",
                    self.path,
                    found[path.stem].name,
                    path.name,
                    path.stem,
                    path.name,
                )
                continue
            found[path.stem] = path
        return found

    def sync(self) -> None:
        """One look at the directory: start, restart and stop runs to match it."""
        files = self.files()
        for name in sorted(set(self.entries) - set(files)):
            entry = self.entries.pop(name)
            if entry.run is not None and not entry.run.done.is_set():
                log.info("pipeline '%s': %s was removed; stopping run %s", name, entry.path.name, entry.run.id)
                entry.run.stop.set()
        for name, path in files.items():
            try:
                content = path.read_bytes()
            except OSError as exc:  # removed or being replaced between the listing and now
                log.debug("pipelines directory: %s: %s", path, exc)
                continue
            digest = hashlib.sha256(content).hexdigest()
            entry = self.entries.setdefault(name, Entry(path))
            if entry.digest == digest:
                continue
            self._apply(name, entry, digest)

    def _apply(self, name: str, entry: Entry, digest: str) -> None:
        from streamling.api import plan_pipeline
        from streamling.serve.runs import Submission

        changed = entry.digest is not None
        entry.digest = digest
        problems: list[str] = []
        if entry.run is not None and not entry.run.done.is_set():  # a running version: keep it unless this is valid
            try:
                settings = self.settings.model_copy(update={"application_id": f"{self.settings.application_id}.{name}"})
                plan, report = plan_pipeline(entry.path, settings, self.spark.newSession())
                problems = [] if plan is not None else list(report.errors)
            except StreamlingError as exc:
                problems = [exc.message]
        if problems:
            entry.problems = problems
            keeps = f"; run {entry.run.id} goes on with the previous version" if entry.run is not None else ""
            log.error("Error: pipeline '%s' (%s) is invalid%s: %s", name, entry.path, keeps, "; ".join(problems))
            return
        entry.problems = []
        old = entry.run
        if old is not None and not old.done.is_set():
            log.info("pipeline '%s': %s changed; run %s drains before the new version starts", name, entry.path, old.id)
            old.stop.set()
            if not old.done.wait(DRAIN_SEC):
                log.warning("pipeline '%s': run %s did not stop within %gs", name, old.id, DRAIN_SEC)
        document = {**self.document, "application_id": f"{self.settings.application_id}.{name}"}
        entry.run = self.runs.submit(Submission(str(entry.path), document), origin="directory")
        log.info(
            "pipeline '%s': %s %s as run %s",
            name,
            entry.path.name,
            "changed, started" if changed else "started",
            entry.run.id,
        )

    def view(self) -> dict[str, Any]:
        return {name: entry.view() for name, entry in sorted(list(self.entries.items()))}

    def ready(self) -> bool:
        """Every pipeline of the directory valid and running."""
        entries = list(self.entries.values())
        return all(not e.problems and e.run is not None and e.run.state == "running" for e in entries)
