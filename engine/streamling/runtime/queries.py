"""The query drivers: how each kind of source is driven, epoch by epoch, under one written protocol (`QueryDriver`,
in `runtime/protocols.py`).

- `SourceQuery`: one source on a thread of its own, one epoch after another: its stream reader hosted on the
  driver (`runtime/reading.py`: the end planned here, the rows read by Spark tasks), or, for a source the driver
  reads itself (`Source.reads_on_driver`), its `next_epoch`.
- `PhasedQuery`: a phased source (hybrid): one `SourceQuery` per phase, one after another under one name.

Every driver stages the sinks' writes inside the epoch and hands the rest to its committer thread
(`runtime/committer.py`), which finishes epochs with `EpochCommit` (`runtime/epoch_commit.py`). The runner
(`runtime/executor.py`) only starts drivers, supervises them through `QueryDriver` and offers them `Runner`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from streamling.core.faults import crash_point
from streamling.core.held import HELD, RETIRED_PROPERTY
from streamling.core.scope import in_this_run
from streamling.errors import error_context
from streamling.operators import Epoch, Sink, Source
from streamling.runtime.committer import Committer
from streamling.runtime.epoch_commit import EpochCommit, EpochTiming, Staged
from streamling.runtime.protocols import Runner
from streamling.runtime.reading import ReaderEpochs
from streamling.runtime.summary import SourceProgress
from streamling.state import epoch_key, phase_key

if TYPE_CHECKING:
    from streamling.telemetry.observe import EpochFigures

log = logging.getLogger("streamling.runtime")
SHUTDOWN_GRACE_SEC = 25.0


class SourceQuery:
    """Drives one source on a thread of its own: plan an epoch, run its Spark part, hand the rest to the committer.

    A source read by Spark tasks plans its epochs through its stream reader on the driver (`ReaderEpochs`); a
    source the driver reads itself (`Source.reads_on_driver`, e.g. the embedded ClickHouse engine, which exists
    only in this process) gives each epoch's rows as a DataFrame (`Source.next_epoch`). Either way each epoch runs
    through the same evaluation, staging and committer."""

    def __init__(self, runner: Runner, source: Source, start: dict[str, Any], epoch: int) -> None:
        self.runner = runner
        self.source = source
        self.position = start
        self.epoch = epoch
        self.sinks = runner.plan.sinks_of(source.name)
        self.downstream = [runner.plan.operators[n] for n in runner.plan.downstream[source.name]]
        self.lock = threading.Lock()
        self.in_flight = False
        self.stopping = False
        self.exhausted = source.is_exhausted(start)
        self.error: BaseException | None = None
        # The last epoch handed to the committer; it may not be committed yet.
        self.planned_epoch = epoch
        self.planned_end = dict(start)
        self.committer = Committer(source.name, on_done=runner.wake)
        self.progress = runner.summary.sources.setdefault(source.name, SourceProgress(position=dict(start)))
        self.commit = EpochCommit(runner, source, self.downstream, self.progress)
        self.reader: ReaderEpochs | None = None
        self.spark: SparkSession | None = None
        self._thread: threading.Thread | None = None
        self._idle = False
        self._retired = ""

    def start(self, spark: SparkSession, replay_end: dict[str, Any] | None = None) -> None:
        spark = self.spark = own_session(spark)
        if not self.source.reads_on_driver:
            with error_context(self.source.label):
                self.reader = ReaderEpochs(
                    self.source, spark, self.position, replay_end, self.runner.settings.record_batch_interval_ms / 1000
                )
        self._thread = threading.Thread(
            target=in_this_run(self._loop),
            args=(spark, replay_end),
            name=f"streamling-read-{self.source.name}",
            daemon=True,
        )
        self._thread.start()
        if replay_end is not None:
            log.info(
                "Started %s from position %s; epoch %d is replayed up to %s, which some sinks already applied",
                self.source.label,
                self.position,
                self.epoch + 1,
                replay_end,
            )
        else:
            log.info("Started %s from position %s", self.source.label, self.position)

    def _loop(self, spark: SparkSession, replay_end: dict[str, Any] | None) -> None:
        epochs: Any = self.reader if self.reader is not None else self.source
        try:
            self.runner.bind_thread(spark, self.source.name)
            while True:
                with self.lock:
                    if self.stopping or self.error is not None or self.committer.error is not None:
                        return  # not committed: the rows are read again by the next run
                with error_context(self.source.label):
                    batch = epochs.next_epoch(spark, self.planned_end, replay_end)
                if batch is None:
                    return
                frame, end = batch
                self._idle = frame is None
                if frame is None:  # nothing new yet (the source waited a little): ask again, unless stopping
                    continue
                replay_end = None
                with self.lock:
                    if self.stopping:
                        return  # planned but not started: nothing of it is committed
                    self.in_flight = True
                try:
                    self._run_epoch(self.source.shape_epoch(frame), end, int(time.time() * 1000))
                finally:
                    with self.lock:
                        self.in_flight = False
        except BaseException as exc:
            self.error = exc
        finally:
            self.runner.wake()

    def active(self) -> bool:
        reading = self._thread is not None and self._thread.is_alive()
        return reading or not self.committer.idle()

    def caught_up(self) -> bool:
        return (self._idle or self.exhausted) and self.idle()

    def _run_epoch(self, batch: DataFrame, end: dict[str, Any], timestamp_ms: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        retired = HELD.retired_property()
        if retired != self._retired:  # the epoch's tasks release what runs that ended held in their workers
            spark.sparkContext.setLocalProperty(RETIRED_PROPERTY, retired)
            self._retired = retired
        fence = self.runner.fence()
        epoch = Epoch(
            self.source.name,
            self.planned_epoch + 1,
            self.planned_end,
            end,
            timestamp_ms,
            generation=fence.generation if fence is not None else 0,
        )
        log.debug("Epoch %d of %s: %s -> %s", epoch.id, self.source.label, epoch.start, epoch.end)
        rows_in = self.source.rows_between(epoch.start, epoch.end)  # once: a source may forget it once asked
        tap = self.runner.telemetry.tap(self.source.name, rows_in)
        counter = None
        if rows_in is None and tap is None:  # the positions do not tell (a file source): Spark counts the rows
            from streamling.telemetry.observe import EpochTap

            counter = EpochTap({}, 0, {})
            batch = counter.observe(self.source.name, batch)
        # Persist when the batch is read more than once: by several sinks, or also by side outputs.
        side_outputs = sum(1 for op in self.downstream if op.spec.side_output)
        shared = len(self.sinks) + side_outputs > 1
        if shared:
            batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            with error_context(self.source.label):
                outputs = self.runner.plan.evaluate(spark, self.source.name, batch, epoch, tap)
            crash_point("before_write", epoch.id)
            staged: list[Staged] = []
            for name in self.sinks:
                sink = self.runner.plan.operators[name]
                assert isinstance(sink, Sink)
                began = time.monotonic()
                with error_context(sink.label):
                    staged.append(Staged(name, sink.label, sink.stage(outputs[name], epoch), time.monotonic() - began))
            figures = tap.figures() if tap is not None else None
            if rows_in is None:  # what the observation of the source's rows counted, once every sink staged
                counted = figures if figures is not None else counter.figures() if counter is not None else None
                rows_in = counted.rows.get(self.source.name) if counted is not None else None
        finally:
            if shared:
                batch.unpersist()
        self.planned_epoch, self.planned_end = epoch.id, dict(epoch.end)
        spark_sec = time.monotonic() - started
        timing = EpochTiming(started, spark_sec)
        self.committer.submit(lambda: self._finish(epoch, rows_in, staged, timing, figures))

    def _finish(
        self, epoch: Epoch, rows_in: int | None, staged: list[Staged], timing: EpochTiming, figures: EpochFigures | None
    ) -> None:
        """On the committer thread, in epoch order (see `EpochCommit`)."""
        self.commit.finish(epoch, rows_in, staged, timing, figures)
        self.position = dict(epoch.end)
        self.epoch = epoch.id
        if self.source.is_exhausted(epoch.end):
            self.exhausted = True
            log.info("%s reached its end after epoch %d", self.source.label, epoch.id)

    def request_stop(self) -> None:
        with self.lock:
            self.stopping = True
        if self.reader is not None:
            self.reader.wake()

    def idle(self) -> bool:
        with self.lock:
            return not self.in_flight and self.committer.idle()

    def stop(self) -> None:
        """Take no new epoch and wait for the thread; an epoch still in its Spark part after the grace period has
        its jobs cancelled (it is not committed, and is read again by the next run)."""
        self.request_stop()
        if self._thread is None:
            return
        self._thread.join(SHUTDOWN_GRACE_SEC)
        if self._thread.is_alive() and self.spark is not None:
            log.warning("%s: its epoch did not finish within %gs; cancelling it", self.source.label, SHUTDOWN_GRACE_SEC)
            self.runner.cancel_jobs(self.spark, self.source.name)
            self._thread.join(SHUTDOWN_GRACE_SEC)

    def close(self) -> None:
        """After the thread stopped: let the committer finish what was handed off (or drop it after a failure),
        then release what the reader opened on the driver."""
        self.committer.close(timeout=SHUTDOWN_GRACE_SEC)
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception as exc:  # closing must not hide what ended the run
                log.warning("%s: closing its reader failed: %s", self.source.label, exc)

    def poll(self) -> None:
        """Called by the supervisor loop; phased queries advance here."""

    def failure(self) -> BaseException | None:
        return self.error or self.committer.error


def own_session(spark: SparkSession) -> SparkSession:
    """A clone of the run's session (its SQL settings, functions and views) for one source's epochs: an epoch maps
    the pipeline's nodes to temporary views by name, and the sources of one pipeline run their epochs side by side
    (Structured Streaming gave each query such a clone too)."""
    return type(spark)(spark.sparkContext, jsparkSession=spark._jsparkSession.cloneSession())


class PhasedQuery:
    """Runs a phased source's phases one after another (hybrid: ClickHouse backfills, then Kafka).

    Each phase is an ordinary query under the source's name, so epochs number on and the same sinks
    follow. When a phase ends on its own (not by a stop or a failure), ``<source>:__phase__`` moves to the
    next one in the state backend, so a restart resumes in the right phase at that phase's position."""

    def __init__(self, runner: Runner, source: Source, phases: list[Source]) -> None:
        self.runner = runner
        self.source = source
        self.phases = phases
        self.phase_key = phase_key(source.name)
        self.index = int((runner.state.get(self.phase_key) or {}).get("phase", 0))
        self.current: SourceQuery | None = None
        self.done: list[SourceQuery] = []
        self.stopping = False
        self.spark: SparkSession | None = None

    @property
    def exhausted(self) -> bool:
        return self.index >= len(self.phases)

    def start(self, spark: SparkSession, replay_end: dict[str, Any] | None = None) -> None:
        self.spark = spark
        self._start_phase()

    def _start_phase(self) -> None:
        state = self.runner.state
        while self.index < len(self.phases):
            phase = self.phases[self.index]
            start = phase.load_position(state)
            epoch = int((state.get(epoch_key(self.source.name)) or {}).get("epoch", 0))
            query = SourceQuery(self.runner, phase, start, epoch)
            if query.exhausted:
                log.info("%s has nothing after position %s", phase.label, start)
                query.close()
                self._advance()
                continue
            assert self.spark is not None
            query.start(self.spark, self.runner.replay_end(phase, start, epoch))
            self.current = query
            return
        self.current = None
        log.info("%s finished all %d phases", self.source.label, len(self.phases))

    def _advance(self) -> None:
        self.index += 1
        self.runner.state.put(self.phase_key, {"phase": self.index, "updated_at": int(time.time() * 1000)})
        if self.index < len(self.phases):
            log.info("Moving on to %s", self.phases[self.index].label)

    def poll(self) -> None:
        """From the supervisor loop: start the next phase once the current one ended by itself."""
        query = self.current
        if query is None or self.stopping or query.failure() is not None:
            return
        if query.exhausted and query.idle():
            query.stop()
        if not query.active():
            query.close()
            self.done.append(query)
            self.current = None
            self._advance()
            self._start_phase()

    def failure(self) -> BaseException | None:
        return self.current.failure() if self.current is not None else None

    def idle(self) -> bool:
        return self.current is None or self.current.idle()

    def active(self) -> bool:
        """Between phases `poll` has already started the next one, so only the current phase matters."""
        return self.current is not None and self.current.active()

    def caught_up(self) -> bool:
        return self.current.caught_up() if self.current is not None else self.exhausted

    def request_stop(self) -> None:
        self.stopping = True
        if self.current is not None:
            self.current.request_stop()

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
