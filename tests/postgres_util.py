"""Reading what a pipeline wrote into Postgres, for tests (through the `pg_connect` fixture's connections)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def table_rows(pg_connect: Callable[[], Any], schema: str, table: str) -> list[tuple]:
    """Every row of ``"schema"."table"``, ordered by its first column."""
    with pg_connect() as conn:
        return conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1').fetchall()


def table_count(pg_connect: Callable[[], Any], schema: str, table: str) -> int:
    """The table's row count; 0 while the sink has not created it yet."""
    with pg_connect() as conn:
        if conn.execute("SELECT to_regclass(%s)", [f'"{schema}"."{table}"']).fetchone()[0] is None:
            return 0
        return conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()[0]
