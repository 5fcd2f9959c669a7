"""How far a ClickHouse table has grown, as a backfill would see it: the largest value of its first sort-key
column (a resumed backfill reads only rows after its committed cursor, so only a larger key is new data).

What the Dagster backfill sensor watches. It lives in the engine so that the engine's process can answer it
(`streamling serve`'s ``POST /clickhouse/marks``): while the engine's runs hold the embedded ClickHouse data path,
chdb lets no other process open it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streamling.clickhouse.client import qualified, quote
from streamling.clickhouse.paging import literal
from streamling.clickhouse.tables import TableInfo, inspect


@dataclass(frozen=True)
class KeyMark:
    """One table's high-water mark: `component` is ``<database>.<table> max(<first sort-key column>)``."""

    component: str
    now: str | None
    """The largest value as ClickHouse prints it; None for an empty table."""
    grew: bool
    """Whether `now` is beyond the recorded value in ClickHouse's own ordering (also when the recorded value no
    longer parses as the column's type, e.g. after the table was re-created; always with nothing recorded)."""


def key_marks(
    client: Any,
    tables: Iterable[tuple[str, str]],
    recorded: Mapping[str, str | None],
    where: str,
    checking: Callable[[str], None] = lambda _: None,
) -> list[KeyMark]:
    """Each table's mark against `recorded` (by component); `checking` is told each table before it is read."""
    marks = []
    for database, table in tables:
        checking(f"{database}.{table}")
        info = inspect(client, database, table, where)
        component = f"{database}.{table} max({info.sorting_key[0]})"
        now, grew = key_max(client, info, recorded.get(component))
        marks.append(KeyMark(component, now, grew))
    return marks


def key_max(client: Any, info: TableInfo, recorded: str | None) -> tuple[str | None, bool]:
    """The largest value of the table's first sort-key column as ClickHouse prints it (None when there is none),
    and whether it is beyond `recorded` (see `KeyMark.grew`)."""
    key = info.sorting_key[0]
    column = quote(key)
    sql = f"SELECT count({column}), toString(max({column}))"
    if recorded is not None:
        sql += f", max({column}) > accurateCastOrNull({literal(recorded)}, {literal(info.column(key).base)})"
    row = client.query(f"{sql} FROM {qualified(info.database, info.table)}").result_rows[0]
    if not row[0]:
        return None, False
    if recorded is None:
        return row[1], True
    return row[1], row[2] is None or bool(row[2])
