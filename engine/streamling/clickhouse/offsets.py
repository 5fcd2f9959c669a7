"""The Kafka offsets a ClickHouse table records: where a hybrid source's stream continues after its backfill
(`offset_table`). The SQL lives here, with the rest of the ClickHouse code; the hybrid source only asks."""

from __future__ import annotations

from typing import Any

from streamling.clickhouse.client import qualified, quote


def recorded_offsets(
    client: Any,
    database: str,
    table: str,
    partition_column: str,
    offset_column: str,
    topic_column: str | None = None,
    topic: str | None = None,
) -> dict[int, int]:
    """The largest offset `table` holds per partition (``{partition: offset}``, empty for an empty table); with
    `topic_column`, only the rows whose topic is `topic`. Columns are quoted identifiers, the topic a query
    parameter."""
    where, parameters = "", None
    if topic_column is not None:
        where, parameters = f" WHERE {quote(topic_column)} = {{topic:String}}", {"topic": topic}
    query = (
        f"SELECT toInt64({quote(partition_column)}) AS p, max(toInt64({quote(offset_column)})) AS o "
        f"FROM {qualified(database, table)}{where} GROUP BY p ORDER BY p"
    )
    return {int(p): int(o) for p, o in client.query(query, parameters=parameters).result_rows}
