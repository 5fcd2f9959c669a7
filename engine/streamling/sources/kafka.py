"""The Kafka source: a Spark Python Data Source over confluent-kafka, Avro (Schema Registry) or JSON.

Each epoch reads a fixed ``[start, end)`` offset range per partition, so a replayed epoch reads the same
records. Ranges are split into Spark input partitions (per Kafka partition, and further when one
partition holds a large range) and read in parallel by executors that keep their consumers between
epochs. Positions are committed by the runtime to the state backend under
``<source>:<topic>:<partition>`` and, when a group is configured, to the consumer group.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from streamling.dead_letters import DeadLetter, DeadLetterTarget
from streamling.errors import StreamlingError, first_line
from streamling.kafka.availability import Outage, describe, is_unavailable, transient_kafka_error, wait_out
from streamling.kafka.avro import AvroDecoder, doc_primary_keys
from streamling.kafka.avro import spark_schema as avro_spark_schema
from streamling.kafka.clients import connection_options, kafka_config, registry
from streamling.kafka.lag import LagReporter
from streamling.operators import RunContext, Source
from streamling.plugins.registry import operator
from streamling.sources.pacing import Pacer
from streamling.state import StateBackend
from streamling.telemetry.logs import configure_worker_logging
from streamling.topology.spec import ErrorHandlingSpec, SourceSpec
from streamling.types import GS_OP, check_column_types, parse_type

log = logging.getLogger("streamling.kafka")

METADATA_COLUMNS = T.StructType(
    [
        T.StructField("_partition", T.IntegerType(), False),
        T.StructField("_offset", T.LongType(), False),
        T.StructField("_timestamp", T.TimestampType(), True),
    ]
)
DBZ_OPS = {b"c": "i", b"r": "i", b"u": "u", b"d": "d"}
MIN_ROWS_PER_TASK = 20_000
READ_STALL_TIMEOUT_SEC = 60.0
PROBE_AFTER_SEC = 5.0  # a read that got nothing this long checks whether the broker is reachable
PROBE_TIMEOUT_SEC = 3.0
PARTITION_REFRESH_SEC = 10.0


class SchemaIdOverride(BaseModel):
    """Records framed with writer schema id `from` are decoded with schema `to` instead."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: PositiveInt = Field(alias="from")
    to: PositiveInt


class KafkaSourceSpec(SourceSpec, ErrorHandlingSpec):
    type: Literal["kafka"]
    identity_labels: ClassVar[tuple[str, ...]] = ("topic",)
    topic: str = Field(min_length=1)
    data_format: Literal["avro", "json"] = "avro"
    schema_: dict[str, str] | None = Field(default=None, alias="schema")
    starting_offsets: str = "earliest"
    ending_offsets: Literal["latest"] | None = None
    filter: str | None = None
    include_metadata: bool = False
    validate_writer_schema_ordering: bool = True
    schema_id_overrides: list[SchemaIdOverride] = Field(default_factory=list)
    record_batch_size: PositiveInt | None = None
    parallelism: PositiveInt | None = None
    """The most Spark input partitions (reading tasks) an epoch's offset ranges are split into; default Spark's
    default parallelism."""

    @field_validator("starting_offsets", mode="before")
    @classmethod
    def _offsets(cls, value: object) -> object:
        text = str(value).strip().lower() if value is not None else value
        if isinstance(text, str) and (text in ("earliest", "latest") or text.isdigit()):
            return text
        raise ValueError("must be 'earliest', 'latest' or a timestamp in epoch milliseconds")

    @field_validator("schema_")
    @classmethod
    def _types(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        check_column_types(value)
        return value

    @property
    def bounded(self) -> bool:
        return self.ending_offsets is not None

    @model_validator(mode="after")
    def _schema_matches_format(self) -> KafkaSourceSpec:
        if self.data_format == "json" and not self.schema_:
            raise ValueError("data_format 'json' requires 'schema' (column: type)")
        if self.data_format == "avro" and self.schema_:
            raise ValueError("data_format 'avro' takes its schema from the Schema Registry; remove 'schema'")
        if self.data_format != "avro" and self.schema_id_overrides:
            raise ValueError("field 'schema_id_overrides' applies only to data_format 'avro'")
        seen: set[int] = set()
        for override in self.schema_id_overrides:
            if override.from_ in seen:
                raise ValueError(f"field 'schema_id_overrides': schema id {override.from_} is overridden twice")
            seen.add(override.from_)
        return self

    def overrides(self) -> dict[int, int]:
        return {o.from_: o.to for o in self.schema_id_overrides}


def subject_of(topic: str) -> str:
    return f"{topic}-value"


def patience(options: Mapping[str, str]) -> float:
    """How long an unreachable broker or registry is waited out (`unavailable_timeout_sec`)."""
    return float(options.get("unavailable_timeout_sec", "300"))


# ---------------------------------------------------------------- shared by driver and reader processes


def _consumer(options: Mapping[str, str], purpose: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer

    group = options.get("kafka_group_id") or f"streamling-{options['app']}"
    return Consumer(
        kafka_config(
            options,
            **{
                "group.id": f"{group}-{options['source']}" if options.get("kafka_group_id") else group,
                "enable.auto.commit": False,
                "enable.partition.eof": purpose == "read",
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 16 * 1024 * 1024,
                "queued.max.messages.kbytes": 32 * 1024,
                "queued.min.messages": 20000,
                "session.timeout.ms": 45000,
            },
        )
    )


def list_partitions(consumer, topic: str, timeout: float = 10) -> list[int]:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read metadata of topic '{topic}': {exc.args[0].str()}") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        reason = info.error.str() if info is not None and info.error is not None else "not found"
        if info is not None and info.error is not None and transient_kafka_error(info.error):
            raise StreamlingError.unavailable(f"topic '{topic}' is not available: {reason}")
        raise StreamlingError.retry(f"topic '{topic}' is not available: {reason}")
    return sorted(info.partitions)


def high_watermark(consumer, topic: str, partition: int) -> int:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException, TopicPartition

    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
    except KafkaException as exc:
        raise StreamlingError.unavailable(
            f"cannot read the end offset of topic '{topic}' partition {partition}: {describe(exc)}"
        ) from None


def initial_offsets(consumer, topic: str, partitions: list[int], starting: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Offsets for `starting_offsets`: earliest, latest, or the first record at/after an epoch-ms."""
    from confluent_kafka import KafkaException, TopicPartition

    out: dict[str, int] = {}
    try:
        if starting.isdigit():
            asked = [TopicPartition(topic, p, int(starting)) for p in partitions]
            for tp in consumer.offsets_for_times(asked, timeout=10):
                out[str(tp.partition)] = tp.offset if tp.offset >= 0 else high_watermark(consumer, topic, tp.partition)
            return out
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            out[str(p)] = low if starting == "earliest" else high
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read the offsets of topic '{topic}': {describe(exc)}") from None
    return out


def range_offsets(consumer, topic: str, partitions: list[int], bound: int | datetime) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Where a range bound falls in each partition: an offset clamped to the partition's offsets, or for a time
    the first record whose timestamp is at or after it (the end of the partition when none is)."""
    from confluent_kafka import KafkaException, TopicPartition

    if isinstance(bound, datetime):
        return initial_offsets(consumer, topic, partitions, str(int(bound.timestamp() * 1000)))
    out: dict[str, int] = {}
    try:
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            out[str(p)] = min(max(bound, low), high)
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read the offsets of topic '{topic}': {describe(exc)}") from None
    return out


# ---------------------------------------------------------------- Spark data source (reader side)


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition = partition
        self.start = start
        self.end = end


_READERS: dict[str, Any] = {}
_READERS_LOCK = threading.Lock()


def _reader_consumer(options: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """One consumer per Python worker and source, reused across epochs."""
    key = json.dumps({k: v for k, v in options.items() if k.startswith(("kafka_", "app", "source"))}, sort_keys=True)
    with _READERS_LOCK:
        consumer = _READERS.get(key)
        if consumer is None:
            consumer = _consumer(options, "read")
            _READERS[key] = consumer
        return consumer


_DECODERS: dict[str, AvroDecoder] = {}


def _decoder(options: Mapping[str, str]) -> AvroDecoder:
    overrides = options.get("schema_id_overrides", "{}")
    key = "/".join((options["reader_schema_id"], options["topic"], options["source"], overrides))
    decoder = _DECODERS.get(key)
    if decoder is None:
        client = registry(options)
        subject = subject_of(options["topic"])
        outage = Outage(f"kafka source '{options['source']}'", "Schema Registry", patience(options))

        def fetch_writer(schema_id: int) -> tuple[str, list[tuple[str, int]]]:
            """A new writer schema id blocks this read until the registry answers (or the patience ends), so no
            position moves past records that could not be decoded."""

            def fetch() -> tuple[str, list[tuple[str, int]]]:
                schema = client.get_schema(schema_id)
                return schema.schema_str, [(v.subject, v.version) for v in client.get_schema_versions(schema_id)]

            try:
                return wait_out(fetch, outage)
            except Exception as exc:
                if getattr(exc, "http_status_code", None) == 404:  # the id is unknown: the record's fault
                    raise StreamlingError.user("not in the Schema Registry") from None
                raise StreamlingError.retry(
                    f"failed to fetch schema id {schema_id} from the Schema Registry: {exc}"
                ) from None

        decoder = AvroDecoder(
            json.loads(options["reader_schema"]),
            int(options["reader_schema_version"]),
            subject,
            options["topic"],
            fetch_writer,
            validate_ordering=options.get("validate_writer_schema_ordering", "true") == "true",
            overrides={int(k): int(v) for k, v in json.loads(overrides).items()},
        )
        _DECODERS[key] = decoder
    return decoder


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str], schema: T.StructType) -> None:
        self.options = dict(options)
        self.topic = options["topic"]
        self.start = {k: int(v) for k, v in json.loads(options["start"]).items()}
        self.ending = {k: int(v) for k, v in json.loads(options.get("ending") or "{}").items()} or None
        self.parallelism = max(1, int(options.get("parallelism", "1")))
        self.batch_rows = int(options["batch_rows"])
        self.pacer = Pacer.from_options(self.options)
        self.schema = schema
        self._consumer = None
        self._partitions: list[int] = []
        self._partitions_at = 0.0
        self.replay_end = json.loads(options.get("replay_end") or "null")
        self._outage = Outage(f"kafka source '{options['source']}'", "broker", patience(options))

    # Driver side (the streaming source runner): offsets and planning.
    def _admin(self):  # type: ignore[no-untyped-def]
        if self._consumer is None:
            configure_worker_logging(self.options.get("log_level", "info"), self.options.get("log_format", "text"))
            self._consumer = _consumer(self.options, "plan")
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
        for key, offset in current.items():
            if self.ending is not None:
                high = self.ending.get(key, offset)
            else:
                high = high_watermark(consumer, self.topic, int(key))
            if high > offset:
                pending[key] = high - offset
        at_end = self.ending is not None
        take = self.pacer.take(sum(pending.values()), at_end=at_end, limit=getattr(limit, "max_rows", None))
        return {k: v + share for k, v, share in _allocate(current, pending, take)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = [(int(k), int(start.get(k, v)), int(v)) for k, v in end.items() if int(v) > int(start.get(k, v))]
        if not ranges:
            return []
        per_partition = max(1, math.ceil(self.parallelism / len(ranges)))
        out: list[InputPartition] = []
        for p, lo, hi in ranges:
            pieces = max(1, min(per_partition, (hi - lo) // MIN_ROWS_PER_TASK))
            bounds = [lo + (hi - lo) * i // pieces for i in range(pieces + 1)]
            out += [_Range(p, a, b) for a, b in itertools.pairwise(bounds) if b > a]
        return out

    # Executor side: reading one range.
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        from confluent_kafka import KafkaError, TopicPartition

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
                messages = consumer.consume(min(self.batch_rows, partition.end - position, 10_000), timeout=1.0)
                if not messages and time.monotonic() - max(last_progress, last_probe) > PROBE_AFTER_SEC:
                    last_probe = time.monotonic()
                    if self._probe(consumer, outage):
                        last_progress = time.monotonic()  # reachable again: the stall timeout starts anew
                if not messages:
                    # While the broker is unreachable librdkafka reconnects, and the outage's patience applies.
                    stall = (
                        max(READ_STALL_TIMEOUT_SEC, outage.timeout_sec) if outage.ongoing else READ_STALL_TIMEOUT_SEC
                    )
                    if time.monotonic() - last_progress > stall:
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
        target = DeadLetterTarget.from_options(self.options)
        rejected: list[tuple[int, str]] | None = [] if target is not None else None
        ops = [_op(m.headers()) for m in messages]
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
            values = _decoder(self.options).decode([m.value() for m in kept], kept, partition, decoded)
        else:
            values = _decode_json(kept, f"topic '{self.topic}' partition {partition}", arrow_schema, decoded)
        if rejected is not None and decoded is not None:
            rejected += [(known[i] if known is not None else i, error) for i, error in decoded]
        if rejected:
            assert target is not None
            target.deliver([_letter(messages[i], error) for i, error in sorted(rejected)])
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


def _op(headers: list | None) -> str | None:  # type: ignore[type-arg]
    """``_gs_op`` from the ``dbz.op`` header; None for an unknown value."""
    if not headers:
        return "i"
    key, value = headers[0]
    if key == "dbz.op" and len(headers) == 1:  # the common case, without a loop
        return DBZ_OPS.get(value or b"")
    for key, value in headers:
        if key == "dbz.op":
            return DBZ_OPS.get(value or b"")
    return "i"


def _letter(message: Any, error: str) -> DeadLetter:
    return DeadLetter(
        error=error,
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or []),
    )


def _allocate(current: Mapping[str, int], pending: Mapping[str, int], take: int) -> Iterator[tuple[str, int, int]]:
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


def _decode_json(
    messages: list,  # type: ignore[type-arg]
    where: str,
    arrow_schema: pa.Schema,
    rejected: list[tuple[int, str]] | None = None,
) -> pa.RecordBatch:
    """JSON payloads → Arrow; a bad one raises naming it, or with `rejected` is listed there and left out."""
    import pyarrow.json as pajson

    value_fields = [f for f in arrow_schema if f.name != GS_OP and f.name not in METADATA_COLUMNS.fieldNames()]
    value_schema = pa.schema(value_fields)
    options = pajson.ParseOptions(explicit_schema=value_schema, unexpected_field_behavior="ignore")
    problems: dict[int, str] = {}
    payloads: dict[int, bytes] = {}
    for i, m in enumerate(messages):
        payload = m.value()
        if not payload:
            problems[i] = f"message at {where} offset {m.offset()} has an empty payload (tombstone)"
            if rejected is None:
                break
            continue
        payloads[i] = payload.replace(b"\n", b" ").replace(b"\r", b" ")
    if problems and rejected is None:
        raise StreamlingError.user(next(iter(problems.values())))
    empty = pa.RecordBatch.from_pylist([], value_schema)
    if not payloads:
        if rejected is not None:
            rejected += sorted(problems.items())
        return empty
    try:
        table = pajson.read_json(pa.py_buffer(b"\n".join(payloads.values())), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for i, payload in payloads.items():
            try:
                pajson.read_json(pa.py_buffer(payload), parse_options=options)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                reason = str(exc).splitlines()[0]
                problem = (
                    f"message at {where} offset {messages[i].offset()} is not valid JSON for the declared schema: "
                    f"{reason}"
                )
                if rejected is None:
                    raise StreamlingError.user(problem) from None
                problems[i] = problem
        if rejected is None:
            raise
        good = [p for i, p in payloads.items() if i not in problems]
        table = pajson.read_json(pa.py_buffer(b"\n".join(good)), parse_options=options) if good else None
    if rejected is not None:
        rejected += sorted(problems.items())
    return table.combine_chunks().to_batches()[0] if table is not None and table.num_rows else empty


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "streamling_kafka"

    def schema(self) -> T.StructType:
        return T.StructType.fromJson(json.loads(self.options["spark_schema"]))

    def streamReader(self, schema: T.StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options, schema)


# ---------------------------------------------------------------- the operator (driver)


@operator("kafka", KafkaSourceSpec)
class KafkaSource(Source[KafkaSourceSpec]):
    data_source: ClassVar[type[DataSource]] = KafkaDataSource

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = connection_options(self.settings.kafka_source)
        self.dead_letter = (
            DeadLetterTarget.of(self.spec.dead_letter, self.settings, self.name, self.label, None)
            if self.spec.dead_letter is not None
            else None
        )
        self._reader_schema: tuple[str, int, int] | None = None
        self._consumer = None
        self._ending: dict[str, int] | None = None
        self._group_pending: dict[int, int] = {}  # consumer-group offsets not committed yet (broker unreachable)
        self._group_outage = self._outage("broker")
        self._committed: dict[str, int] | None = None  # what the state backend holds, for lag reports
        self._lag = LagReporter(
            self.label,
            self.topic,
            self.settings.kafka_source.lag_report_interval_ms / 1000,
            lambda: self._committed,
            lambda: _consumer(self._options(), "plan"),
        )

    @property
    def label(self) -> str:
        return f"kafka source '{self.name}'"

    @property
    def topic(self) -> str:
        return self.spec.topic

    def _options(self) -> dict[str, str]:
        return {**self.connection, "app": self.settings.application_id, "source": self.name, "topic": self.topic}

    def _outage(self, service: str) -> Outage:
        return Outage(self.label, service, patience(self.connection))

    def reader_schema(self) -> tuple[str, int, int]:
        """The latest schema of ``<topic>-value`` as (schema, version, id), captured once per run; an unreachable
        registry is waited for."""
        if self._reader_schema is None:
            subject = subject_of(self.topic)
            try:
                latest = wait_out(
                    lambda: registry(self.connection).get_latest_version(subject), self._outage("Schema Registry")
                )
            except Exception as exc:
                message = (
                    f"{self.label}: failed to fetch the Avro schema of subject '{subject}' from the Schema Registry "
                    f"at {self.connection['registry_url']}: {first_line(exc)}"
                )
                if is_unavailable(exc):  # an outage outlasted the patience: not the pipeline's fault
                    raise StreamlingError.unavailable(message) from None
                raise StreamlingError.user(message) from None
            self._reader_schema = (latest.schema.schema_str, int(latest.version), int(latest.schema_id))
        return self._reader_schema

    def primary_key(self) -> list[str]:
        """The YAML's ``primary_key``, else the one the Avro record's ``doc`` declares (``{"primaryKeys": [...]}``)."""
        own = super().primary_key()
        if own or self.spec.data_format != "avro":
            return own
        return doc_primary_keys(json.loads(self.reader_schema()[0]), subject_of(self.topic))

    def warnings(self) -> list[str]:
        out = []
        if self.spec.data_format == "avro" and not super().primary_key() and self._reader_schema is not None:
            try:
                keys = self.primary_key()
            except StreamlingError:
                return []  # validation reports the bad doc as an error
            if keys:
                out.append(
                    f"{self.label}: no primary_key given; using {json.dumps(keys)} declared in the doc of the Avro "
                    f"schema of subject '{subject_of(self.topic)}'"
                )
        return out

    def schema(self) -> T.StructType:
        if self.spec.data_format == "avro":
            values = avro_spark_schema(json.loads(self.reader_schema()[0]), subject_of(self.topic))
        else:
            values = T.StructType([T.StructField(c, parse_type(t), True) for c, t in (self.spec.schema_ or {}).items()])
        fields = [f for f in values.fields if f.name != GS_OP]
        if self.spec.include_metadata:
            taken = {f.name for f in fields} & set(METADATA_COLUMNS.fieldNames())
            if taken:
                raise StreamlingError.user(f"{self.label}: include_metadata would shadow fields {sorted(taken)}")
            fields += METADATA_COLUMNS.fields
        return T.StructType([*fields, T.StructField(GS_OP, T.StringType(), False)])

    def refine(self, df: DataFrame) -> DataFrame:
        if not self.spec.filter:
            return df
        try:
            return df.filter(F.expr(self.spec.filter))
        except Exception as exc:
            raise StreamlingError.user(
                f"{self.label}: invalid filter {self.spec.filter!r}: {first_line(exc)}"
            ) from None

    def _driver_consumer(self):  # type: ignore[no-untyped-def]
        if self._consumer is None:
            self._consumer = _consumer(self._options(), "plan")
        return self._consumer

    def initialize(self, ctx: RunContext) -> None:
        # Fail fast when the topic is missing; wait while the broker is unreachable.
        wait_out(lambda: list_partitions(self._driver_consumer(), self.topic), self._outage("broker"))
        for override in self.spec.schema_id_overrides:
            self._check_override(override.from_, override.to)
        if self.dead_letter is not None:
            self.dead_letter.prepare()

    def _check_override(self, framed: int, used: int) -> None:
        """A `to` schema id the registry does not know would fail on the first record framed with `from`."""
        client = registry(self.connection)
        try:
            wait_out(lambda: client.get_schema(used), self._outage("Schema Registry"))
        except Exception as exc:
            if getattr(exc, "http_status_code", None) == 404:
                raise StreamlingError.user(
                    f"{self.label}: schema_id_overrides maps schema id {framed} to {used}, which is not in the "
                    "Schema Registry"
                ) from None
            raise StreamlingError.retry(
                f"{self.label}: cannot read schema id {used} from the Schema Registry: {first_line(exc)}"
            ) from None

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        """State backend offsets win, then the consumer group's, then `starting_offsets`."""
        return wait_out(lambda: self._load_position(state), self._outage("broker"))

    def _load_position(self, state: StateBackend) -> dict[str, Any]:
        from confluent_kafka import TopicPartition

        consumer = self._driver_consumer()
        partitions = list_partitions(consumer, self.topic)
        saved = self.committed_position(state) or {}
        position: dict[str, int] = {}
        group: dict[str, int] = {}
        if self.connection.get("kafka_group_id") and len(saved) < len(partitions):
            asked = [TopicPartition(self.topic, p) for p in partitions]
            group = {str(tp.partition): tp.offset for tp in consumer.committed(asked, timeout=10) if tp.offset >= 0}
        wanted = self.settings.backfill_range
        if wanted is not None:  # the range's start, not the consumer group, is where a range backfill begins
            group = {}
        missing = [p for p in partitions if str(p) not in saved and str(p) not in group]
        if wanted is not None:
            fresh = range_offsets(consumer, self.topic, missing, wanted.start) if missing else {}
        else:
            fresh = initial_offsets(consumer, self.topic, missing, self.spec.starting_offsets) if missing else {}
        for p in partitions:
            key = str(p)
            position[key] = saved.get(key, group.get(key, fresh.get(key, 0)))
        origin = (
            "state backend"
            if saved
            else "consumer group"
            if group
            else f"starting_offsets={self.spec.starting_offsets}"
        )
        log.info("%s resumes %s from %s (%s)", self.label, self.topic, position, origin)
        if wanted is not None:
            ends = range_offsets(consumer, self.topic, partitions, wanted.end)
            self._ending = {str(p): max(position[str(p)], ends[str(p)]) for p in partitions}
            log.info("%s reads the range %s: up to %s", self.label, wanted, self._ending)
        elif self.spec.ending_offsets == "latest":
            self._ending = {
                str(p): max(position[str(p)], high) for p, high in self._high_watermarks(partitions).items()
            }
            log.info("%s reads up to %s (ending_offsets=latest)", self.label, self._ending)
        self._committed = dict(position)
        self._lag.start()
        return position

    def reset_position(self, state: StateBackend) -> list[str]:
        """With a consumer group the start is written out: the group's offsets would be taken otherwise."""
        removed = super().reset_position(state)
        if self.connection.get("kafka_group_id"):
            consumer = self._driver_consumer()
            partitions = wait_out(lambda: list_partitions(consumer, self.topic), self._outage("broker"))
            start = initial_offsets(consumer, self.topic, partitions, self.spec.starting_offsets)
            state.put_many(self.position_entries({}, start, int(time.time() * 1000)))
        return removed

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        prefix = f"{self.name}:{self.topic}:"
        saved = {k.removeprefix(prefix): int(v["offset"]) for k, v in state.items(prefix).items()}
        return saved or None

    def _high_watermarks(self, partitions: list[int]) -> dict[int, int]:
        consumer = self._driver_consumer()
        return {p: high_watermark(consumer, self.topic, p) for p in partitions}

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        if self._ending is None:
            return False
        return all(int(position.get(p, 0)) >= end for p, end in self._ending.items())

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        return {
            f"{self.name}:{self.topic}:{p}": {"offset": int(offset), "updated_at": now_ms}
            for p, offset in end.items()
            if start.get(p) != offset
        }

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        return sum(int(v) - int(start.get(k, v)) for k, v in end.items())

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        consumer = self._driver_consumer()
        partitions = list_partitions(consumer, self.topic)
        wanted = self.settings.backfill_range
        if position is None:
            if wanted is not None:
                position = range_offsets(consumer, self.topic, partitions, wanted.start)
            else:
                position = initial_offsets(consumer, self.topic, partitions, self.spec.starting_offsets)
        if wanted is not None:
            ends = {int(p): o for p, o in range_offsets(consumer, self.topic, partitions, wanted.end).items()}
        else:
            ends = self._high_watermarks(partitions)
        return {str(p): max(0, high - int(position.get(str(p), 0))) for p, high in ends.items()}

    def epoch_committed(self, epoch) -> None:  # type: ignore[no-untyped-def]
        """Mirror the committed positions to the consumer group. The state backend already holds them, so while
        the broker is unreachable the offsets wait and go out with a later epoch's commit."""
        self._committed = {**(self._committed or {}), **{str(p): int(o) for p, o in epoch.end.items()}}
        if not self.connection.get("kafka_group_id"):
            return
        from confluent_kafka import KafkaException, TopicPartition

        self._group_pending.update({int(p): int(o) for p, o in epoch.end.items() if epoch.start.get(p) != o})
        if not self._group_pending:
            return
        changed = [TopicPartition(self.topic, p, o) for p, o in sorted(self._group_pending.items())]
        try:
            # A metadata request first: it fails within seconds when the broker is down, where a commit would
            # block for the whole session timeout waiting for the group coordinator.
            list_partitions(self._driver_consumer(), self.topic)
            self._driver_consumer().commit(offsets=changed, asynchronous=False)
        except (KafkaException, StreamlingError) as exc:
            if is_unavailable(exc) and self._group_outage.failed(describe(exc)):
                return
            raise StreamlingError.retry(
                f"{self.label}: cannot commit consumer group offsets: {describe(exc)}"
            ) from None
        self._group_outage.recovered()
        self._group_pending.clear()
        log.debug("%s committed group offsets %s", self.label, {tp.partition: tp.offset for tp in changed})

    def stream(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataFrame:
        options = self.reader_options(start, replay_end, self.reader_parallelism(spark))
        return spark.readStream.format(KafkaDataSource.name()).options(**options).load()

    def reader_parallelism(self, spark: SparkSession) -> int:
        """The most reading tasks per epoch: `parallelism`, else Spark's default parallelism."""
        return self.spec.parallelism or spark.sparkContext.defaultParallelism

    def reader_options(
        self, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None, parallelism: int
    ) -> dict[str, str]:
        """Everything `KafkaStreamReader` needs, as the string options a Spark data source receives."""
        options = {
            **self._options(),
            "start": json.dumps({k: int(v) for k, v in start.items()}),
            "replay_end": json.dumps({k: int(v) for k, v in replay_end.items()} if replay_end is not None else None),
            "ending": json.dumps(self._ending or {}),
            "starting_offsets": self.spec.starting_offsets,
            "log_level": self.settings.log_level,
            "log_format": self.settings.log_format,
            "data_format": self.spec.data_format,
            "include_metadata": str(self.spec.include_metadata).lower(),
            "validate_writer_schema_ordering": str(self.spec.validate_writer_schema_ordering).lower(),
            "schema_id_overrides": json.dumps(self.spec.overrides(), sort_keys=True),
            **(self.dead_letter.to_options() if self.dead_letter is not None else {}),
            "spark_schema": self.schema().json(),
            "parallelism": str(parallelism),
            "batch_rows": str(min(self.spec.record_batch_size or self.settings.record_batch_size, 50_000)),
            **Pacer.options(
                self.spec.record_batch_size or self.settings.record_batch_size, self.settings.checkpoint_interval_sec
            ),
        }
        if self.spec.data_format == "avro":
            schema_str, version, schema_id = self.reader_schema()
            options.update(
                reader_schema=schema_str, reader_schema_version=str(version), reader_schema_id=str(schema_id)
            )
        return options

    def terminate(self) -> None:
        self._lag.stop()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
