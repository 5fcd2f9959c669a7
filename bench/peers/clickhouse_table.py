"""Scenario 7's ClickHouse table in an embedded data path (chdb), created before a contender starts and read after it
ended: a process of its own each time, because chdb opens one data path per process and the contender holds it while
it runs.

    python bench/peers/clickhouse_table.py create PATH
    python bench/peers/clickhouse_table.py stats PATH FROM_MS    # one JSON line

The table is what the pipeline's ClickHouse sink creates for the enrichment (a ReplacingMergeTree on ``id`` with its
``insert_time`` version and ``is_deleted`` flag), plus ``visible_at DEFAULT now64(3)``: ClickHouse stamps each row
with the time its insert was processed, whoever inserted it, so visibility latency is ``visible_at - ts`` (``ts`` is
the record's produce time) with no contender reporting on itself.
"""

from __future__ import annotations

import json
import sys

TABLE = "default.seed_events"
DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id Int64,
    user_id String,
    email String,
    country String,
    device String,
    amount Float64,
    amount_with_fee Float64,
    price Decimal(20, 4),
    ts Int64,
    segment String,
    big_spender Nullable(Bool),
    is_deleted UInt8 DEFAULT 0,
    insert_time DateTime64(6, 'UTC') DEFAULT now64(6),
    visible_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(insert_time, is_deleted) ORDER BY id
SETTINGS non_replicated_deduplication_window = 1000
"""
STATS = f"""
SELECT
    count() AS rows,
    uniqExact(id) AS distinct_ids,
    countIf(ts >= {{since:Int64}}) AS rows_measured,
    quantileExactIf(0.5)(toUnixTimestamp64Milli(visible_at) - ts, ts >= {{since:Int64}}) AS p50_ms,
    quantileExactIf(0.99)(toUnixTimestamp64Milli(visible_at) - ts, ts >= {{since:Int64}}) AS p99_ms,
    maxIf(toUnixTimestamp64Milli(visible_at) - ts, ts >= {{since:Int64}}) AS max_ms,
    countIf(big_spender) AS big_spender_rows
FROM {TABLE}
"""


def main() -> None:
    import clickhouse_connect

    command, path = sys.argv[1], sys.argv[2]
    client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
    if command == "create":
        client.command(DDL)
        return
    result = client.query(STATS, parameters={"since": int(sys.argv[3])})
    row = zip(result.column_names, result.first_row, strict=True)
    print(json.dumps({k: float(v) if v is not None else None for k, v in row}))


if __name__ == "__main__":
    main()
