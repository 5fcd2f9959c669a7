"""Values reach ClickHouse as query parameters, never pasted into SQL: awkward values (quotes, backslashes, newlines,
NULL, arrays, dates, 76-digit decimals) on the real (embedded) engine, through the driver's binding and through the
pager, the table marks and the hybrid's offset look-up that use it. And `streamling.table_marks`, the engine's public
call the Dagster backfill sensor makes."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from streamling.clickhouse.marks import key_marks
from streamling.clickhouse.offsets import recorded_offsets
from streamling.clickhouse.paging import Pager
from streamling.clickhouse.tables import inspect
from streamling.errors import StreamlingError
from tests.net import free_port

AWKWARD = [
    "it's",
    "back\\slash",
    "ends with \\",
    "quote \\' and escape",
    'double "quoted"',
    "new\nline\ttab",
    "{p0:String}",
    "%(x)s and %s",
    "`tick`",
    "'; DROP TABLE x; --",
    "ünïcödé ✓",
    "",
]
BIG = Decimal("1234567890123456789012345678901234567890123456.12345678901234567890")
"""66 integer and 20 fractional digits: past Spark's 38, within ClickHouse's 76."""


def test_the_driver_binds_awkward_values_on_the_embedded_engine(clickhouse) -> None:
    client, _ = clickhouse
    for text in AWKWARD:
        assert client.query("SELECT {s:String}", parameters={"s": text}).result_rows == [(text,)]
    row = client.query(
        "SELECT {n:Nullable(String)} IS NULL, {a:Array(String)}, {d:Date}, {t:DateTime64(6, 'UTC')}, "
        "toString({x:Decimal(76, 20)})",
        parameters={
            "n": None,
            "a": AWKWARD,
            "d": date(1999, 12, 31),
            "t": datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC),
            "x": BIG,
        },
    ).result_rows[0]
    assert row[0] == 1
    assert row[1] == AWKWARD
    assert row[2] == date(1999, 12, 31)
    assert row[3].replace(tzinfo=UTC) == datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
    assert Decimal(row[4]) == BIG


def test_rows_are_found_by_bound_values(clickhouse) -> None:
    client, db = clickhouse
    client.command(
        f"CREATE TABLE {db}.odd (name String, note Nullable(String), tags Array(String), day Date, "
        "amount Decimal(76, 20)) ENGINE = MergeTree ORDER BY name"
    )
    rows = [
        (text, None if i % 3 == 0 else text, [text, "x"], date(2020, 1, 1 + i), BIG + i)
        for i, text in enumerate(AWKWARD)
    ]
    client.insert(f"{db}.odd", rows, column_names=["name", "note", "tags", "day", "amount"])
    for i, text in enumerate(AWKWARD):
        found = client.query(
            f"SELECT name, note, tags, day, amount FROM {db}.odd WHERE name = {{name:String}} "
            "AND has(tags, {tag:String}) AND day = {day:Date} AND amount = {amount:Decimal(76, 20)} "
            "AND (note = {name:String} OR note IS NULL)",
            parameters={"name": text, "tag": text, "day": date(2020, 1, 1 + i), "amount": BIG + i},
        ).result_rows
        assert found == [rows[i]], text
    nulls = client.query(
        f"SELECT count() FROM {db}.odd WHERE note IS NULL AND name IN {{names:Array(String)}}",
        parameters={"names": AWKWARD},
    ).result_rows
    assert nulls == [(len(range(0, len(AWKWARD), 3)),)]


def test_the_pager_pages_awkward_string_keys_and_big_decimals_every_row_once(clickhouse) -> None:
    """Tuple mode: each page's cursor is the last key's text, bound back into the next page's query."""
    client, db = clickhouse
    client.command(
        f"CREATE TABLE {db}.keys (name String, amount Decimal(76, 20), n UInt32) ENGINE = MergeTree "
        "ORDER BY (name, amount)"
    )
    names = [text for text in AWKWARD for _ in range(3)]
    amounts = [str(BIG + i % 3) for i in range(len(names))]
    client.insert(f"{db}.keys", [(a, Decimal(b), i) for i, (a, b) in enumerate(zip(names, amounts, strict=True))])
    info = inspect(client, db, "keys", "test")
    reader = Pager(client, info, list(info.columns), None, page_size=2, width=10)
    reader.snapshot()
    position = reader.initial()
    seen: list[tuple[str, str]] = []
    while (page := reader.next_page(position)) is not None:
        table, end = page
        replay = reader.read_between(position, end)  # a replay binds both cursors
        assert replay.column("n").to_pylist() == table.column("n").to_pylist()
        seen += zip(table.column("name").to_pylist(), table.column("amount").to_pylist(), strict=True)
        position = end
    expected = sorted(zip(names, amounts, strict=True), key=lambda r: (r[0].encode(), Decimal(r[1])))
    assert [(n, Decimal(a)) for n, a in seen] == [(n, Decimal(a)) for n, a in expected]

    # a user's filter is SQL, sent as written next to the bound values: its % and braces are its own
    awkward_filter = "name != '{p0:String}' AND name NOT LIKE '%(x)s%'"
    reader = Pager(client, info, list(info.columns), awkward_filter, page_size=2, width=10)
    position, kept = reader.initial(), []
    while (page := reader.next_page(position)) is not None:
        kept += page[0].column("name").to_pylist()
        position = page[1]
    assert kept == [n for n, _ in expected if n not in ("{p0:String}", "%(x)s and %s")]

    # start_at is a bound value too: the rows from an awkward name on
    start = "it's"
    reader = Pager(client, info, list(info.columns), None, page_size=100, width=10, start_at=start)
    first = reader.next_page(reader.initial())
    assert first is not None
    assert first[0].column("name").to_pylist() == [n for n, _ in expected if n.encode() >= start.encode()]


def test_the_pager_binds_a_date_start_and_range_bounds(clickhouse) -> None:
    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.days (day Date, n UInt32) ENGINE = MergeTree ORDER BY day")
    client.insert(f"{db}.days", [(date(2024, 1, 1 + i), i) for i in range(20)])
    info = inspect(client, db, "days", "test")
    days_since_epoch = (date(2024, 1, 15) - date(1970, 1, 1)).days
    reader = Pager(client, info, list(info.columns), None, 3, 2, start_at="2024-01-05", bounds=(0, days_since_epoch))
    reader.snapshot()
    position = reader.initial()
    got: list[int] = []
    while (page := reader.next_page(position)) is not None:
        got += page[0].column("n").to_pylist()
        position = page[1]
    assert got == list(range(4, 14))  # 2024-01-05 up to, not including, 2024-01-15


def test_key_marks_compare_awkward_recorded_values_in_clickhouse_order(clickhouse) -> None:
    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.names (name String) ENGINE = MergeTree ORDER BY name")
    client.command(f"CREATE TABLE {db}.stamps (at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY at")
    client.insert(f"{db}.names", [(text,) for text in AWKWARD])
    client.command(f"INSERT INTO {db}.stamps VALUES ('2024-01-02 03:04:05.678')")
    top = max(AWKWARD, key=str.encode)
    names, stamps = f"{db}.names max(name)", f"{db}.stamps max(at)"
    marks = key_marks(client, [(db, "names"), (db, "stamps")], {}, "test")
    assert [(m.component, m.now, m.grew) for m in marks] == [
        (names, top, True),
        (stamps, "2024-01-02 03:04:05.678", True),
    ]
    recorded = {names: top, stamps: "2024-01-02 03:04:05.678"}
    assert [m.grew for m in key_marks(client, [(db, "names"), (db, "stamps")], recorded, "test")] == [False, False]
    for below in ("it's", "ends with \\", "quote \\' and escape"):
        (mark,) = key_marks(client, [(db, "names")], {names: below}, "test")
        assert mark.grew is (top.encode() > below.encode())
    # a recorded value that is no date-time of the column's type (a re-created table): counted as grown
    (mark,) = key_marks(client, [(db, "stamps")], {stamps: "it's not a time'); --"}, "test")
    assert mark.grew is True


def test_recorded_offsets_bind_an_awkward_topic_name(clickhouse) -> None:
    client, db = clickhouse
    client.command(
        f"CREATE TABLE {db}.offsets (topic String, `the partition` Int32, `_offset` Int64) "
        "ENGINE = MergeTree ORDER BY (topic, `the partition`, `_offset`)"
    )
    topic = "orders's \\ topic"
    client.insert(
        f"{db}.offsets",
        [(topic, 0, 5), (topic, 0, 9), (topic, 1, 3), ("other", 0, 100), ("other", 2, 7)],
    )
    assert recorded_offsets(client, db, "offsets", "the partition", "_offset", "topic", topic) == {0: 9, 1: 3}
    assert recorded_offsets(client, db, "offsets", "the partition", "_offset") == {0: 100, 1: 3, 2: 7}
    assert recorded_offsets(client, db, "offsets", "the partition", "_offset", "topic", "none") == {}


# ---- streamling.table_marks: the public call ----


def test_table_marks_reads_each_table_and_names_the_one_being_read(make_settings, clickhouse_env, clickhouse) -> None:
    from streamling import KeyMark, table_marks

    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.blocks (block UInt64, id UInt32) ENGINE = MergeTree ORDER BY block")
    client.command(f"CREATE TABLE {db}.empty (k String) ENGINE = MergeTree ORDER BY k")
    client.command(f"INSERT INTO {db}.blocks SELECT number, 0 FROM numbers(10)")
    settings = make_settings(environ=clickhouse_env)
    told: list[str] = []
    marks = table_marks(
        settings, [(db, "blocks"), (db, "empty")], {f"{db}.blocks max(block)": "10"}, checking=told.append
    )
    assert marks == [KeyMark(f"{db}.blocks max(block)", "9", False), KeyMark(f"{db}.empty max(k)", None, False)]
    assert told == [f"{db}.blocks", f"{db}.empty"]
    assert table_marks(settings, [(db, "blocks")], {f"{db}.blocks max(block)": "8"})[0].grew is True

    with pytest.raises(StreamlingError) as missing:
        table_marks(settings, [(db, "blocks"), (db, "gone")], where="sensor", checking=told.append)
    assert missing.value.user_facing
    assert missing.value.message == f"sensor: table {db}.gone does not exist"
    assert told[-1] == f"{db}.gone"


def test_table_marks_failures_are_retriable_and_keep_the_password_out(make_settings) -> None:
    from streamling import table_marks

    port = free_port()
    settings = make_settings(
        **{
            "clickhouse_source.url": f"http://u:url-s3cret@127.0.0.1:{port}",
            "clickhouse_source.password": "s3cret-pw",
            "clickhouse_source.connect_timeout_sec": "2",
        }
    )
    with pytest.raises(StreamlingError) as down:
        table_marks(settings, [("default", "t")], where="sensor")
    assert down.value.retriable and not down.value.user_facing
    assert down.value.message.startswith(f"sensor: cannot connect to http://127.0.0.1:{port}: "), down.value.message
    assert "s3cret" not in down.value.message


def test_table_marks_turns_a_bad_engine_url_into_a_streamling_error(make_settings, clickhouse_env) -> None:
    """A port out of range makes `urlsplit(...).port` raise ValueError before any request; the Dagster sensor
    catches StreamlingErrors only, so it must arrive as one (retriable, credentials left out)."""
    from streamling import table_marks

    settings = make_settings(environ=clickhouse_env, engine_url="http://u:engine-s3cret@127.0.0.1:99999")
    with pytest.raises(StreamlingError) as bad:
        table_marks(settings, [("default", "t")], where="sensor")
    assert bad.value.retriable and not bad.value.user_facing
    assert bad.value.message.startswith("sensor: the table marks from the engine at "), bad.value.message
    assert "Port out of range" in bad.value.message
    assert "s3cret" not in bad.value.message


def test_table_marks_turns_an_unreadable_engine_answer_into_a_streamling_error(
    make_settings, clickhouse_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine of another version answers with marks this one cannot read (a TypeError building `KeyMark`)."""
    from streamling import table_marks
    from streamling.engine_client import EngineClient

    monkeypatch.setattr(EngineClient, "key_marks", lambda *_: [{"component": "t", "renamed": 1}])
    settings = make_settings(environ=clickhouse_env, engine_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(StreamlingError) as unreadable:
        table_marks(settings, [("default", "t")], where="sensor")
    assert unreadable.value.retriable and not unreadable.value.user_facing
    assert "TypeError" in unreadable.value.message, unreadable.value.message


def test_a_bound_wide_decimal_finds_its_row_read_with_every_digit(clickhouse) -> None:
    """A 76-digit decimal bound as a parameter matches exactly, and the source reads it as its exact text
    (`select_expression`)."""
    from streamling.clickhouse.tables import select_expression

    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.wide (k UInt8, amount Decimal(76, 20)) ENGINE = MergeTree ORDER BY k")
    client.insert(f"{db}.wide", [(1, BIG)])
    info = inspect(client, db, "wide", "test")
    table = client.query_arrow(
        f"SELECT {select_expression(info.column('amount'))} "
        f"FROM (SELECT * FROM {db}.wide WHERE amount = {{x:Decimal(76, 20)}})",
        parameters={"x": BIG},
    )
    assert table.column("amount").to_pylist() == [str(BIG)]
    assert table.schema.field("amount").type in (pa.string(), pa.large_string(), pa.binary())
