"""How far a ClickHouse table has grown, as a backfill would see it: the largest value of its first sort-key
column (a resumed backfill reads only rows after its committed cursor, so only a larger key is new data).

What the Dagster backfill sensor watches, through the engine's public `streamling.table_marks` (`read_marks`).
It lives in the engine so that the engine's process can answer it (`streamling serve`'s ``POST /clickhouse/marks``):
while the engine's runs hold the embedded ClickHouse data path, chdb lets no other process open it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamling.clickhouse.client import qualified, quote, redact, transient_client
from streamling.clickhouse.tables import TableInfo, inspect
from streamling.errors import StreamlingError, first_line

if TYPE_CHECKING:
    from streamling.config import Settings


@dataclass(frozen=True)
class KeyMark:
    """One table's high-water mark: `component` is ``<database>.<table> max(<first sort-key column>)``."""

    component: str
    now: str | None
    """The largest value as ClickHouse prints it; None for an empty table."""
    grew: bool
    """Whether `now` is beyond the recorded value in ClickHouse's own ordering (also when the recorded value no
    longer parses as the column's type, e.g. after the table was re-created; always with nothing recorded)."""


def read_marks(
    settings: Settings,
    tables: Iterable[tuple[str, str]],
    recorded: Mapping[str, str | None],
    where: str,
    checking: Callable[[str], None] = lambda _: None,
) -> list[KeyMark]:
    """`key_marks` of `settings.clickhouse_source`'s `tables`, read in this process through a client closed
    afterwards, so a process that does not run pipelines (the Dagster code-location server) never keeps the data
    path from the runs it launches (`streamling.table_marks` asks a warm engine first, which holds it).

    Every failure is a StreamlingError whose message has no credentials (`redact`): the caller shows it as it is."""
    source = settings.clickhouse_source
    try:
        with transient_client(source, where) as client:
            return key_marks(client, list(tables), recorded, where, checking)
    except StreamlingError as exc:
        text = redact(exc.message, source)
        raise (StreamlingError.user(text) if exc.user_facing else StreamlingError.retry(text)) from None
    except Exception as exc:
        raise StreamlingError.retry(f"{where}: {redact(first_line(exc), source)}") from None


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
    and whether it is beyond `recorded` (see `KeyMark.grew`). The recorded value and the column's type are query
    parameters: the value is whatever a cursor holds, the comparison ClickHouse's own."""
    key = info.sorting_key[0]
    column = quote(key)
    sql = f"SELECT count({column}), toString(max({column}))"
    parameters = None
    if recorded is not None:
        sql += f", max({column}) > accurateCastOrNull({{recorded:String}}, {{kind:String}})"
        parameters = {"recorded": recorded, "kind": info.column(key).base}
    row = client.query(f"{sql} FROM {qualified(info.database, info.table)}", parameters=parameters).result_rows[0]
    if not row[0]:
        return None, False
    if recorded is None:
        return row[1], True
    return row[1], row[2] is None or bool(row[2])
