"""Dead letters in a Postgres table (``dead_letter: {table: …}``, created if missing), keyed by (application_id,
node, record_id) with ``ON CONFLICT DO NOTHING``, so a replayed source record is not stored twice. The Postgres sink
writes its dead letters in the transaction that applies its rows and progress row. See `streamling.dead_letters`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from streamling.config.model import PostgresSinkSettings
from streamling.dead_letters import DeadLetter, DeadLetterTarget
from streamling.postgres import catalog
from streamling.postgres.connection import transact

if TYPE_CHECKING:
    from streamling.config.model import Settings
    from streamling.spec import DeadLetterSpec

PASSWORD = "dead_letter_postgres_password"


@dataclass(frozen=True)
class TableDeadLetters(DeadLetterTarget):
    """A table of the node's Postgres connection (a Postgres sink's own, else ``postgres_sink`` /
    ``postgres_sink_connections.<node>``)."""

    kind = "table"
    schema: str
    table: str
    postgres: PostgresSinkSettings

    @classmethod
    def from_spec(
        cls, spec: DeadLetterSpec, settings: Settings, node: str, label: str, postgres: PostgresSinkSettings | None
    ) -> TableDeadLetters:
        schema, table = spec.schema_and_table
        connection = postgres or settings.postgres_connection(node)
        return cls(settings.application_id, node, label, schema=schema, table=table, postgres=connection)

    @property
    def where(self) -> str:
        return f'table "{self.schema}"."{self.table}"'

    def prepare(self) -> None:
        schema, table = self.schema, self.table

        def create(cur: psycopg.Cursor) -> None:
            catalog.lock_ddl(cur, schema, table)
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute(table_ddl(schema, table))

        transact(self.postgres, f"{self.label}: dead-letter {self.where}", create)

    def write(self, letters: Sequence[DeadLetter], failed_at: datetime, cur: psycopg.Cursor | None) -> None:
        """Insert `letters`; with `cur` inside the caller's transaction, else in one of their own."""
        if cur is not None:
            _insert(self, cur, letters, failed_at)
            return
        where = f"{self.label}: dead-letter {self.where}"
        transact(self.postgres, where, lambda own: _insert(self, own, letters, failed_at))

    def carried(self) -> tuple[dict[str, Any], dict[str, str]]:
        connection = self.postgres.model_dump(mode="json", by_alias=True, exclude={"password"})
        fields = {"schema": self.schema, "table": self.table, "postgres": connection}
        return fields, {PASSWORD: self.postgres.password.get_secret_value()}

    @classmethod
    def arrived(cls, head: tuple[str, str, str], fields: dict[str, Any], secrets: Mapping[str, str]) -> Self:
        connection = PostgresSinkSettings.model_validate({**fields["postgres"], "pass": secrets.get(PASSWORD, "")})
        return cls(*head, schema=fields["schema"], table=fields["table"], postgres=connection)


def _insert(target: TableDeadLetters, cur: psycopg.Cursor, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
    cur.executemany(
        sql.SQL(
            "INSERT INTO {} (application_id, node, record_id, error, failed_at, topic, {}, {}, key, value, "
            "headers, row_json, primary_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (application_id, node, record_id) DO NOTHING"
        ).format(catalog.qualified(target.schema, target.table), sql.Identifier("partition"), sql.Identifier("offset")),
        [
            (
                target.application_id,
                target.node,
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


def table_ddl(schema: str, table: str) -> sql.Composed:
    """Keyed by `DeadLetter.record_id`, so a replayed record is not stored twice."""
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
