"""The Kafka source's stream reader: it plans ``[start, end)`` offset ranges on the driver (`runtime/reading.py`
hosts it) and reads them in Spark tasks, in parallel, with consumers kept per Python worker between epochs.

The driver imports this module with the source; pyarrow, the decoders and the dead-letter targets are imported
where a read needs them. The workers' daemon (`spark/worker_daemon`) imports them once, before forking the
readers."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from streamling.core.held import HELD
from streamling.core.pacing import Pacer
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.kafka.availability import Outage, is_unavailable, patience, transient_kafka_error
from streamling.kafka.source.offsets import (
    initial_offsets,
    list_partitions,
    open_consumer,
    watermarks,
)
from streamling.telemetry.logs import configure_worker_logging
from streamling.telemetry.tasks import OFF, NodeRecorder

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("streamling.kafka")

MIN_ROWS_PER_TASK = 20_000
READ_STALL_TIMEOUT_SEC = 60.0
PROBE_AFTER_SEC = 5.0  # a read that got nothing this long checks whether the broker is reachable
PROBE_TIMEOUT_SEC = 3.0
PARTITION_REFRESH_SEC = 10.0


# ---------------------------------------------------------------- Spark data source (reader side)


class Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int, topic: str = "", piece: int = 0) -> None:
        self.partition = partition
        self.start = start
        self.end = end
        self.topic = topic
        self.piece = piece
        """Which of the partition's ranges this is, when a large backlog is split (`partitions`)."""

    @property
    def locality_key(self) -> tuple[str, int]:
        """On a cluster, every epoch's range of one partition prefers one executor, whose Python worker holds the
        source's consumer (`spark/locality.py`); a split backlog's further pieces go to the executors after it."""
        return self.topic, self.partition + self.piece


def _reader_consumer(options: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """One consumer per Python worker and source, reused across epochs, closed once no run reads with it
    (`core/held.py`)."""
    key = json.dumps({k: v for k, v in options.items() if k.startswith(("kafka_", "app", "source"))}, sort_keys=True)
    return HELD.get("kafka consumer", key, lambda: open_consumer(options, "read"), lambda c: c.close())


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str], schema: T.StructType, recorder: NodeRecorder = OFF) -> None:
        self.options = dict(options)
        self.recorder = recorder
        """Where the reading tasks report dead-lettered records (it travels inside this reader to them)."""
        self.topic = options["topic"]
        self.start = {k: int(v) for k, v in json.loads(options["start"]).items()}
        self.ending = {k: int(v) for k, v in json.loads(options.get("ending") or "{}").items()} or None
        self.parallelism = max(1, int(options.get("parallelism", "1")))
        self.batch_rows = int(options["batch_rows"])
        self.fetch_timeout_sec = float(options.get("fetch_timeout_sec", "1.0"))
        """``kafka_source.consumer_fetch_timeout_sec``: how long one ``consume`` waits for records."""
        self.stall_timeout_sec = float(options.get("stall_timeout_sec", str(READ_STALL_TIMEOUT_SEC)))
        """``kafka_source.stall_watchdog_timeout_sec``: no record this long fails the epoch (retriable); 0: off."""
        self.pacer = Pacer.from_options(self.options)
        self.schema = schema
        self._consumer = None
        self._partitions: list[int] = []
        self._partitions_at = 0.0
        self.replay_end = json.loads(options.get("replay_end") or "null")
        self._outage = Outage(f"kafka source '{options['source']}'", "broker", patience(options))

    # Driver side: offsets and planning.
    def _admin(self):  # type: ignore[no-untyped-def]
        if self._consumer is None:
            configure_worker_logging(self.options.get("log_level", "info"), self.options.get("log_format", "text"))
            self._consumer = open_consumer(self.options, "plan")
        return self._consumer

    def initialOffset(self) -> dict:
        return {k: v for k, v in self.start.items()}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        """While the broker is unreachable the end stays at `start`: no new epoch, for up to the patience."""
        if self.replay_end is not None:  # the first epoch repeats one a sink already applied
            end, self.replay_end = self.replay_end, None
            return {k: int(v) for k, v in end.items()}
        try:
            end = self._latest(start, limit)
        except StreamlingError as exc:
            if not is_unavailable(exc) or not self._outage.failed(exc.message):
                raise
            return {k: int(v) for k, v in start.items()}
        self._outage.recovered()
        return end

    def _latest(self, start: dict, limit: Any) -> dict:
        consumer = self._admin()
        now = time.monotonic()
        if now - self._partitions_at > PARTITION_REFRESH_SEC:
            timeout = PROBE_TIMEOUT_SEC if self._outage.ongoing else 10  # a quick answer while waiting it out
            self._partitions = list_partitions(consumer, self.topic, timeout=timeout)
            self._partitions_at = now
        current = {k: int(v) for k, v in start.items()}
        new = [p for p in self._partitions if str(p) not in current and self.ending is None]
        if new:  # appear in this epoch's end at their starting offset; read from the next epoch on
            current.update(initial_offsets(consumer, self.topic, new, self.options["starting_offsets"]))
            return current
        pending: dict[str, int] = {}
        for key in list(current):
            low, high = watermarks(consumer, self.topic, int(key))
            if low > current[key]:
                current[key] = self._data_lost(key, current[key], low)
            offset = current[key]
            if self.ending is not None:
                high = self.ending.get(key, offset)
            if high > offset:
                pending[key] = high - offset
        at_end = self.ending is not None
        first = self.pacer.first_due
        take = self.pacer.take(sum(pending.values()), at_end=at_end, limit=getattr(limit, "max_rows", None))
        shares = pack(current, pending, take) if first else concentrate(current, pending, take, self.parallelism)
        return {k: v + n for k, v, n in shares}

    def _data_lost(self, key: str, offset: int, earliest: int) -> int:
        """The next record to read was deleted by the broker (retention, `DeleteRecords`) before it was read: an
        error, or with ``on_data_loss: skip`` one WARNING, the `records_lost` count, and the earliest offset kept
        (the epoch's range may start below it: the reading consumer starts at the earliest record)."""
        lost = earliest - offset
        where = f"kafka source '{self.options['source']}': topic '{self.topic}' partition {key}"
        what = f"{lost} records (offsets {offset} to {earliest - 1}) were deleted by the broker before they were read"
        if self.options.get("on_data_loss", "fail") != "skip":
            raise StreamlingError.user(
                f"{where}: {what}; its earliest offset is now {earliest}. Set on_data_loss: skip to go on from there"
            )
        log.warning("%s: %s; on_data_loss: skip goes on from offset %d", where, what, earliest)
        self.recorder.count("records_lost", lost)
        return earliest

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = [(int(k), int(start.get(k, v)), int(v)) for k, v in end.items() if int(v) > int(start.get(k, v))]
        if not ranges:
            return []
        per_partition = max(1, math.ceil(self.parallelism / len(ranges)))
        out: list[InputPartition] = []
        for p, lo, hi in ranges:
            pieces = max(1, min(per_partition, (hi - lo) // MIN_ROWS_PER_TASK))
            bounds = [lo + (hi - lo) * i // pieces for i in range(pieces + 1)]
            pairs = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
            out += [Range(p, a, b, self.topic, piece) for piece, (a, b) in enumerate(pairs)]
        return out

    # Executor side: reading one range.
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Range)
        from confluent_kafka import KafkaError, TopicPartition
        from pyspark.sql.pandas.types import to_arrow_schema

        configure_worker_logging(self.options.get("log_level", "info"), self.options.get("log_format", "text"))
        consumer = _reader_consumer(self.options)
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        consumer.assign([TopicPartition(self.topic, partition.partition, partition.start)])
        where = f"topic '{self.topic}' partition {partition.partition}"
        outage = Outage(f"kafka source '{self.options['source']}' ({where})", "broker", patience(self.options))
        try:
            position, pending = partition.start, []
            last_progress = last_probe = time.monotonic()
            while position < partition.end:
                # At most what completes the pending batch: a batch holds exactly `batch_rows` records (the last
                # of a range fewer), the original's Kafka `batch_size`.
                messages = consumer.consume(
                    min(self.batch_rows - len(pending), partition.end - position, 10_000),
                    timeout=self.fetch_timeout_sec,
                )
                if not messages and time.monotonic() - max(last_progress, last_probe) > PROBE_AFTER_SEC:
                    last_probe = time.monotonic()
                    if self._probe(consumer, outage):
                        last_progress = time.monotonic()  # reachable again: the stall timeout starts anew
                if not messages:
                    # While the broker is unreachable librdkafka reconnects, and the outage's patience applies.
                    watchdog = self.stall_timeout_sec
                    stall = max(watchdog, outage.timeout_sec) if outage.ongoing else watchdog
                    if stall and time.monotonic() - last_progress > stall:
                        raise StreamlingError.retry(
                            f"topic '{self.topic}' partition {partition.partition}: no records after offset "
                            f"{position - 1} for {stall:.0f}s, expected up to {partition.end - 1}"
                        )
                    continue
                errors = [m.error() for m in messages if m.error() is not None]
                if errors:
                    fatal = [e for e in errors if e.code() != KafkaError._PARTITION_EOF]
                    waiting = [e for e in fatal if transient_kafka_error(e)]
                    if waiting and len(waiting) == len(fatal) and outage.failed(waiting[0].str()):
                        fatal = []
                    if fatal:
                        raise StreamlingError.retry(f"{where}: {fatal[0].str()}")
                    messages = [m for m in messages if m.error() is None]
                    if any(e.code() == KafkaError._PARTITION_EOF for e in errors):
                        position = partition.end  # end of the log: a compacted or deleted tail, nothing more
                if messages:
                    last_progress = time.monotonic()
                    outage.recovered()
                    # Offsets only grow within a partition: look at the last one, trim the rare overshoot.
                    if messages[-1].offset() >= partition.end:
                        messages = [m for m in messages if m.offset() < partition.end]
                        position = partition.end
                    if messages:
                        pending.extend(messages)
                        position = max(position, messages[-1].offset() + 1)
                if len(pending) >= self.batch_rows:
                    yield self._to_batch(pending, partition.partition, arrow_schema)
                    pending = []
            if pending:
                yield self._to_batch(pending, partition.partition, arrow_schema)
        finally:
            consumer.unassign()
            # librdkafka drops the unassigned partition's queued records only when the queue is next served; until
            # then they stay in memory next to the following read's. A broker that answers a fetch with a whole
            # partition's tail made that two tails per reader (measured: 1.0 GB -> 0.58 GB peak for a consumer).
            with contextlib.suppress(Exception):  # freeing memory must not hide what ended the read
                consumer.consume(1, timeout=0)

    def _probe(self, consumer, outage: Outage) -> bool:  # type: ignore[no-untyped-def]
        """Ask for the topic's metadata: librdkafka reports an unreachable broker there, not in ``consume``.
        Returns True when an outage just ended; raises once the outage outlasted the patience."""
        try:
            list_partitions(consumer, self.topic, timeout=PROBE_TIMEOUT_SEC)
        except StreamlingError as exc:
            if not is_unavailable(exc) or not outage.failed(exc.message):
                raise exc.context(f"kafka source '{self.options['source']}'") from None
            return False
        if outage.ongoing:
            outage.recovered()
            return True
        return False

    def _to_batch(self, messages: list, partition: int, arrow_schema: pa.Schema) -> pa.RecordBatch:  # type: ignore[type-arg]
        try:
            return self._convert(messages, partition, arrow_schema)
        except StreamlingError as exc:
            raise exc.context(f"kafka source '{self.options['source']}'") from None

    def _convert(self, messages: list, partition: int, arrow_schema: pa.Schema) -> pa.RecordBatch:  # type: ignore[type-arg]
        """With ``on_error: dead_letter`` the bad records are delivered to the dead-letter target here, in the
        task, before the batch is returned: the epoch commits only after every task returned, so a dead letter
        is written before its position is committed (at-least-once; a Postgres table drops repeats). Carrying
        the bad records out as a side output instead would put raw bytes and headers through the DataFrame of
        every epoch and need one more pass over the batch on the driver."""
        import pyarrow as pa

        from streamling.dead_letters import DeadLetterTarget
        from streamling.kafka.source.decoding import dead_letter_of, decode_json, decoder_for, op_of_headers

        target = DeadLetterTarget.from_options(self.options)
        rejected: list[tuple[int, str]] | None = [] if target is not None else None
        ops = [op_of_headers(m.headers()) for m in messages]
        if None in ops:
            for index, op in enumerate(ops):
                if op is not None:
                    continue
                bad = messages[index]
                value = dict(bad.headers() or []).get("dbz.op") or b""
                error = (
                    f"message at topic '{self.topic}' partition {partition} offset {bad.offset()} has an unknown "
                    f"dbz.op header {value.decode('utf-8', 'replace')!r}; expected c, r, u or d"
                )
                if rejected is None:
                    raise StreamlingError.user(error)
                rejected.append((index, error))
            kept = [m for m, op in zip(messages, ops, strict=True) if op is not None]
            known = [i for i, op in enumerate(ops) if op is not None]
        else:
            kept, known = messages, None
        decoded: list[tuple[int, str]] | None = [] if rejected is not None else None
        if self.options["data_format"] == "avro":
            values = decoder_for(self.options).decode([m.value() for m in kept], kept, partition, decoded)
        else:
            values = decode_json(kept, f"topic '{self.topic}' partition {partition}", arrow_schema, decoded)
        if rejected is not None and decoded is not None:
            rejected += [(known[i] if known is not None else i, error) for i, error in decoded]
        if rejected:
            assert target is not None
            target.deliver([dead_letter_of(messages[i], error) for i, error in sorted(rejected)])
            self.recorder.count("dead_lettered", len(rejected))
            bad = {i for i, _ in rejected}
            messages = [m for i, m in enumerate(messages) if i not in bad]
            ops = [op for i, op in enumerate(ops) if i not in bad]
        # A value field named _gs_op is superseded by the header-derived one (the schema drops it too).
        columns = [c for c, name in zip(values.columns, values.schema.names, strict=True) if name != GS_OP]
        if self.options.get("include_metadata") == "true":
            columns += [
                pa.array([partition] * len(messages), pa.int32()),
                pa.array([m.offset() for m in messages], pa.int64()),
                pa.array([m.timestamp()[1] * 1000 for m in messages], pa.int64()).cast(pa.timestamp("us", "UTC")),
            ]
        columns.append(pa.array(ops, pa.string()))
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)

    def commit(self, end: dict) -> None:
        """Positions are committed by the runtime after every sink flushed, not here."""

    def stop(self) -> None:
        """On the driver, when the source's query ends: close the planning consumer."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def pack(current: Mapping[str, int], pending: Mapping[str, int], take: int) -> Iterator[tuple[str, int, int]]:
    """Take `take` rows from as few partitions as possible, those with most pending first. For a run's small first
    epoch: one read task instead of one per partition, so a new engine's first job pays its first-time costs once,
    not in one wave of tasks after another (measured, 50k records in 4 partitions → Postgres, new process: first
    row 7.12 → 6.61 s, medians of 6)."""
    shares: dict[str, int] = {}
    left = take
    for k in sorted(pending, key=lambda k: (-pending[k], k)):
        shares[k] = min(left, pending[k])
        left -= shares[k]
    for k, offset in current.items():
        yield k, offset, shares.get(k, 0)


def concentrate(
    current: Mapping[str, int], pending: Mapping[str, int], take: int, width: int
) -> Iterator[tuple[str, int, int]]:
    """Share `take` rows across the `width` partitions with most pending (`width`: the epoch's reading tasks),
    spilling over to the next ones only when those run short; the rest wait for a later epoch, where they have
    most pending. Every read task fetches its partition from its range's start, and librdkafka parses all the
    broker sends, which can be the partition's whole tail (noida-db's answer to any fetch): a backlog read by
    half as many tasks per epoch costs half as many tails (measured, 5M records in 4 partitions, local[2]:
    39.1 / 42.1 -> 35.3 / 35.1 s, 43.8 / 47.3 -> 39.4 / 40.2 CPU-s). What all partitions have pending is taken
    whole when it fits the epoch."""
    ordered = sorted(pending, key=lambda k: (-pending[k], k))
    chosen: dict[str, int] = {}
    for k in ordered:
        if len(chosen) >= width and sum(chosen.values()) >= take:
            break
        chosen[k] = pending[k]
    shares = {k: n for k, _, n in allocate(dict.fromkeys(chosen, 0), chosen, take)}
    for k, offset in current.items():
        yield k, offset, shares.get(k, 0)


def allocate(current: Mapping[str, int], pending: Mapping[str, int], take: int) -> Iterator[tuple[str, int, int]]:
    """Share `take` rows across partitions in proportion to what each has pending."""
    total = sum(pending.values())
    shares = {k: (n * take // total if total else 0) for k, n in pending.items()}
    left = take - sum(shares.values())
    for k in sorted(pending, key=lambda k: pending[k] - shares[k], reverse=True):
        if left <= 0:
            break
        if shares[k] < pending[k]:
            shares[k] += 1
            left -= 1
    for k, offset in current.items():
        yield k, offset, shares.get(k, 0)
