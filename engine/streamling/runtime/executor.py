"""The micro-batch executor: one Structured Streaming query per source, one epoch per micro-batch.

For each micro-batch of a source (``foreachBatch``): read the batch's end position from Spark's offset
log, evaluate the whole downstream DAG on the batch (persisted when it is read more than once) and let
every sink `stage` its write. The source's committer thread then finishes the epoch — deferred writes,
flush (`flush_epoch`), the position commit to the state backend, and only then
`epoch_committed` — while Spark computes the next epoch. A failure anywhere fails the pipeline before
the commit, so the epoch is replayed on restart: at-least-once. Sinks that report their last applied
epoch (`Sink.applied_epoch`) get that epoch replayed with identical bounds so they can skip it.

Spark's checkpoint directory is per run and deleted afterwards; restarts resume from the state
backend, which is therefore the only source of truth for positions. A run holds its pipeline's lease
(`runtime/lease.py`) from before it touches anything until it has cleaned up, and checks it before each
commit, so two runs never write one pipeline's positions.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streamling.config import Settings
from streamling.errors import StreamlingError, embedded_error, error_context, first_line, wrap
from streamling.operators import Epoch, RunContext, Sink, Source, Written, rows_of
from streamling.runtime.checkpoints import RunFolders, safe_name
from streamling.runtime.committer import Committer
from streamling.runtime.faults import crash_point
from streamling.runtime.lease import RunLease
from streamling.runtime.offset_log import read_batch_offsets
from streamling.runtime.plan import Plan
from streamling.state import StateBackend

log = logging.getLogger("streamling.runtime")
SHUTDOWN_GRACE_SEC = 25.0


def epoch_key(source: str) -> str:
    return f"{source}:__epoch__"


@dataclass
class SourceProgress:
    epochs: int = 0
    rows_in: int = 0
    position: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    """What a run did; the CLI logs it and the Dagster control plane records it as metadata.

    `sink_rows` holds every sink's rows written in this run. `sink_ops` breaks them down for the sinks that
    report operations (`Written`; see `Sink.stage`): ``{"inserts": …, "updates": …, "deletes": …}``, all three
    keys present and adding up to that sink's `sink_rows`. Sinks that report only a count are absent there."""

    sources: dict[str, SourceProgress] = field(default_factory=dict)
    sink_rows: dict[str, int] = field(default_factory=dict)
    sink_ops: dict[str, dict[str, int]] = field(default_factory=dict)
    duration_sec: float = 0.0
    stopped_by_signal: bool = False


class SourceQuery:
    """Drives one source's streaming query; its __call__ is the foreachBatch function."""

    def __init__(self, runner: PipelineRunner, source: Source, start: dict[str, Any], epoch: int) -> None:
        self.runner = runner
        self.source = source
        self.position = start
        self.epoch = epoch
        self.sinks = runner.plan.sinks_of(source.name)
        self.downstream = [runner.plan.operators[n] for n in runner.plan.downstream[source.name]]
        self.checkpoint_dir = str(runner.folders.folder(source.name))
        self.query: StreamingQuery | None = None
        self.lock = threading.Lock()
        self.in_flight = False
        self.stopping = False
        self.exhausted = source.is_exhausted(start)
        self.error: BaseException | None = None
        # The last epoch handed to the committer; it may not be committed yet.
        self.planned_epoch = epoch
        self.planned_end = dict(start)
        self.committer = Committer(source.name)
        self.progress = runner.summary.sources.setdefault(source.name, SourceProgress(position=dict(start)))

    def start(self, spark: SparkSession, replay_end: dict[str, Any] | None = None) -> None:
        settings = self.runner.settings
        stream = self.source.stream(spark, self.position, replay_end)
        self.query = (
            stream.writeStream.queryName(f"{settings.application_id}:{self.source.name}")
            .foreachBatch(self)
            .option("checkpointLocation", self.checkpoint_dir)
            .trigger(processingTime=f"{settings.record_batch_interval_ms} milliseconds")
            .start()
        )
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

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self.lock:
            if self.stopping or self.error is not None or self.committer.error is not None:
                return  # not committed: the rows are read again by the next run
            self.in_flight = True
        try:
            offsets = read_batch_offsets(batch.sparkSession, self.checkpoint_dir, batch_id)
            self._run_epoch(batch, offsets.end, offsets.timestamp_ms)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            with self.lock:
                self.in_flight = False

    def active(self) -> bool:
        return self.query is not None and self.query.isActive

    def _run_epoch(self, batch: DataFrame, end: dict[str, Any], timestamp_ms: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        epoch = Epoch(self.source.name, self.planned_epoch + 1, self.planned_end, end, timestamp_ms)
        log.debug("Epoch %d of %s: %s -> %s", epoch.id, self.source.label, epoch.start, epoch.end)
        # Persist when the batch is read more than once: by several sinks, or also by side outputs.
        side_outputs = sum(1 for op in self.downstream if op.spec.side_output)
        shared = len(self.sinks) + side_outputs > 1
        if shared:
            batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            with error_context(self.source.label):
                outputs = self.runner.plan.evaluate(spark, self.source.name, batch, epoch)
            crash_point("before_write", epoch.id)
            staged = []
            for name in self.sinks:
                sink = self.runner.plan.operators[name]
                assert isinstance(sink, Sink)
                with error_context(sink.label):
                    staged.append((name, sink.label, sink.stage(outputs[name], epoch)))
        finally:
            if shared:
                batch.unpersist()
        self.planned_epoch, self.planned_end = epoch.id, dict(epoch.end)
        self.committer.submit(lambda: self._finish(epoch, staged, started))

    def _finish(self, epoch: Epoch, staged: list[tuple[str, str, Callable[[], Written | int]]], started: float) -> None:
        """On the committer thread: deferred writes, flush, commit, finalize — in epoch order."""
        for name, label, deferred in staged:
            with error_context(label):
                written = deferred()
            self.runner.count_sink_rows(name, written)
        for op in self.downstream:
            with error_context(op.label):
                op.flush_epoch(epoch)
        crash_point("after_write", epoch.id)
        self._commit(epoch, started)
        crash_point("after_commit", epoch.id)
        for op in [self.source, *self.downstream]:
            with error_context(op.label):
                op.epoch_committed(epoch)

    def _commit(self, epoch: Epoch, started: float) -> None:
        now_ms = int(time.time() * 1000)
        entries = dict(self.source.position_entries(epoch.start, epoch.end, now_ms))
        entries[epoch_key(self.source.name)] = {"epoch": epoch.id, "updated_at": now_ms}
        self.runner.check_lease()
        with error_context(f"{self.source.label}: failed to commit epoch {epoch.id}"):
            self.runner.state.put_many(entries)
        self.position = dict(epoch.end)
        self.epoch = epoch.id
        self.progress.epochs += 1
        self.progress.position = dict(epoch.end)
        rows = self.source.rows_between(epoch.start, epoch.end)
        self.progress.rows_in += rows or 0
        log.debug(
            "Epoch finalized: %d (%s, position %s, %s rows, %.2fs)",
            epoch.id,
            self.source.label,
            epoch.end,
            "?" if rows is None else rows,
            time.monotonic() - started,
        )
        if self.source.is_exhausted(epoch.end):
            self.exhausted = True
            log.info("%s reached its end after epoch %d", self.source.label, epoch.id)

    def request_stop(self) -> None:
        with self.lock:
            self.stopping = True

    def idle(self) -> bool:
        with self.lock:
            return not self.in_flight and self.committer.idle()

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def close(self) -> None:
        """After the query stopped: let the committer finish what was handed off, or drop it after a failure."""
        self.committer.close(timeout=SHUTDOWN_GRACE_SEC)

    def poll(self) -> None:
        """Called by the supervisor loop; phased queries advance here."""

    def cleanup(self) -> None:
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)

    def failure(self) -> BaseException | None:
        if self.error is not None:
            return self.error
        if self.committer.error is not None:
            return self.committer.error
        if self.query is not None and not self.query.isActive:
            exc = self.query.exception()
            if exc is not None:
                # Our own error raised in Spark's Python process keeps its text and flags; anything else
                # (a Spark or JVM failure) is reported by its first line, without the JVM stack.
                return embedded_error(exc) or StreamlingError(
                    f"{self.source.label}: streaming query failed: {first_line(exc)}"
                )
        return None


class DriverSourceQuery(SourceQuery):
    """A source read by the driver itself (`Source.reads_on_driver`), e.g. the embedded ClickHouse engine,
    which exists only in this process: a thread asks the source for one epoch after another and runs each
    as a Spark DataFrame through the same evaluation, staging and committer as a streaming query."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._thread: threading.Thread | None = None

    def start(self, spark: SparkSession, replay_end: dict[str, Any] | None = None) -> None:
        self._thread = threading.Thread(
            target=self._loop, args=(spark, replay_end), name=f"streamling-read-{self.source.name}", daemon=True
        )
        self._thread.start()
        log.info("Started %s from position %s", self.source.label, self.position)

    def _loop(self, spark: SparkSession, replay_end: dict[str, Any] | None) -> None:
        try:
            while True:
                with self.lock:
                    if self.stopping or self.error is not None or self.committer.error is not None:
                        return
                    self.in_flight = True
                try:
                    with error_context(self.source.label):
                        batch = self.source.next_epoch(spark, self.planned_end, replay_end)
                    replay_end = None
                    if batch is None:
                        return
                    frame, end = batch
                    self._run_epoch(frame, end, int(time.time() * 1000))
                finally:
                    with self.lock:
                        self.in_flight = False
        except BaseException as exc:
            self.error = exc

    def active(self) -> bool:
        reading = self._thread is not None and self._thread.is_alive()
        return reading or not self.committer.idle()

    def stop(self) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(SHUTDOWN_GRACE_SEC)

    def failure(self) -> BaseException | None:
        return self.error or self.committer.error


class PhasedQuery:
    """Runs a phased source's phases one after another (hybrid: ClickHouse backfills, then Kafka).

    Each phase is an ordinary query under the source's name, so epochs number on and the same sinks
    follow. When a phase ends on its own (not by a stop or a failure), ``<source>:__phase__`` moves to the
    next one in the state backend, so a restart resumes in the right phase at that phase's position."""

    def __init__(self, runner: PipelineRunner, source: Source, phases: list[Source]) -> None:
        self.runner = runner
        self.source = source
        self.phases = phases
        self.phase_key = f"{source.name}:__phase__"
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
            kind = DriverSourceQuery if phase.reads_on_driver else SourceQuery
            query = kind(self.runner, phase, start, epoch)
            if query.exhausted:
                log.info("%s has nothing after position %s", phase.label, start)
                query.close()
                self._advance()
                continue
            self.runner._register(phase)
            assert self.spark is not None
            query.start(self.spark, self.runner._replay_end(phase, start, epoch))
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

    def cleanup(self) -> None:
        for query in [*self.done, *([self.current] if self.current else [])]:
            query.cleanup()


class PipelineRunner:
    def __init__(
        self,
        plan: Plan,
        settings: Settings,
        spark: SparkSession,
        state: StateBackend,
        stop: threading.Event | None = None,
        summary: RunSummary | None = None,
    ) -> None:
        self.plan = plan
        self.settings = settings
        self.spark = spark
        self.state = state
        self.summary = summary or RunSummary()
        self.checkpoint_root = Path(settings.spark.checkpoint_root) / safe_name(settings.application_id)
        self.run_id = uuid.uuid4().hex[:16]
        self.folders = RunFolders(self.checkpoint_root, self.run_id)
        self.lease: RunLease | None = None
        self._stop = stop or threading.Event()
        self._rows_lock = threading.Lock()
        self._limit_reached = False
        """`num_records_before_stop` was reached: the stop is the run's own, not a signal's."""

    def count_sink_rows(self, sink: str, written: Written | int) -> None:
        """Add one epoch's deferred-write result to the summary: rows always, operations for a `Written`.

        With ``num_records_before_stop``, the first sink to reach that many rows requests a graceful stop: the
        epoch being finished still commits (so does one Spark had already handed over), nothing after it runs."""
        with self._rows_lock:
            self.summary.sink_rows[sink] = total = self.summary.sink_rows.get(sink, 0) + rows_of(written)
            if isinstance(written, Written):
                ops = self.summary.sink_ops.setdefault(sink, Written().as_dict())
                for op, count in written.as_dict().items():
                    ops[op] += count
            limit = self.settings.num_records_before_stop
            if limit is None or total < limit or self._limit_reached:
                return
            self._limit_reached = True
        log.info("Stopping after %d records (sink '%s' wrote %d)", limit, sink, total)
        self._stop.set()

    def check_lease(self) -> None:
        """Raise once this run may no longer hold its pipeline's lease (before a commit, and while supervising)."""
        if self.lease is not None:
            self.lease.check()

    def request_stop(self) -> None:
        """Stop taking new data; the in-flight epoch finishes and commits. Safe from any thread."""
        self._stop.set()

    def run(self) -> RunSummary:
        started = time.monotonic()
        ctx = RunContext(self.settings, self.state, self.spark)
        restore = _install_signal_handlers(self.request_stop)
        queries: list[SourceQuery | PhasedQuery] = []
        initialized = []
        pipeline = self.plan.pipeline
        self.lease = RunLease(
            self.state, pipeline.name, pipeline.path, self.settings.state_backend.lease_ttl_sec, self.run_id
        )
        try:
            if not self.lease.acquire(self._stop):  # stopped while waiting for another run's lease
                self.summary.stopped_by_signal = True
                return self.summary
            self.folders.claim()
            for op in self.plan.operators.values():
                with error_context(op.label):
                    op.initialize(ctx)
                initialized.append(op)
            self.folders.sweep([node.name for node in pipeline.sources])
            for source_node in self.plan.pipeline.sources:
                source = self.plan.source(source_node.name)
                phases = source.phases()
                if phases is not None:
                    phased = PhasedQuery(self, source, phases)
                    queries.append(phased)
                    phased.start(self.spark)
                    continue
                self._register(source)
                start = source.load_position(self.state)
                saved_epoch = self.state.get(epoch_key(source.name)) or {}
                kind = DriverSourceQuery if source.reads_on_driver else SourceQuery
                query = kind(self, source, start, int(saved_epoch.get("epoch", 0)))
                queries.append(query)
                if query.exhausted:
                    log.info("%s has nothing after position %s; not started", source.label, start)
                    continue
                query.start(self.spark, self._replay_end(source, start, query.epoch))
            self._supervise(queries)
            self.summary.stopped_by_signal = self._stop.is_set() and not self._limit_reached
            return self.summary
        finally:
            try:
                for query in queries:
                    query.stop()
                for query in queries:
                    query.close()
                for op in reversed(initialized):
                    try:
                        op.terminate()
                    except Exception as exc:  # keep shutting the others down
                        log.warning("%s: terminate failed: %s", op.label, exc)
                for query in queries:
                    query.cleanup()
            finally:  # last, whatever happened: the next run may start from here on
                self.folders.release()
                self.lease.release()
                restore()
                self.summary.duration_sec = time.monotonic() - started

    def _supervise(self, queries: list[SourceQuery | PhasedQuery]) -> None:
        grace_deadline: float | None = None
        while True:
            self.check_lease()
            for query in queries:
                query.poll()
                error = query.failure()
                if error is not None:
                    for other in queries:
                        other.request_stop()
                    raise _as_streamling_error(error, query.source.label)
                if query.exhausted and query.idle():
                    query.stop()
            if self._stop.is_set():
                if grace_deadline is None:
                    log.info("Stop requested: finishing the in-flight epoch, then stopping")
                    grace_deadline = time.monotonic() + SHUTDOWN_GRACE_SEC
                    for query in queries:
                        query.request_stop()
                for query in queries:
                    if query.idle() or time.monotonic() > grace_deadline:
                        query.stop()
            if not any(q.active() for q in queries):
                for query in queries:
                    error = query.failure()
                    if error is not None:
                        raise _as_streamling_error(error, query.source.label)
                return
            time.sleep(0.05)

    def _replay_end(self, source: Source, start: dict[str, Any], committed: int) -> dict[str, Any] | None:
        """Where the first epoch must end so that sinks which applied the next epoch before a crash (but
        whose positions never reached the state backend) see exactly that epoch again and skip it."""
        ends: list[dict[str, Any]] = []
        for name in self.plan.sinks_of(source.name):
            sink = self.plan.operators[name]
            assert isinstance(sink, Sink)
            with error_context(sink.label):
                applied = sink.applied_epoch(source.name)
            if applied is None or applied.id <= committed:
                continue
            if applied.id == committed + 1 and _same(applied.start, start):
                ends.append(dict(applied.end))
                continue
            log.warning(
                "%s: recorded epoch %d of %s (from %s) does not follow the state backend's epoch %d at %s; "
                "the state was reset or belongs to another run, so replayed rows are applied again",
                sink.label,
                applied.id,
                source.label,
                applied.start,
                committed,
                start,
            )
        if not ends:
            return None
        if any(not _same(end, ends[0]) for end in ends[1:]):
            log.warning("%s: sinks recorded different ends for epoch %d: %s", source.label, committed + 1, ends)
        return ends[0]

    def _register(self, source: Source) -> None:
        data_source = getattr(source, "data_source", None)
        if data_source is not None:
            self.spark.dataSource.register(data_source)


def _as_streamling_error(error: BaseException, where: str) -> StreamlingError:
    if isinstance(error, StreamlingError):
        return error
    return wrap(error, where)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _install_signal_handlers(on_stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT request a graceful stop; only possible from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handle(signum: int, _frame: object) -> None:
        log.info("Received %s", signal.Signals(signum).name)
        on_stop()

    for sig in previous:
        signal.signal(sig, handle)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
