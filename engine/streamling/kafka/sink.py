"""The Kafka sink: rows → Avro (Schema Registry) or JSON messages, keyed by the primary key, with the row
operation in the ``dbz.op`` header (``c``/``u``/``d``) rather than in the body.

With ``deduplicate`` (the default, as in the original) the epoch is shuffled by key, keeping input order, and
only each key's last row is produced. Executors produce their partitions in parallel (``mapInArrow``) with one
producer per Python worker and flush before the task ends; any delivery failure fails the task, so the epoch is
acknowledged only after every message of it is in Kafka. While the broker is unreachable librdkafka keeps the
messages and retries (idempotently) for ``kafka_sink.unavailable_timeout_sec``, and the flush waits as long.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, PositiveInt, field_validator
from tenacity import Retrying, retry_if_result, wait_none

from streamling.config.units import Milliseconds
from streamling.core.outage import stop_when_patience_is_used_up
from streamling.core.rows import GS_OP, json_default
from streamling.errors import StreamlingError
from streamling.kafka.availability import Outage, produce_when_room, wait_out
from streamling.kafka.avro import avro_schema_for
from streamling.kafka.clients import connection_options, ensure_topic, kafka_config, registry
from streamling.kafka.clients import producer as cached_producer
from streamling.kafka.objects import topic_object
from streamling.kafka.transactions import EpochTransactions
from streamling.plugin import AppliedEpoch, Epoch, ExternalObject, RunContext, Sink, Written, rows_of
from streamling.postgres.writer import ORDER_COLUMN, merge_rounds
from streamling.spec import SinkSpec
from streamling.types import exact_columns, map_in_arrow, spread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.kafka")
OPS_TO_DBZ = {"i": b"c", "u": b"u", "d": b"d"}
FLUSH_STEP_SEC = 10.0


class KafkaSinkSpec(SinkSpec):
    type: Literal["kafka"]
    identity_labels: ClassVar[tuple[str, ...]] = ("topic",)
    topic: str = Field(min_length=1)
    data_format: Literal["avro", "json"] = "avro"
    topic_partitions: PositiveInt = 4
    compression: Literal["none", "gzip", "lz4"] = "lz4"
    batch_size: PositiveInt | None = None
    batch_flush_interval: Milliseconds | None = None
    message_max_bytes: int | None = Field(default=None, ge=1000, le=1_000_000_000)
    """The producer's ``message.max.bytes``: the largest message (and produce request) it sends."""
    deduplicate: bool = True
    """Within an epoch, produce only the last row per primary key."""
    parallelism: PositiveInt | None = None
    """Spark tasks producing per epoch (each with its worker's producer): rows are hashed by the key into this
    many partitions first, so a key's messages keep their order."""
    exactly_once: bool = False
    """Each epoch in one Kafka transaction from the driver, committed with the sink's progress: a
    ``read_committed`` consumer sees every record once across crashes (`streamling.kafka.transactions`)."""

    @field_validator("compression", "data_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


def produce_partition(batches: Iterator[pa.RecordBatch], plan: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: produce every row of this partition (with ``deduplicate`` the last one per key), flush,
    and report the rows received by operation (`Written`, vectorised; before deduplication, as the Postgres
    sinks count)."""

    producer = cached_producer(plan["producer"])
    topic, keys, label = plan["topic"], plan["keys"], plan["label"]
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None and len(failures) < 5:
            failures.append(f"partition {msg.partition()}: {err.str()}")

    encode = encoder(plan)
    sent = 0
    written = Written()
    if plan["deduplicate"]:  # the partition holds whole keys in input order: produce each key's last row
        received = list(batches)
        table = pa.Table.from_batches(received) if received else None
        written += Written.of(table) if table is not None else Written()
        last = merge_rounds(table, tuple(keys), deduplicate=True) if table is not None else []
        batches = iter(last[0].to_batches() if last else [])
    for batch in batches:
        if not plan["deduplicate"]:
            written += Written.of(batch)
        sent += produce_batch(producer, batch, plan, encode, delivered)
    outage = Outage(label, "broker", plan["unavailable_timeout_sec"])
    remaining = flush(producer, outage, failures)
    if remaining:
        failures.append(f"{remaining} messages still undelivered after {plan['unavailable_timeout_sec']:.0f}s")
    elif not failures:
        outage.recovered()
    if failures:
        raise StreamlingError.retry(f"{label}: delivery to topic '{topic}' failed: {'; '.join(failures)}")
    yield pa.RecordBatch.from_pydict(
        {"sent": [sent], "inserts": [written.inserts], "updates": [written.updates], "deletes": [written.deletes]}
    )


def flush(producer: Any, outage: Outage, failures: list[str]) -> int:
    """Flush `producer` in steps of `FLUSH_STEP_SEC` while messages are still undelivered and none failed, for up
    to the outage's patience (`Outage.failed` logs when the waiting starts); the messages left undelivered."""
    flushing = Retrying(  # each flush waits up to its step: no wait between them
        retry=retry_if_result(lambda remaining: bool(remaining) and not failures),
        wait=wait_none(),
        stop=stop_when_patience_is_used_up(
            outage, lambda state: f"{state.outcome.result()} messages not delivered after {FLUSH_STEP_SEC:.0f} s"
        ),
        retry_error_callback=lambda state: state.outcome.result(),
    )
    return int(flushing(producer.flush, FLUSH_STEP_SEC))


def produce_batch(producer: Any, batch: pa.RecordBatch, plan: Mapping[str, Any], encode: Any, delivered: Any) -> int:
    """Hand every row of `batch` to `producer` (keyed, its operation in ``dbz.op``); the number produced."""
    from confluent_kafka import KafkaError, KafkaException

    topic, keys, label = plan["topic"], plan["keys"], plan["label"]
    ops = batch.column(GS_OP).to_pylist()
    rows = batch.drop_columns([GS_OP]).to_pylist()
    for row, op in zip(rows, ops, strict=True):
        key = _key(row, keys)
        value = encode(row)
        headers = [("dbz.op", OPS_TO_DBZ.get(op or "i", b"c"))]
        try:
            try:  # inline: this runs per row
                producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
            except BufferError:
                produce_when_room(producer, topic, value=value, key=key, headers=headers, on_delivery=delivered)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            raise StreamlingError.user(
                f"{label}: the message for key {key.decode('utf-8', 'replace')!r} is {len(value)} bytes, more "
                f"than the producer's message.max.bytes ({plan['producer'].get('message.max.bytes', 1_000_000)}"
                "); raise message_max_bytes"
            ) from None
    producer.poll(0)
    return len(rows)


def encoder(plan: Mapping[str, Any]):  # type: ignore[no-untyped-def]
    return _avro_encoder(plan) if plan["format"] == "avro" else _json_encode


def _key(row: Mapping[str, Any], keys: list[str]) -> bytes:
    if len(keys) == 1:
        value = row[keys[0]]
        return (value if isinstance(value, str) else json.dumps(value, default=json_default)).encode()
    return json.dumps({k: row[k] for k in keys}, default=json_default, separators=(",", ":")).encode()


def _json_encode(row: Mapping[str, Any]) -> bytes:
    return json.dumps(row, default=json_default, separators=(",", ":")).encode()


def _avro_encoder(plan: Mapping[str, Any]):  # type: ignore[no-untyped-def]
    import fastavro

    schema = fastavro.parse_schema(json.loads(plan["avro_schema"]))
    header = b"\x00" + int(plan["schema_id"]).to_bytes(4, "big")
    write = fastavro.schemaless_writer

    def encode(row: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(header)
        write(out, schema, row)
        return out.getvalue()

    return encode


class KafkaSink(Sink[KafkaSinkSpec]):
    spec_model: ClassVar[type[KafkaSinkSpec]] = KafkaSinkSpec

    @property
    def flush_interval_sec(self) -> float | None:
        """Its ``batch_flush_interval`` is the producer's ``linger.ms``, not a limit on the epoch interval."""
        return None

    def __init__(self, *args: Any, **kwargs: Any) -> None:

        super().__init__(*args, **kwargs)
        self.connection = connection_options(self.settings.kafka_sink)
        self.keys: list[str] = []
        self.value_schema: StructType | None = None
        self.schema_id: int | None = None
        self._plan: dict[str, Any] = {}
        self._transactions: EpochTransactions | None = None

    @property
    def label(self) -> str:
        return f"kafka sink '{self.name}'"

    def writes(self) -> list[ExternalObject]:
        return [topic_object(self.spec.topic)]

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        from pyspark.sql.types import StructType

        if not primary_key:
            return [f"{self.label} requires a primary key"]
        missing = [k for k in primary_key if k not in schema.fieldNames()]
        if missing:
            return [f"{self.label}: primary key columns {missing} are not in the input"]
        self.keys = primary_key
        self.value_schema = StructType([f for f in schema.fields if f.name != GS_OP])
        if self.spec.data_format == "avro":
            try:
                avro_schema_for(self.value_schema, self.spec.topic, self.keys)
            except StreamlingError as exc:
                return [f"{self.label}: {exc.message}"]
        return []

    def producer_config(self) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "compression.type": self.spec.compression,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": self.spec.batch_flush_interval if self.spec.batch_flush_interval is not None else 20,
            "queue.buffering.max.messages": 500_000,
            # Undelivered messages are retried this long (then their delivery fails and so does the epoch).
            "message.timeout.ms": max(1000, int(self.settings.kafka_sink.unavailable_timeout_sec * 1000)),
        }
        if self.spec.batch_size:
            extra["batch.num.messages"] = self.spec.batch_size
        if self.spec.message_max_bytes:
            extra["message.max.bytes"] = self.spec.message_max_bytes
        return kafka_config(self.connection, **extra)

    def initialize(self, ctx: RunContext) -> None:
        patience = self.settings.kafka_sink.unavailable_timeout_sec
        wait_out(
            lambda: ensure_topic(self.connection, self.spec.topic, self.spec.topic_partitions, self.label),
            Outage(self.label, "broker", patience),
        )
        schema = ""
        if self.spec.data_format == "avro":
            from confluent_kafka.schema_registry import Schema

            assert self.value_schema is not None
            schema = json.dumps(avro_schema_for(self.value_schema, self.spec.topic, self.keys))
            subject = f"{self.spec.topic}-value"
            try:
                self.schema_id = wait_out(
                    lambda: registry(self.connection).register_schema(subject, Schema(schema, "AVRO")),
                    Outage(self.label, "Schema Registry", patience),
                )
            except Exception as exc:
                raise StreamlingError.retry(
                    f"failed to register the Avro schema under subject '{subject}': {exc}"
                ) from None
            log.info("%s registered its schema as id %s under '%s'", self.label, self.schema_id, subject)
        producer = self.producer_config()
        producer.pop("logger", None)  # not picklable; executors log through their own stderr
        # Everything the executors need, built once per run rather than per epoch.
        self._plan = {
            "producer": producer,
            "topic": self.spec.topic,
            "keys": self.keys,
            "label": self.label,
            "format": self.spec.data_format,
            "avro_schema": schema,
            "schema_id": self.schema_id or 0,
            "deduplicate": self.spec.deduplicate,
            "unavailable_timeout_sec": self.settings.kafka_sink.unavailable_timeout_sec,
        }
        if self.spec.exactly_once:
            if self.spec.parallelism:
                log.warning(
                    "%s: parallelism %s is ignored: with exactly_once the driver writes each epoch in one transaction",
                    self.label,
                    self.spec.parallelism,
                )
            self._transactions = EpochTransactions(
                self.producer_config(),
                self.spec.topic,
                f"{ctx.settings.application_id}.{self.name}",
                self.label,
                patience,
            )
            self._transactions.open()

    def applied_epoch(self, source: str) -> AppliedEpoch | None:
        return self._transactions.applied_epoch(source) if self._transactions is not None else None

    def terminate(self) -> None:
        if self._transactions is not None:
            self._transactions.close()
            self._transactions = None

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Everything happens now, in the Spark tasks; each reports its messages by operation. With
        ``exactly_once`` the rows come to the driver now and go out in one transaction on the committer thread."""
        from pyspark.sql import functions as F

        plan = self._plan
        if self._transactions is not None:
            return self._transactional(df, epoch, self._transactions)
        if self.spec.deduplicate:  # every row of a key in one partition (of `parallelism`), in input order
            ordered = df.withColumn(ORDER_COLUMN, F.monotonically_increasing_id())
            keys = exact_columns(self.keys)
            parted = (
                ordered.repartition(self.spec.parallelism, *keys)
                if self.spec.parallelism
                else ordered.repartition(*keys)
            )
            df = parted.sortWithinPartitions(ORDER_COLUMN).drop(ORDER_COLUMN)
        else:
            df = spread(df, self.spec.parallelism, self.keys)
        schema = "sent long, inserts long, updates long, deletes long"
        counts = map_in_arrow(df, lambda batches: produce_partition(batches, plan), schema).collect()
        written = sum((Written(row.inserts, row.updates, row.deletes) for row in counts), Written())
        return lambda: written

    def _transactional(self, df: DataFrame, epoch: Epoch, transactions: EpochTransactions) -> Callable[[], Written]:
        plan = self._plan
        table = df.toArrow()
        received = Written.of(table)
        if self.spec.deduplicate and table.num_rows:
            table = merge_rounds(table, tuple(self.keys), deduplicate=True)[0]

        def produce(producer: Any) -> None:
            encode = encoder(plan)
            failures: list[str] = []

            def delivered(err: Any, msg: Any) -> None:
                if err is not None and len(failures) < 5:
                    failures.append(f"partition {msg.partition()}: {err.str()}")

            for batch in table.to_batches():
                produce_batch(producer, batch, plan, encode, delivered)
            producer.flush(FLUSH_STEP_SEC)
            if failures:
                raise StreamlingError.retry(f"{self.label}: delivery to topic '{plan['topic']}' failed: {failures}")

        def deliver() -> Written:
            return received if transactions.write(epoch, produce, table) else Written()

        return deliver
