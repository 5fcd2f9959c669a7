"""The sink-side progress table: which epoch of which source each write stream has applied.

A row is written in the same transaction as the data it describes, so after a crash the table tells
exactly what reached Postgres. The runtime replays an applied-but-uncommitted epoch with the very same
positions, and the writer skips it: no duplicate appends, no stale upserts re-applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from streamling.errors import LeaseLostError
from streamling.plugin import AppliedEpoch, Epoch

TABLE = "_streamling_progress"


@dataclass(frozen=True)
class ProgressKey:
    """Identifies one sink's write streams in the progress table."""

    schema: str
    application_id: str
    sink: str

    @property
    def table(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(TABLE))


def ddl(schema: str) -> sql.Composed:
    """The table, and its `generation` column on a table made before the column existed."""
    table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(TABLE))
    return sql.SQL(
        """CREATE TABLE IF NOT EXISTS {table} (
            application_id TEXT NOT NULL,
            sink TEXT NOT NULL,
            source TEXT NOT NULL,
            stream INTEGER NOT NULL,
            streams INTEGER NOT NULL,
            epoch BIGINT NOT NULL,
            start_position JSONB NOT NULL,
            end_position JSONB NOT NULL,
            rows BIGINT NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            generation BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (application_id, sink, source, stream)
        );
        ALTER TABLE {table} ADD COLUMN IF NOT EXISTS generation BIGINT NOT NULL DEFAULT 0"""
    ).format(table=table)


def canonical(position: Mapping[str, Any]) -> str:
    return json.dumps({str(k): position[k] for k in sorted(position)}, sort_keys=True)


def already_applied(cur: psycopg.Cursor, key: ProgressKey, epoch: Epoch, stream: int, streams: int) -> bool:
    """True when this stream already applied exactly this epoch; locks the row until the transaction ends."""
    cur.execute(
        sql.SQL(
            "SELECT epoch, start_position, end_position, streams FROM {} "
            "WHERE application_id = %s AND sink = %s AND source = %s AND stream = %s FOR UPDATE"
        ).format(key.table),
        (key.application_id, key.sink, epoch.source, stream),
    )
    row = cur.fetchone()
    if row is None:
        return False
    applied, start, end, recorded_streams = row
    return (
        applied == epoch.id
        and recorded_streams == streams
        and canonical(start) == canonical(epoch.start)
        and canonical(end) == canonical(epoch.end)
    )


def record(cur: psycopg.Cursor, key: ProgressKey, epoch: Epoch, stream: int, streams: int, rows: int) -> None:
    """Upsert the stream's row, unless a run of a later lease generation wrote it: then `LeaseLostError`, and the
    transaction (the epoch's rows with it) is rolled back. The fence that keeps a run that lost its lease from
    writing over its successor's rows, even when the sink's database is not the state backend's."""
    cur.execute(
        sql.SQL(
            "INSERT INTO {} AS p (application_id, sink, source, stream, streams, epoch, start_position, "
            "end_position, rows, generation) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (application_id, sink, source, stream) DO UPDATE SET streams = EXCLUDED.streams, "
            "epoch = EXCLUDED.epoch, start_position = EXCLUDED.start_position, "
            "end_position = EXCLUDED.end_position, rows = EXCLUDED.rows, updated_at = now(), "
            "generation = EXCLUDED.generation WHERE p.generation <= EXCLUDED.generation"
        ).format(key.table),
        (
            key.application_id,
            key.sink,
            epoch.source,
            stream,
            streams,
            epoch.id,
            Jsonb(dict(epoch.start)),
            Jsonb(dict(epoch.end)),
            rows,
            epoch.generation,
        ),
    )
    if cur.rowcount == 0:
        raise LeaseLostError(
            f"epoch {epoch.id} of source '{epoch.source}' was refused: a run holding a later lease of the "
            f"pipeline (generation > {epoch.generation}) has written to {key.schema}.{TABLE}",
            retriable=True,
        )


def latest_applied(cur: psycopg.Cursor, key: ProgressKey, source: str, streams: int) -> AppliedEpoch | None:
    """The newest epoch of `source` any stream applied, if the streams were split as they are now (with a
    different split the replay would route rows to other streams, so skipping would not be exact)."""
    cur.execute(
        sql.SQL(
            "SELECT epoch, start_position, end_position FROM {} "
            "WHERE application_id = %s AND sink = %s AND source = %s AND streams = %s "
            "ORDER BY epoch DESC LIMIT 1"
        ).format(key.table),
        (key.application_id, key.sink, source, streams),
    )
    row = cur.fetchone()
    return AppliedEpoch(int(row[0]), row[1], row[2]) if row else None
