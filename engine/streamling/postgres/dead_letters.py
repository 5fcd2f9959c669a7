"""Dead letters in a Postgres table (created if missing), keyed by (application_id, node, record_id) with ``ON
CONFLICT DO NOTHING``, so a replayed source record is not stored twice. The Postgres sink writes its dead letters
in the transaction that applies its rows and progress row. See `streamling.dead_letters`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from streamling.postgres import catalog
from streamling.postgres.connection import transact

if TYPE_CHECKING:
    from streamling.dead_letters import DeadLetter, DeadLetterTarget


def prepare_table(target: DeadLetterTarget) -> None:
    assert target.postgres is not None and target.schema is not None and target.table is not None
    schema, table = target.schema, target.table

    def create(cur: psycopg.Cursor) -> None:
        catalog.lock_ddl(cur, schema, table)
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        cur.execute(table_ddl(schema, table))

    transact(target.postgres, f"{target.label}: dead-letter {target.where}", create)


def insert(
    target: DeadLetterTarget, letters: Sequence[DeadLetter], failed_at: datetime, cur: psycopg.Cursor | None = None
) -> None:
    """Insert `letters`; with `cur` inside the caller's transaction, else in one of their own."""
    if cur is not None:
        _insert(target, cur, letters, failed_at)
        return
    assert target.postgres is not None
    where = f"{target.label}: dead-letter {target.where}"
    transact(target.postgres, where, lambda own: _insert(target, own, letters, failed_at))


def _insert(target: DeadLetterTarget, cur: psycopg.Cursor, letters: Sequence[DeadLetter], failed_at: datetime) -> None:
    assert target.schema is not None and target.table is not None
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
