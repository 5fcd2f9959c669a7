"""Creating target tables and checking existing ones against what a sink will write.

An existing table is never altered or coerced into shape: any column that cannot hold the data, a
missing column, or a missing unique key fails the start with a message naming table, column, the
existing and the required type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from streamling.errors import StreamlingError
from streamling.postgres.types import Column, can_hold


@dataclass(frozen=True)
class ExistingColumn:
    type: str
    not_null: bool
    has_default: bool


def qualified(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def lock_ddl(cur: psycopg.Cursor, schema: str, table: str = "") -> None:
    """Serialise concurrent starts: CREATE ... IF NOT EXISTS races on the catalog (two sessions creating one name both
    pass the check, and the second fails on pg_type's or pg_namespace's unique index). The lock is the schema's, so
    the schema itself and a table every sink of it shares (`_streamling_progress`) are covered too: fifty pipelines
    writing fifty tables of one schema start at once in an engine. `table` is kept for the callers' clarity."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"streamling:{schema}",))


def create_table(
    cur: psycopg.Cursor, schema: str, table: str, columns: Sequence[tuple[str, str]], keys: Sequence[str]
) -> None:
    cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    defs = [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(pg)) for name, pg in columns]
    if keys:
        defs.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, keys))))
    cur.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(qualified(schema, table), sql.SQL(", ").join(defs))
    )


def existing_columns(cur: psycopg.Cursor, schema: str, table: str) -> dict[str, ExistingColumn]:
    cur.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
           FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum""",
        (schema, table),
    )
    return {name: ExistingColumn(kind, not_null, has_default) for name, kind, not_null, has_default in cur.fetchall()}


def unique_keys(cur: psycopg.Cursor, schema: str, table: str) -> list[set[str]]:
    cur.execute(
        """SELECT array_agg(a.attname::text) FROM pg_index i
           JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
           WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL
           GROUP BY i.indexrelid""",
        (schema, table),
    )
    return [set(row[0]) for row in cur.fetchall()]


def verify_table(
    cur: psycopg.Cursor,
    label: str,
    schema: str,
    table: str,
    columns: Sequence[Column],
    conflict_keys: Sequence[str],
    written_elsewhere: Sequence[str] = (),
) -> list[str]:
    """Check an existing (or just created) table; returns the staging type of each column."""
    name = f"{schema}.{table}"
    existing = existing_columns(cur, schema, table)
    if not existing:
        raise StreamlingError.user(f"{label}: table {name} does not exist and could not be created")
    staging = []
    for column in columns:
        have = existing.get(column.name)
        if have is None:
            raise StreamlingError.user(
                f"{label}: table {name} has no column '{column.name}' (required type {column.pg}); "
                f"add it with ALTER TABLE or drop the column from the input"
            )
        if not can_hold(have.type, column.pg):
            raise StreamlingError.user(
                f"{label}: table {name} column '{column.name}' has type {have.type}, which cannot hold the "
                f"input's {column.pg}"
            )
        staging.append(have.type)
    provided = {c.name for c in columns} | set(written_elsewhere)
    for column_name, have in existing.items():
        if column_name not in provided and have.not_null and not have.has_default:
            raise StreamlingError.user(
                f"{label}: table {name} column '{column_name}' is NOT NULL without a default, "
                "but the input has no such column"
            )
    if conflict_keys and set(conflict_keys) not in unique_keys(cur, schema, table):
        raise StreamlingError.user(
            f"{label}: table {name} has no primary key or unique index on ({', '.join(conflict_keys)}), "
            "which upserts need"
        )
    return staging
