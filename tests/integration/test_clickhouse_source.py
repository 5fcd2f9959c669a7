"""The ClickHouse source on the real (embedded) ClickHouse engine: paging, FINAL semantics, cursors, resume."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from streamling import reset_positions, run_pipeline
from streamling.api import validate_pipeline
from streamling.clickhouse.paging import Pager
from streamling.clickhouse.source import ClickHouseSource, ClickHouseSourceSpec
from streamling.clickhouse.tables import inspect
from streamling.errors import StreamlingError
from streamling.state.memory import InMemoryStateBackend
from streamling.state.sqlite import SqliteStateBackend
from tests.integration.collect_sink import COLLECTED


def make_table(client, database: str, *, hot: int = 0, replacing: bool = False) -> int:
    """Blocks 0..999 sparse (every 3rd), 1000..1099 dense (40 rows each), plus one hot block 5000 with `hot`
    rows; returns the row count."""
    engine = "ReplacingMergeTree(ver, del)" if replacing else "MergeTree"
    client.command(
        f"CREATE TABLE {database}.events (block UInt64, idx UInt32, who String, amount Float64, ver UInt64, "
        f"del UInt8) ENGINE = {engine} ORDER BY (block, idx)"
    )
    sparse = np.arange(0, 1000, 3)
    dense = np.repeat(np.arange(1000, 1100), 40)
    blocks = np.concatenate([sparse, dense, np.full(hot, 5000)]).astype(np.uint64)
    idx = np.concatenate([np.zeros(len(sparse)), np.tile(np.arange(40), 100), np.arange(hot)]).astype(np.uint32)
    n = len(blocks)
    client.insert_arrow(
        f"{database}.events",
        pa.table(
            {
                "block": pa.array(blocks),
                "idx": pa.array(idx),
                "who": pa.array([f"w{i % 13}" for i in range(n)]),
                "amount": pa.array(np.arange(n, dtype=float)),
                "ver": pa.array(np.ones(n, dtype=np.uint64)),
                "del": pa.array(np.zeros(n, dtype=np.uint8)),
            }
        ),
    )
    return n


def pager(client, database: str, page_size: int = 100, width: int = 10, **extra) -> Pager:
    info = inspect(client, database, "events", "test")
    return Pager(client, info, list(info.columns), extra.get("filter"), page_size, width, extra.get("start_at"))


def keys_of(table: pa.Table) -> list[tuple[int, int]]:
    return [
        (int(b), int(i))
        for b, i in zip(table.column("block").to_pylist(), table.column("idx").to_pylist(), strict=True)
    ]


def test_every_row_once_across_sparse_ranges_dense_clusters_and_a_hot_key(clickhouse) -> None:
    client, database = clickhouse
    total = make_table(client, database, hot=350)
    reader = pager(client, database)
    reader.snapshot()
    position = reader.initial()
    seen: list[tuple[int, int]] = []
    pages = []
    while (page := reader.next_page(position)) is not None:
        table, end = page
        assert table.num_rows <= 100
        # a replay of exactly this epoch reads exactly these rows
        assert keys_of(reader.read_between(position, end)) == keys_of(table)
        seen += keys_of(table)
        pages.append(end)
        position = end
    assert len(seen) == total == len(set(seen))
    assert seen == sorted(seen)
    assert any("key" in p for p in pages), "the hot key was paged on the full sort tuple"
    assert reader.exhausted(position) or reader.next_page(position) is None


def test_resume_from_any_committed_cursor_reads_the_rest_exactly_once(clickhouse) -> None:
    """A fresh reader (as after a restart) continues strictly after each cursor, mid-range or mid-hot-key."""
    client, database = clickhouse
    make_table(client, database, hot=250)
    first = pager(client, database)
    first.snapshot()
    cursors, position = [], first.initial()
    everything = []
    while (page := first.next_page(position)) is not None:
        everything += keys_of(page[0])
        position = page[1]
        cursors.append(position)
    for cut in (cursors[2], next(c for c in cursors if "key" in c), cursors[-2]):
        resumed = pager(client, database, page_size=70, width=3)
        resumed.snapshot()
        rest, position = [], cut
        while (page := resumed.next_page(position)) is not None:
            rest += keys_of(page[0])
            position = page[1]
        done = everything[: everything.index(rest[0])]
        assert done + rest == everything


def test_replacing_merge_tree_reads_latest_version_and_a_delete_wins_a_tie(clickhouse) -> None:
    client, database = clickhouse
    make_table(client, database, replacing=True)
    changes = pa.table(
        {
            "block": pa.array([0, 3, 6, 6], pa.uint64()),
            "idx": pa.array([0, 0, 0, 0], pa.uint32()),
            "who": ["newer", "deleted", "tie-deleted", "tie-kept-by-clickhouse"],
            "amount": [1.0, 2.0, 3.0, 4.0],
            "ver": pa.array([5, 2, 7, 7], pa.uint64()),
            "del": pa.array([0, 1, 1, 0], pa.uint8()),
        }
    )
    client.insert_arrow(f"{database}.events", changes.slice(0, 3))
    client.insert_arrow(f"{database}.events", changes.slice(3, 1))  # same version, inserted after the delete
    info = inspect(client, database, "events", "test")
    assert (info.version, info.is_deleted) == ("ver", "del")
    # version column not selected: FINAL semantics must still apply
    reader = Pager(client, info, [info.column("block"), info.column("who")], None, 1000, 100)
    reader.snapshot()
    rows, position = [], reader.initial()
    while (page := reader.next_page(position)) is not None:
        rows += page[0].to_pylist()
        position = page[1]
    by_block = {int(r["block"]): r["who"] for r in rows if r["block"] in (0, 3, 6)}
    assert by_block == {0: "newer"}  # 3 deleted; 6: the tie goes to the delete
    assert {r["_gs_op"] for r in rows} == {"i"}
    assert len(rows) == 334 + 4000 - 2
    assert set(rows[0]) == {"block", "who", "_gs_op"}


def test_pipeline_job_mode_start_at_filter_and_restart(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, tmp_path
) -> None:
    client, database = clickhouse
    make_table(client, database, hot=120)
    key = uuid.uuid4().hex
    text = f"""
        sources:
          ch:
            type: clickhouse
            table_name: {database}.events
            columns: block, idx, who
            filter: who != 'w0'
            start_at: START
            primary_key: block, idx
        sinks:
          out: {{type: test.collect, from: ch, options: {{key: {key}}}}}
        """
    settings = make_settings(
        environ=clickhouse_env,
        job_mode=True,
        **{"clickhouse_source.page_size": 90, "clickhouse_source.sort_key_range": 7},
    )
    summary = run_pipeline(write_pipeline(text.replace("START", "1050")), settings, spark)
    rows = [row for _, row in COLLECTED[key]]
    expected = client.query(f"SELECT count() FROM {database}.events WHERE block >= 1050 AND who != 'w0'").result_rows[
        0
    ][0]
    assert len(rows) == expected == len({(r["block"], r["idx"]) for r in rows})
    assert min(int(r["block"]) for r in rows) >= 1050
    assert all(r["who"] != "w0" for r in rows)
    assert summary.sources["ch"].epochs >= 2
    assert summary.sources["ch"].rows_in == expected  # the Dagster check's "rows read"
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        saved = state.items("clickhouse_source:")
    assert list(saved) == [f"clickhouse_source:ch:{database}.events"]
    # rerun with the same start_at: resumes after the cursor, nothing is read again
    COLLECTED[key].clear()
    run_pipeline(write_pipeline(text.replace("START", "1050")), settings, spark)
    assert COLLECTED[key] == []
    # the position belongs to the pipeline: a dropped or changed start_at resumes the saved cursor
    run_pipeline(write_pipeline(text.replace("start_at: START", "")), settings, spark)
    run_pipeline(write_pipeline(text.replace("START", "1098")), settings, spark)
    assert COLLECTED[key] == []
    # a reset is what starts it over from the new start_at
    reset_positions(write_pipeline(text.replace("START", "1098")), settings)
    run_pipeline(write_pipeline(text.replace("START", "1098")), settings, spark)
    again = [row for _, row in COLLECTED[key]]
    assert {int(r["block"]) for r in again} == {1098, 1099, 5000}


def test_validation_names_missing_columns_and_bad_filters(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env
) -> None:
    client, database = clickhouse
    make_table(client, database)
    settings = make_settings(environ=clickhouse_env)
    bad_column = write_pipeline(f"""
        sources:
          ch: {{type: clickhouse, table_name: {database}.events, columns: "block, nope"}}
        sinks:
          out: {{type: blackhole, from: ch}}
        """)
    assert validate_pipeline(bad_column, settings, spark).errors == [
        f"clickhouse source 'ch': columns ['nope'] are not in {database}.events; "
        "available: block, idx, who, amount, ver, del"
    ]
    bad_filter = write_pipeline(f"""
        sources:
          ch: {{type: clickhouse, table_name: {database}.events, filter: "nonsense("}}
        sinks:
          out: {{type: blackhole, from: ch}}
        """)
    (error,) = validate_pipeline(bad_filter, settings, spark).errors
    assert error.startswith("clickhouse source 'ch': invalid filter 'nonsense(': ")
    missing = write_pipeline(f"""
        sources:
          ch: {{type: clickhouse, table_name: {database}.absent}}
        sinks:
          out: {{type: blackhole, from: ch}}
        """)
    assert validate_pipeline(missing, settings, spark).errors == [
        f"clickhouse source 'ch': table {database}.absent does not exist"
    ]


@pytest.mark.parametrize("page_size", [1, 7])
def test_tiny_pages_still_read_every_row(clickhouse, page_size: int) -> None:
    client, database = clickhouse
    client.command(f"CREATE TABLE {database}.events (block Int32, idx Int32) ENGINE = MergeTree ORDER BY (block, idx)")
    client.command(f"INSERT INTO {database}.events VALUES (1,1),(1,1),(1,2),(2,1),(2,1),(2,1),(9,0)")
    info = inspect(client, database, "events", "test")
    reader = Pager(client, info, list(info.columns), None, page_size, 1)
    reader.snapshot()
    position, rows = reader.initial(), []
    while (page := reader.next_page(position)) is not None:
        rows += keys_of(page[0])
        position = page[1]
    assert sorted(rows) == [(1, 1), (1, 1), (1, 2), (2, 1), (2, 1), (2, 1), (9, 0)]


def test_round_trip_through_the_clickhouse_sink_reads_the_final_state(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env
) -> None:
    """The sink's ReplacingMergeTree(insert_time, is_deleted) table read back by the source: one row per live
    key with its latest values, deleted keys gone — the same final state the change stream describes."""
    client, database = clickhouse
    settings = make_settings(
        environ={**clickhouse_env, "STREAMLING__CLICKHOUSE_SINK__DATABASE": database}, job_mode=True
    )
    write = write_pipeline(
        """
        sources:
          changes: {type: generator, rows: 3000, key_space: 200, delete_every: 9, record_batch_size: 700}
        sinks:
          table: {type: clickhouse, from: changes, table: accounts, primary_key: id}
        """,
        name="write.yaml",
    )
    run_pipeline(write, settings, spark)
    key = uuid.uuid4().hex
    read = write_pipeline(
        f"""
        sources:
          history: {{type: clickhouse, table_name: {database}.accounts, columns: "id, name, amount"}}
        sinks:
          out: {{type: test.collect, from: history, options: {{key: {key}}}}}
        """,
        name="read.yaml",
    )
    run_pipeline(read, settings, spark)
    got = {r["id"]: (r["name"], r["amount"]) for _, r in COLLECTED[key]}
    expected = client.query(f"SELECT id, name, amount FROM {database}.accounts FINAL ORDER BY id").result_rows
    assert got == {i: (n, a) for i, n, a in expected}
    assert 0 < len(got) < 200


def test_256_bit_and_wide_decimal_columns_round_trip_and_stay_exact_in_sql(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env
) -> None:
    """UInt256/Int256/Decimal(60,10) read by the source are marked u256/i256/decimal(60,10): SQL operators on them
    are exact, and the sink creates the same ClickHouse types again (and the widened ones for results)."""
    client, database = clickhouse
    client.command(
        f"CREATE TABLE {database}.balances (id UInt32, wei UInt256, delta Nullable(Int256), price Decimal(60, 10)) "
        "ENGINE = MergeTree ORDER BY id"
    )
    top = 2**256 - 1
    client.command(
        f"INSERT INTO {database}.balances VALUES (1, '{top}', '-{2**255}', '12345678901234567890.5'), "
        "(2, '7', NULL, '0.0000000001')"
    )
    settings = make_settings(
        environ={**clickhouse_env, "STREAMLING__CLICKHOUSE_SINK__DATABASE": database}, job_mode=True
    )
    path = write_pipeline(
        f"""
        sources:
          ch: {{type: clickhouse, table_name: {database}.balances, primary_key: id}}
        transforms:
          math:
            type: sql
            primary_key: id
            sql: >
              SELECT CAST(id AS BIGINT) AS id, wei, wei / 2 AS half, delta, delta + 1 AS next, price,
                     price * 2 AS twice, CAST(wei AS TEXT) AS wei_text
              FROM ch WHERE wei > 1
        sinks:
          out: {{type: clickhouse, from: math, table: copied, primary_key: id}}
        """
    )
    run_pipeline(path, settings, spark)
    types = dict(
        client.query(
            f"SELECT name, type FROM system.columns WHERE database = '{database}' AND table = 'copied'"
        ).result_rows
    )
    assert {k: types[k] for k in ("wei", "half", "delta", "next", "price", "twice", "wei_text")} == {
        "wei": "Nullable(UInt256)",
        "half": "Nullable(UInt256)",
        "delta": "Nullable(Int256)",
        "next": "Nullable(Int256)",
        "price": "Nullable(Decimal(60, 10))",
        "twice": "Nullable(Decimal(62, 10))",
        "wei_text": "Nullable(String)",
    }
    rows = client.query(
        f"SELECT id, toString(wei), toString(half), toString(delta), toString(next), toString(price), "
        f"toString(twice), wei_text FROM {database}.copied FINAL ORDER BY id"
    ).result_rows
    assert rows == [
        (
            1,
            str(top),
            str(top // 2),
            str(-(2**255)),
            str(1 - 2**255),
            "12345678901234567890.5",
            "24691357802469135781",
            str(top),
        ),
        (2, "7", "3", None, None, "0.0000000001", "0.0000000002", "7"),
    ]


# ---- settings and fields of the original Streamling ----


def slow_table(client, database: str, keys: list[int]) -> Pager:
    """Reading a row takes 4 ms (``sleepEachRow`` in the filter): a page's time grows with its width."""
    client.command(f"CREATE TABLE {database}.slow (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
    client.insert_arrow(f"{database}.slow", pa.table({"k": pa.array(keys, pa.uint32()), "v": [f"v{k}" for k in keys]}))
    info = inspect(client, database, "slow", "test")
    reader = Pager(client, info, list(info.columns), "sleepEachRow(0.004) = 0", 1000, 1000, timeout_sec=1.0)
    reader.snapshot()
    return reader


def test_a_range_slower_than_query_timeout_is_read_again_at_half_the_width(clickhouse, caplog) -> None:
    """clickhouse_source.query_timeout_sec is ClickHouse's max_execution_time for each page: 400 rows take 1.6 s
    and time out, so the range is halved until a page fits, and every row is still read once, in order."""
    client, db = clickhouse
    reader = slow_table(client, db, list(range(400)))
    position, keys, pages = reader.initial(), [], 0
    with caplog.at_level("WARNING", logger="streamling.clickhouse"):
        while (page := reader.next_page(position)) is not None:
            table, position = page
            keys += table.column("k").to_pylist()
            pages += 1
    assert keys == list(range(400))
    assert pages >= 2
    assert f"`{db}`.`slow`: the range [0, 400) took longer than query_timeout_sec (1s); reading it at width 200" in (
        caplog.text
    )


def test_a_page_that_cannot_shrink_fails_naming_the_setting(clickhouse) -> None:
    client, db = clickhouse
    reader = slow_table(client, db, [7] * 400)  # one key value: no narrower range exists
    with pytest.raises(StreamlingError) as caught:
        reader.next_page(reader.initial())
    assert caught.value.retriable
    assert caught.value.message == (
        f"a page of `{db}`.`slow` took longer than clickhouse_source.query_timeout_sec (1s) and cannot be made "
        "smaller (one sort-key value, or a table paged by its full sort key); raise query_timeout_sec"
    )


def test_query_timeout_setting_and_parallelism_reach_the_pages(
    spark, make_settings, clickhouse_env, clickhouse
) -> None:
    client, db = clickhouse
    make_table(client, db)
    settings = make_settings(
        environ=clickhouse_env, **{"clickhouse_source.query_timeout_sec": 7, "clickhouse_source.database": db}
    )
    spec = ClickHouseSourceSpec.model_validate({"type": "clickhouse", "table_name": "events", "parallelism": 3})
    source = ClickHouseSource("ch", spec, settings)
    assert source.pager.timeout_sec == 7.0
    frame, _ = source.next_epoch(spark, source.load_position(InMemoryStateBackend("app")))
    assert frame.rdd.getNumPartitions() == 3
    assert frame.count() > 0
