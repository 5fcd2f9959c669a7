"""The Kafka source: a Spark stream reader over confluent-kafka (`reader.py`), Avro (Schema Registry) or JSON.

Each epoch reads a fixed ``[start, end)`` offset range per partition, so a replayed epoch reads the same
records. Ranges are split into Spark input partitions (per Kafka partition, and further when one
partition holds a large range) and read in parallel by executors that keep their consumers between
epochs. Positions are committed by the runtime to the state backend under
``<source>:<topic>:<partition>`` and, when a group is configured, to the consumer group.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from streamling.core.pacing import FIRST_EPOCH_ROWS, Pacer
from streamling.core.rows import GS_OP
from streamling.dead_letters import DeadLetterTarget
from streamling.errors import StreamlingError, first_line
from streamling.kafka.availability import Outage, describe, is_unavailable, patience, wait_out
from streamling.kafka.avro import doc_primary_keys
from streamling.kafka.avro import spark_schema as avro_spark_schema
from streamling.kafka.clients import connection_options, registry, subject_of
from streamling.kafka.lag import LagReporter
from streamling.kafka.objects import topic_object
from streamling.kafka.source.metadata import METADATA_NAMES, metadata_columns
from streamling.kafka.source.offsets import (
    high_watermark,
    initial_offsets,
    list_partitions,
    open_consumer,
    range_offsets,
)
from streamling.kafka.source.spec import KafkaSourceSpec, resolution_warnings
from streamling.plugin import ExternalObject, RunContext, Source
from streamling.state import StateBackend
from streamling.telemetry.tasks import OFF, NodeRecorder
from streamling.types import parse_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T

    from streamling.kafka.source.reader import KafkaStreamReader

log = logging.getLogger("streamling.kafka")

# ---------------------------------------------------------------- the operator (driver)


class KafkaSource(Source[KafkaSourceSpec]):
    spec_model: ClassVar[type[KafkaSourceSpec]] = KafkaSourceSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = connection_options(self.settings.kafka_source)
        self.dead_letter = (
            DeadLetterTarget.of(self.spec.dead_letter, self.settings, self.name, self.label, None)
            if self.spec.dead_letter is not None
            else None
        )
        self._recorder: NodeRecorder = OFF
        """Where its reading tasks report dead-lettered records (set when telemetry is on)."""
        self._reader_schema: tuple[str, int, int] | None = None
        self._reader_schema_error: StreamlingError | None = None
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
            lambda: open_consumer(self._options(), "plan"),
        )

    @property
    def label(self) -> str:
        return f"kafka source '{self.name}'"

    @property
    def topic(self) -> str:
        return self.spec.topic

    def reads(self) -> list[ExternalObject]:
        return [topic_object(self.topic)]

    def _options(self) -> dict[str, str]:
        return {**self.connection, "app": self.settings.application_id, "source": self.name, "topic": self.topic}

    def _outage(self, service: str) -> Outage:
        return Outage(self.label, service, patience(self.connection))

    def prefetch(self) -> None:
        if self.spec.data_format == "avro" and self._reader_schema is None and self._reader_schema_error is None:
            try:
                self.reader_schema()
            except StreamlingError as exc:
                self._reader_schema_error = exc

    def reader_schema(self) -> tuple[str, int, int]:
        """The latest schema of ``<topic>-value`` as (schema, version, id), captured once per run; an unreachable
        registry is waited for (once: a failure in `prefetch` is raised again here)."""
        if self._reader_schema_error is not None:
            raise self._reader_schema_error
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
        out = resolution_warnings(self.label, self.spec)
        if self.spec.data_format == "avro" and not super().primary_key() and self._reader_schema is not None:
            try:
                keys = self.primary_key()
            except StreamlingError:
                return out  # validation reports the bad doc as an error
            if keys:
                out.append(
                    f"{self.label}: no primary_key given; using {json.dumps(keys)} declared in the doc of the Avro "
                    f"schema of subject '{subject_of(self.topic)}'"
                )
        return out

    def schema(self) -> T.StructType:
        from pyspark.sql import types as T

        if self.spec.data_format == "avro":
            values = avro_spark_schema(json.loads(self.reader_schema()[0]), subject_of(self.topic))
        else:
            values = T.StructType([T.StructField(c, parse_type(t), True) for c, t in (self.spec.schema_ or {}).items()])
        fields = [f for f in values.fields if f.name != GS_OP]
        if self.spec.include_metadata:
            taken = {f.name for f in fields} & set(METADATA_NAMES)
            if taken:
                raise StreamlingError.user(f"{self.label}: include_metadata would shadow fields {sorted(taken)}")
            fields += metadata_columns().fields
        return T.StructType([*fields, T.StructField(GS_OP, T.StringType(), False)])

    def refine(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

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
            self._consumer = open_consumer(self._options(), "plan")
        return self._consumer

    def initialize(self, ctx: RunContext) -> None:
        recorder = ctx.recorder(self.name)
        if recorder.active:  # its readers report dead letters; its lag reports feed the consumer-lag metric
            self._recorder = recorder
            telemetry = ctx.telemetry
            self._lag.on_report = lambda lags: telemetry.backlog(self.name, lags)
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

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> KafkaStreamReader:
        from streamling.kafka.source.reader import KafkaStreamReader

        options = self.reader_options(start, replay_end, self.reader_parallelism(spark))
        return KafkaStreamReader(options, self.schema(), self._recorder)

    def reader_parallelism(self, spark: SparkSession) -> int:
        """The most reading tasks per epoch: `parallelism`, else Spark's default parallelism."""
        return self.spec.parallelism or spark.sparkContext.defaultParallelism

    @property
    def batch_rows(self) -> int:
        """Records per Arrow batch a reading task yields: the node's `batch_size`, else its epoch size capped at
        50,000 (a batch is decoded and held whole)."""
        if self.spec.batch_size is not None:
            return self.spec.batch_size
        return min(self.spec.record_batch_size or self.settings.record_batch_size, 50_000)

    def reader_options(
        self, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None, parallelism: int
    ) -> dict[str, str]:
        """Everything `KafkaStreamReader` needs, as string options (what its reading tasks get)."""
        options = {
            **self._options(),
            "start": json.dumps({k: int(v) for k, v in start.items()}),
            "replay_end": json.dumps({k: int(v) for k, v in replay_end.items()} if replay_end is not None else None),
            "ending": json.dumps(self._ending or {}),
            "starting_offsets": self.spec.starting_offsets,
            "on_data_loss": self.spec.on_data_loss,
            "log_level": self.settings.log_level,
            "log_format": self.settings.log_format,
            "data_format": self.spec.data_format,
            "include_metadata": str(self.spec.include_metadata).lower(),
            "validate_writer_schema_ordering": str(self.spec.validate_writer_schema_ordering).lower(),
            "schema_id_overrides": json.dumps(self.spec.overrides(), sort_keys=True),
            **(self.dead_letter.to_options() if self.dead_letter is not None else {}),
            "spark_schema": self.schema().json(),
            "parallelism": str(parallelism),
            "batch_rows": str(self.batch_rows),
            "fetch_timeout_sec": str(self.settings.kafka_source.consumer_fetch_timeout_sec),
            "stall_timeout_sec": str(self.settings.kafka_source.stall_watchdog_timeout_sec),
            **Pacer.options(
                self.spec.record_batch_size or self.settings.record_batch_size,
                self.settings.checkpoint_interval_sec,
                FIRST_EPOCH_ROWS,
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
