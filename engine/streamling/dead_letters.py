"""Dead letters: bad records a node set to ``on_error: dead_letter`` routes aside instead of failing the run.

A dead letter goes to a Kafka topic (``kafka_sink`` connection) or a Postgres table (created if missing). Both
are written before the epoch that skipped the record commits, so a crash can only repeat, never lose one:

- Postgres table: rows are keyed by (application_id, node, topic, partition, offset) with ``ON CONFLICT DO
  NOTHING``, so a replayed source record is not stored twice. The Postgres sink writes its dead letters in the
  transaction that applies its rows and progress row, so they are exactly as durable as the data.
- Kafka topic: produced and flushed before the epoch commits; a replay produces them again (at-least-once).

A `DeadLetterTarget` is built on the driver and travels to executors (the Kafka source writes from its Spark
tasks), as a pickled object inside a sink's write plan or as string options of the source's data source, where
the secrets sit under keys containing ``password`` so Spark redacts them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from streamling.errors import StreamlingError
from streamling.kafka.availability import produce_when_room
from streamling.kafka.clients import connection_options, ensure_topic, kafka_config, producer
from streamling.types import json_default

if TYPE_CHECKING:  # loaded when used: the Kafka reader imports this module in every planner and worker process
    import psycopg
    from psycopg import sql

    from streamling.config.model import PostgresSinkSettings, Settings
    from streamling.topology.spec import DeadLetterSpec

FLUSH_TIMEOUT_SEC = 60.0
TOPIC_PARTITIONS = 1
HEADER_PREFIX = "streamling."


@dataclass(frozen=True)
class DeadLetter:
    """One bad record: a source message (topic … headers), a file's line (path as topic, line as offset, version)
    or a sink row (row, primary_key as JSON text)."""

    error: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    row: str | None = None
    primary_key: str | None = None
    version: str | None = None
    """A file's line (`topic` the file's path, `offset` the line, no partition): the file's modification time, so
    a bad line of a rewritten file is a record of its own."""

    @property
    def record_id(self) -> str:
        """What makes a repeat recognisable: the position of a source record, the content of a sink row (a
        replay of the same events rejects the same rows)."""
        if self.topic is not None and self.partition is None:
            return f"{self.topic}@{self.version}:{self.offset}"
        if self.topic is not None:
            return f"{self.topic}:{self.partition}:{self.offset}"
        return "row:" + hashlib.sha256((self.row or "").encode()).hexdigest()[:32]


def row_letter(error: str, row: Mapping[str, Any], keys: Sequence[str]) -> DeadLetter:
    return DeadLetter(
        error=error,
        row=json.dumps(dict(row), default=json_default),
        primary_key=json.dumps({k: row[k] for k in keys}, default=json_default),
    )


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where one node's dead letters go, with the connection to get there."""

    application_id: str
    node: str
    label: str
    topic: str | None = None
    schema: str | None = None
    table: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    postgres: PostgresSinkSettings | None = None

    @classmethod
    def of(
        cls, spec: DeadLetterSpec, settings: Settings, node: str, label: str, postgres: PostgresSinkSettings | None
    ) -> DeadLetterTarget:
        if spec.topic is not None:
            return cls(settings.application_id, node, label, topic=spec.topic, kafka=_producer_options(settings))
        schema, table = spec.schema_and_table
        return cls(
            settings.application_id,
            node,
            label,
            schema=schema,
            table=table,
            postgres=postgres or settings.postgres_connection(node),
        )

    @property
    def where(self) -> str:
        return f"topic '{self.topic}'" if self.topic is not None else f'table "{self.schema}"."{self.table}"'

    # -- travelling to executors as data-source options (strings; secrets under *password* keys)

    def to_options(self) -> dict[str, str]:
        kafka = {k: v for k, v in self.kafka.items() if k != "kafka_sasl_password"}
        postgres = self.postgres.model_dump(mode="json", by_alias=True, exclude={"password"}) if self.postgres else None
        out = {
            "dead_letter": json.dumps(
                {
                    "application_id": self.application_id,
                    "node": self.node,
                    "label": self.label,
                    "topic": self.topic,
                    "schema": self.schema,
                    "table": self.table,
                    "kafka": kafka,
                    "postgres": postgres,
                }
            )
        }
        if self.kafka.get("kafka_sasl_password"):
            out["dead_letter_kafka_sasl_password"] = self.kafka["kafka_sasl_password"]
        if self.postgres is not None and self.postgres.password.get_secret_value():
            out["dead_letter_postgres_password"] = self.postgres.password.get_secret_value()
        return out

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> DeadLetterTarget | None:
        if not options.get("dead_letter"):
            return None
        data = json.loads(options["dead_letter"])
        kafka = dict(data["kafka"])
        if options.get("dead_letter_kafka_sasl_password"):
            kafka["kafka_sasl_password"] = options["dead_letter_kafka_sasl_password"]
        postgres = None
        if data["postgres"] is not None:
            from streamling.config.model import PostgresSinkSettings

            postgres = PostgresSinkSettings.model_validate(
                {**data["postgres"], "pass": options.get("dead_letter_postgres_password", "")}
            )
        return cls(
            data["application_id"],
            data["node"],
            data["label"],
            topic=data["topic"],
            schema=data["schema"],
            table=data["table"],
            kafka=kafka,
            postgres=postgres,
        )

    # -- driver: make sure the target exists

    def prepare(self) -> None:
        if self.topic is not None:
            ensure_topic(self.kafka, self.topic, TOPIC_PARTITIONS, self.label)
            return
        assert self.postgres is not None and self.schema is not None and self.table is not None
        from psycopg import sql

        from streamling.postgres import catalog
        from streamling.postgres.connection import transact

        def create(cur: psycopg.Cursor) -> None:
            catalog.lock_ddl(cur, self.schema, self.table)
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            cur.execute(table_ddl(self.schema, self.table))

        transact(self.postgres, f"{self.label}: dead-letter {self.where}", create)

    # -- writing

    def deliver(self, letters: Sequence[DeadLetter], cur: psycopg.Cursor | None = None) -> None:
        """Write `letters` before returning; with `cur` (a Postgres target) inside the caller's transaction."""
        if not letters:
            return
        failed_at = datetime.now(UTC)
        if self.topic is not None:
            self._produce(letters, failed_at)
        elif cur is not None:
            self._insert(cur, letters, failed_at)
        else:
            assert self.postgres is not None
            from streamling.postgres.connection import transact

            where = f"{self.label}: dead-letter {self.where}"
            transact(self.postgres, where, lambda own: self._insert(own, letters, failed_at))

    def _insert(self, cur: psycopg.Cursor, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
        assert self.schema is not None and self.table is not None
        from psycopg import sql
        from psycopg.types.json import Jsonb

        from streamling.postgres import catalog

        cur.executemany(
            sql.SQL(
                "INSERT INTO {} (application_id, node, record_id, error, failed_at, topic, {}, {}, key, value, "
                "headers, row_json, primary_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (application_id, node, record_id) DO NOTHING"
            ).format(catalog.qualified(self.schema, self.table), sql.Identifier("partition"), sql.Identifier("offset")),
            [
                (
                    self.application_id,
                    self.node,
                    letter.record_id,
                    letter.error,
                    failed_at,
                    letter.topic,
                    letter.partition,
                    letter.offset,
                    letter.key,
                    letter.value,
                    Jsonb(_headers_json(letter.headers)) if letter.topic is not None else None,
                    Jsonb(json.loads(letter.row)) if letter.row is not None else None,
                    Jsonb(json.loads(letter.primary_key)) if letter.primary_key is not None else None,
                )
                for letter in letters
            ],
        )

    def _produce(self, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
        config = kafka_config(self.kafka, **{"acks": "all", "enable.idempotence": True, "linger.ms": 5})
        config.pop("logger", None)  # executors log through their own stderr
        out = producer(config)
        failures: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None and len(failures) < 5:
                failures.append(err.str())

        for letter in letters:
            headers = [*letter.headers, *self._headers(letter, failed_at)]
            key = letter.key if letter.topic is not None else (letter.primary_key or "").encode()
            value = letter.value if letter.topic is not None else (letter.row or "").encode()
            produce_when_room(out, self.topic, value=value, key=key, headers=headers, on_delivery=delivered)
        remaining = out.flush(FLUSH_TIMEOUT_SEC)
        if remaining:
            failures.append(f"{remaining} messages still undelivered after {FLUSH_TIMEOUT_SEC:.0f}s")
        if failures:
            raise StreamlingError.retry(f"{self.label}: dead-letter topic '{self.topic}': {'; '.join(failures)}")

    def _headers(self, letter: DeadLetter, failed_at: datetime) -> list[tuple[str, bytes]]:
        fields: dict[str, Any] = {
            "application_id": self.application_id,
            "node": self.node,
            "error": letter.error,
            "failed_at": failed_at.isoformat(),
        }
        if letter.topic is not None:
            fields.update(topic=letter.topic, partition=letter.partition, offset=letter.offset)
        return [(HEADER_PREFIX + k, str(v).encode()) for k, v in fields.items()]


def _producer_options(settings: Settings) -> dict[str, str]:
    """The ``kafka_sink`` connection without the registry's: dead letters are raw bytes, never registered."""
    return {k: v for k, v in connection_options(settings.kafka_sink).items() if k.startswith("kafka_")}


def table_ddl(schema: str, table: str) -> sql.Composed:
    """Keyed by `DeadLetter.record_id`, so a replayed record is not stored twice."""
    from psycopg import sql

    from streamling.postgres import catalog

    return sql.SQL(
        """CREATE TABLE IF NOT EXISTS {} (
            application_id TEXT NOT NULL,
            node TEXT NOT NULL,
            record_id TEXT NOT NULL,
            error TEXT NOT NULL,
            failed_at TIMESTAMPTZ NOT NULL,
            topic TEXT,
            {} INTEGER,
            {} BIGINT,
            key BYTEA,
            value BYTEA,
            headers JSONB,
            row_json JSONB,
            primary_key JSONB,
            PRIMARY KEY (application_id, node, record_id)
        )"""
    ).format(catalog.qualified(schema, table), sql.Identifier("partition"), sql.Identifier("offset"))


def _headers_json(headers: Sequence[tuple[str, bytes | None]]) -> list[list[str | None]]:
    """Header values as text (undecodable bytes escaped), in order; a header name may repeat."""
    return [[k, None if v is None else bytes(v).decode("utf-8", "backslashreplace")] for k, v in headers]
