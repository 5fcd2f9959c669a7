"""The ClickHouse sink on the real ClickHouse engine, embedded (chdb), and over HTTP against a recording
loopback server for what only a wire shows (compression)."""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from streamling import run_pipeline
from streamling.api import validate_pipeline
from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
from streamling.builtins.generator_reader import generate
from streamling.clickhouse.sink import ClickHouseSink, ClickHouseSinkSpec
from streamling.errors import StreamlingError
from streamling.operators import Epoch, RunContext
from streamling.state.memory import InMemoryStateBackend

SOURCE = {"rows": 3000, "key_space": 40, "delete_every": 7, "record_batch_size": 450}


@pytest.fixture
def ch_settings(make_settings, clickhouse_env, clickhouse):
    _, database = clickhouse

    def build(**overrides: Any):
        return make_settings(
            environ=clickhouse_env, **{"job_mode": True, "clickhouse_sink.database": database, **overrides}
        )

    return build


def generated(spec: dict[str, Any], settings) -> list[dict[str, Any]]:
    """The rows a generator source with `spec` produces, computed without Spark."""
    source = GeneratorSource("src", GeneratorSourceSpec.model_validate({"type": "generator", **spec}), settings)
    config = source.reader_config()
    return [row for batch in generate(config, 0, spec["rows"], 10_000) for row in batch.to_pylist()]


def final_state(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    state: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["_gs_op"] == "d":
            state.pop(row["id"], None)
        else:
            state[row["id"]] = row
    return state


def rows_of(client, query: str) -> list[tuple]:
    return client.query(query).result_rows


def source_yaml(extra: str = "") -> str:
    return (
        f"src: {{type: generator, rows: {SOURCE['rows']}, key_space: {SOURCE['key_space']}, "
        f"delete_every: {SOURCE['delete_every']}, record_batch_size: {SOURCE['record_batch_size']}{extra}}}"
    )


def test_append_only_mode_final_shows_the_latest_state(spark, ch_settings, write_pipeline, clickhouse) -> None:
    """Keys recur within and across epochs (40 keys, 450-row epochs, inserts of 100 rows) and every 7th change
    is a delete: every change is inserted, and FINAL shows the last change per key with deleted keys gone."""
    client, db = clickhouse
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: clickhouse, from: src, table: events, primary_key: id, batch_size: 100}}
        """)
    settings = ch_settings()
    run_pipeline(path, settings, spark)
    expected = final_state(generated(SOURCE, settings))
    got = rows_of(client, f"SELECT id, amount, name FROM {db}.events FINAL ORDER BY id")
    assert got == [(k, expected[k]["amount"], expected[k]["name"]) for k in sorted(expected)]
    assert 0 < len(expected) < SOURCE["key_space"]  # some keys end deleted
    (engine,) = rows_of(client, f"SELECT engine_full FROM system.tables WHERE database = '{db}' AND name = 'events'")
    assert engine[0].startswith("ReplacingMergeTree(insert_time, is_deleted) ORDER BY (id)")
    # Every change is a row with its own, strictly increasing version (merges may already have dropped some).
    stored, distinct, deletes = rows_of(
        client, f"SELECT count(), uniqExact(insert_time), countIf(is_deleted = 1) FROM {db}.events"
    )[0]
    assert stored == distinct and 0 < stored <= SOURCE["rows"] and deletes > 0
    # A second run of the same job resumes after its last commit: nothing new, same state.
    run_pipeline(path, settings, spark)
    assert rows_of(client, f"SELECT id, amount, name FROM {db}.events FINAL ORDER BY id") == got


def test_a_gs_op_override_writes_the_table_as_without_it(spark, ch_settings, write_pipeline, clickhouse) -> None:
    """The original's ``schema_override: {_gs_op: String}``: accepted with its warning; the sink consumes the
    changes as ever (deletes are is_deleted rows) and the table gets no ``_gs_op`` column."""
    client, db = clickhouse
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: clickhouse, from: src, table: ops, primary_key: id, schema_override: {{_gs_op: String}}}}
        """)
    settings = ch_settings()
    run_pipeline(path, settings, spark)
    columns = [
        r[0] for r in rows_of(client, f"SELECT name FROM system.columns WHERE database = '{db}' AND table = 'ops'")
    ]
    assert "_gs_op" not in columns and "is_deleted" in columns
    expected = final_state(generated(SOURCE, settings))
    got = rows_of(client, f"SELECT id, amount, name FROM {db}.ops FINAL ORDER BY id")
    assert got == [(k, expected[k]["amount"], expected[k]["name"]) for k in sorted(expected)]


def test_mutation_mode_holds_exactly_the_current_rows(spark, ch_settings, write_pipeline, clickhouse, caplog) -> None:
    """The same changes with append_only_mode: false: a plain table, no FINAL needed, one row per live key."""
    client, db = clickhouse
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: clickhouse, from: src, table: current, primary_key: id, append_only_mode: false,
                 batch_size: 25, compression: ZSTD}}
        """)
    settings = ch_settings()
    with caplog.at_level(logging.INFO, logger="streamling.clickhouse"):
        summary = run_pipeline(path, settings, spark)
    assert "clickhouse sink 'out': compression zstd does not apply to the embedded engine" in caplog.text
    # One mutation per epoch, whatever the insert batches (25 rows), and the run's staging table is gone.
    (mutations,) = rows_of(
        client, f"SELECT count() FROM system.mutations WHERE database = '{db}' AND table = 'current'"
    )
    assert mutations == (summary.sources["src"].epochs,)
    staging = rows_of(client, f"SELECT name FROM system.tables WHERE database = '{db}' AND name LIKE '_streamling%'")
    assert staging == []
    expected = final_state(generated(SOURCE, settings))
    got = rows_of(client, f"SELECT id, amount, name, created_at FROM {db}.current ORDER BY id")  # no FINAL
    assert [(r[0], r[1], r[2]) for r in got] == [
        (k, expected[k]["amount"], expected[k]["name"]) for k in sorted(expected)
    ]
    assert [r[3].replace(tzinfo=None) for r in got] == [
        expected[k]["created_at"].replace(tzinfo=None) for k in sorted(expected)
    ]
    columns = rows_of(client, f"SELECT name FROM system.columns WHERE database = '{db}' AND table = 'current'")
    assert [c[0] for c in columns] == ["id", "amount", "name", "created_at"]
    (engine,) = rows_of(client, f"SELECT engine FROM system.tables WHERE database = '{db}' AND name = 'current'")
    assert engine == ("MergeTree",)


def test_types_and_schema_override_in_system_columns(spark, ch_settings, write_pipeline, clickhouse) -> None:
    client, db = clickhouse
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 20}
        transforms:
          typed:
            type: sql
            primary_key: id
            sql: >
              SELECT id, CAST(id AS TINYINT) AS i8, CAST(id AS SMALLINT) AS i16, CAST(id AS INT) AS i32,
                     CAST(amount AS REAL) AS f32, amount AS f64, id % 2 = 0 AS flag, name,
                     CAST(name AS BINARY) AS raw, CAST(created_at AS DATE) AS day, created_at,
                     CAST(created_at AS TIMESTAMP_NTZ) AS local_time,
                     CAST('12345678901234567890.123456789012345678' AS DECIMAL(38, 18)) AS precise,
                     named_struct('n', name, 'ids', array(id, id + 1)) AS doc, array(name, 'x') AS tags,
                     map_from_arrays(array('k'), array(id)) AS attrs,
                     U256(concat(CAST(id AS STRING), repeat('0', 70))) AS wei,
                     U256(concat('0x', repeat('f', 64))) AS top,
                     amount AS price, name AS label
              FROM src
        sinks:
          out:
            type: clickhouse
            from: typed
            table: typed
            schema_override: {top: UInt256, price: 'Decimal(18, 4)', label: LowCardinality(String)}
        """)
    run_pipeline(path, ch_settings(), spark)
    types = dict(rows_of(client, f"SELECT name, type FROM system.columns WHERE database = '{db}' AND table = 'typed'"))
    # Spark's nullability decides Nullable: casts of the non-NULL id stay non-NULL, nested members keep theirs.
    assert types == {
        "id": "Int64",
        "i8": "Int8",
        "i16": "Int16",
        "i32": "Int32",
        "f32": "Nullable(Float32)",
        "f64": "Nullable(Float64)",
        "flag": "Nullable(Bool)",
        "name": "Nullable(String)",
        "raw": "Nullable(String)",
        "day": "Nullable(Date32)",
        "created_at": "Nullable(DateTime64(6, 'UTC'))",
        "local_time": "Nullable(DateTime64(6, 'UTC'))",
        "precise": "Nullable(Decimal(38, 18))",
        "doc": "Tuple(n Nullable(String), ids Array(Int64))",
        "tags": "Array(Nullable(String))",
        "attrs": "Map(String, Int64)",
        "wei": "Nullable(UInt256)",
        "top": "UInt256",
        "price": "Decimal(18, 4)",
        "label": "LowCardinality(String)",
        "is_deleted": "UInt8",
        "insert_time": "DateTime64(6, 'UTC')",
    }
    (row,) = rows_of(
        client,
        f"SELECT id, name, raw, toString(precise), doc, tags, attrs, toString(created_at), toString(local_time), "
        f"toString(wei), toString(top), toString(price) FROM {db}.typed FINAL WHERE id = 3",
    )
    assert row[0] == 3 and row[2] == row[1]
    assert row[3] == "12345678901234567890.123456789012345678"
    assert row[4] == {"n": row[1], "ids": [3, 4]} and row[5] == [row[1], "x"] and row[6] == {"k": 3}
    assert row[7] == row[8] == "2025-01-01 00:00:00.002000"
    assert row[9] == "3" + "0" * 70 and row[10] == str(2**256 - 1)


def test_extra_columns_are_dropped_for_an_existing_table(
    spark, ch_settings, write_pipeline, clickhouse, caplog
) -> None:
    client, db = clickhouse
    client.command(
        f"CREATE TABLE {db}.slim (id Int64, name String, is_deleted UInt8, insert_time DateTime64(6, 'UTC')) "
        "ENGINE = ReplacingMergeTree(insert_time, is_deleted) ORDER BY id"
    )
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: clickhouse, from: src, table: slim, primary_key: id}}
        """)
    settings = ch_settings()
    with caplog.at_level(logging.INFO, logger="streamling.clickhouse"):
        run_pipeline(path, settings, spark)
    columns = rows_of(client, f"SELECT name, type FROM system.columns WHERE database = '{db}' AND table = 'slim'")
    assert columns == [
        ("id", "Int64"),
        ("name", "String"),
        ("is_deleted", "UInt8"),
        ("insert_time", "DateTime64(6, 'UTC')"),
    ]
    expected = final_state(generated(SOURCE, settings))
    assert rows_of(client, f"SELECT id, name FROM {db}.slim FINAL ORDER BY id") == [
        (k, expected[k]["name"]) for k in sorted(expected)
    ]
    dropped = [r.getMessage() for r in caplog.records if "they are not written" in r.getMessage()]
    assert dropped == [
        f"clickhouse sink 'out': table {db}.slim has no columns amount, created_at; they are not written"
    ]


@pytest.mark.parametrize(
    ("ddl", "problem"),
    [
        (
            "(id Int64, name Int32, is_deleted UInt8, insert_time DateTime64(6, 'UTC')) "
            "ENGINE = ReplacingMergeTree(insert_time, is_deleted) ORDER BY id",
            "column 'name' has type Int32, which cannot hold the input's Nullable(String)",
        ),
        (
            "(key Int64, name String, is_deleted UInt8, insert_time DateTime64(6, 'UTC')) "
            "ENGINE = ReplacingMergeTree(insert_time, is_deleted) ORDER BY key",
            "has no column 'id' (primary key); table {db}.t column 'key' is in the sorting key but not in the input",
        ),
        (
            "(id Int64, name String) ENGINE = MergeTree ORDER BY id",
            "has no column 'is_deleted', which append_only_mode writes; table {db}.t has no column 'insert_time', "
            "which append_only_mode writes",
        ),
    ],
)
def test_an_existing_table_that_does_not_fit_fails_naming_table_and_column(
    spark, ch_settings, write_pipeline, clickhouse, ddl: str, problem: str
) -> None:
    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.t {ddl}")
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 10}
        sinks:
          out: {type: clickhouse, from: src, table: t, primary_key: id}
        """)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, ch_settings(), spark)
    assert caught.value.user_facing
    assert f"clickhouse sink 'out': table {db}.t {problem.format(db=db)}" in str(caught.value)


def test_a_bad_override_type_fails_with_clickhouse_s_message(spark, ch_settings, write_pipeline, clickhouse) -> None:
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 10}
        sinks:
          out: {type: clickhouse, from: src, table: t, primary_key: id, schema_override: {name: NoSuchType}}
        """)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, ch_settings(), spark)
    assert caught.value.user_facing and not caught.value.retriable
    assert str(caught.value).startswith(f"clickhouse sink 'out': creating table `{clickhouse[1]}`.`t` failed:")
    assert "NoSuchType" in str(caught.value)


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ("{type: clickhouse, from: src, table: t}", "clickhouse sink 'out' requires a primary key"),
        (
            "{type: clickhouse, from: src, table: t, primary_key: id, compression: brotli}",
            "sink 'out' (type 'clickhouse'): field 'compression': Input should be 'none', 'gzip', 'zstd' or 'lz4' "
            "(got 'brotli')",
        ),
        (
            "{type: clickhouse, from: src, table: t, primary_key: id, compression: GZIP, compression_level: 11}",
            "sink 'out' (type 'clickhouse'): field 'compression_level': Input should be less than or equal to 9 "
            "(got 11)",
        ),
        (
            "{type: clickhouse, from: src, table: t, primary_key: id, schema_override: {name: 'String; DROP'}}",
            "sink 'out' (type 'clickhouse'): field 'schema_override': column 'name': 'String; DROP' is not a "
            "ClickHouse type (allowed: letters, digits, spaces and _ , ( ) ' = . + - /) (got {'name': 'String; DROP'})",
        ),
        (
            "{type: clickhouse, from: src, table: t, primary_key: id, schema_override: {nope: String}}",
            "clickhouse sink 'out': schema_override column 'nope' is not in the input; available columns: id, amount, "
            "name, created_at",
        ),
    ],
)
def test_validation_errors_never_touch_clickhouse(
    spark, make_settings, clickhouse_env, write_pipeline, clickhouse, sink: str, message: str
) -> None:
    client, db = clickhouse
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 10}}
        sinks:
          out: {sink}
        """)
    report = validate_pipeline(path, make_settings(environ=clickhouse_env, **{"clickhouse_sink.database": db}), spark)
    assert report.errors == [message]
    assert rows_of(client, f"SELECT count() FROM system.tables WHERE database = '{db}'") == [(0,)]


# ---- over the wire ----


class RecordingClickHouse(ThreadingHTTPServer):
    """A loopback HTTP server that plays just enough of ClickHouse's HTTP interface for one sink.

    No ClickHouse server can be installed here, and the embedded engine has no wire, so this fake is the
    only way to see the bytes the sink sends. It fakes: the client's connect handshake (``SELECT
    version(), timezone()`` as TabSeparated; ``system.settings`` and the protocol probe as an empty Native
    result, which the client accepts), the sink's ``system.columns`` lookup (JSONEachRow, describing an
    existing append-only table) and ``max(insert_time)`` (``0``), and it acknowledges everything else —
    the INSERT included — with an empty 200. Every request's method, headers, URL parameters and raw
    body are recorded."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.columns = (
            b'{"name":"id","type":"Int64","default_kind":"","is_in_sorting_key":1}\n'
            b'{"name":"name","type":"Nullable(String)","default_kind":"","is_in_sorting_key":0}\n'
            b'{"name":"is_deleted","type":"UInt8","default_kind":"","is_in_sorting_key":0}\n'
            b'{"name":"insert_time","type":"DateTime64(6, \'UTC\')","default_kind":"","is_in_sorting_key":0}\n'
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: RecordingClickHouse

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _answer(self, body: bytes) -> None:
        params = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        query = params.get("query") or body.decode(errors="replace")
        self.server.requests.append({"headers": dict(self.headers), "params": params, "body": body, "query": query})
        out = b""
        if "version()" in query:
            out = b"24.8.1.1\tUTC\n"
        elif "system.columns" in query:
            out = self.server.columns
        elif "max(`insert_time`)" in query:
            out = b"0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def fake_clickhouse() -> Iterator[RecordingClickHouse]:
    server = RecordingClickHouse()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def decompress(body: bytes, codec: str) -> bytes:
    if codec == "gzip":
        assert body[:2] == b"\x1f\x8b"
        return gzip.decompress(body)
    if codec == "zstd":
        from backports import zstd

        assert body[:4] == b"\x28\xb5\x2f\xfd"
        return zstd.decompress(body)
    import lz4.frame

    assert body[:4] == b"\x04\x22\x4d\x18"
    return lz4.frame.decompress(body)


@pytest.mark.parametrize(("compression", "codec"), [("GZip", "gzip"), ("zstd", "zstd"), ("LZ4", "lz4")])
def test_compression_applies_to_the_arrow_insert_on_the_wire(
    spark, make_settings, fake_clickhouse, compression: str, codec: str
) -> None:
    settings = make_settings(
        environ={
            "STREAMLING__CLICKHOUSE_SINK__URL": fake_clickhouse.url,
            "STREAMLING__CLICKHOUSE_SINK__PASSWORD": "s3cret-pw",
        }
    )
    spec = ClickHouseSinkSpec.model_validate(
        {"type": "clickhouse", "from": "x", "table": "wire", "compression": compression, "compression_level": 9}
    )
    sink = ClickHouseSink("out", spec, settings)
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("_gs_op", T.StringType()),
        ]
    )
    names = ["carol" * 50] * 500  # compressible
    df = spark.createDataFrame([(i, names[i], "d" if i == 7 else "i") for i in range(500)], schema)
    assert sink.check(df.schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    try:
        assert sink.write(df, Epoch("src", 1, {"offset": 0}, {"offset": 500})) == 500
    finally:
        sink.terminate()
    (insert,) = [r for r in fake_clickhouse.requests if r["query"].startswith("INSERT")]
    assert insert["query"] == "INSERT INTO `default`.`wire` (`id`, `name`, `is_deleted`, `insert_time`) FORMAT Arrow"
    assert insert["headers"]["Content-Encoding"] == codec
    payload = decompress(insert["body"], codec)
    assert len(insert["body"]) * 10 < len(payload)
    table = pa.ipc.open_file(pa.BufferReader(payload)).read_all()
    assert table.column("id").to_pylist() == list(range(500))
    assert table.column("name").to_pylist() == names
    assert table.column("is_deleted").to_pylist() == [1 if i == 7 else 0 for i in range(500)]
    versions = table.column("insert_time").cast(pa.int64()).to_pylist()
    assert versions == list(range(versions[0], versions[0] + 500))
    # The password travels in a header (basic auth), never in a URL parameter or a query.
    assert all("s3cret-pw" not in str(r["params"]) + r["query"] for r in fake_clickhouse.requests)


def test_table_look_ups_send_the_names_as_query_parameters(spark, make_settings, fake_clickhouse) -> None:
    """Over HTTP, as on the embedded engine, the sink's ``system`` look-ups carry the database and table names as
    server-side parameters (``param_*`` URL parameters), never inside the SQL text."""
    settings = make_settings(environ={"STREAMLING__CLICKHOUSE_SINK__URL": fake_clickhouse.url})
    table = "it's a \\ table"
    spec = ClickHouseSinkSpec.model_validate({"type": "clickhouse", "from": "x", "table": table})
    sink = ClickHouseSink("out", spec, settings)
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("_gs_op", T.StringType())])
    assert sink.check(schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    sink.terminate()
    looked_up = [
        r for r in fake_clickhouse.requests if "FROM system.tables" in r["query"] or "system.columns" in r["query"]
    ]
    assert len(looked_up) >= 2 and any("system.tables" in r["query"] for r in looked_up)
    for request in looked_up:
        assert "{db:String}" in request["query"] and "{t:String}" in request["query"], request["query"]
        assert table not in request["query"] and "it\\'s" not in request["query"]
        # the driver's escaping of a parameter value (its TSV form: backslash before ' and \\)
        assert request["params"]["param_t"] == "it\\'s a \\\\ table"
        assert request["params"]["param_db"] == "default"


def test_a_server_outage_mid_run_is_waited_out_and_inserts_carry_deduplication_tokens(
    spark, make_settings, fake_clickhouse, caplog
) -> None:
    """The server goes away after the sink started and comes back on the same port 2 s later: the epoch's insert
    waits (one WARNING, one INFO) instead of failing the run, and carries its `insert_deduplication_token`."""
    settings = make_settings(environ={"STREAMLING__CLICKHOUSE_SINK__URL": fake_clickhouse.url})
    spec = ClickHouseSinkSpec.model_validate({"type": "clickhouse", "from": "x", "table": "wire"})
    sink = ClickHouseSink("out", spec, settings)
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("_gs_op", T.StringType())])
    assert sink.check(schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    port = fake_clickhouse.server_port
    fake_clickhouse.shutdown()
    fake_clickhouse.server_close()
    back: list[RecordingClickHouse] = []

    def restart() -> None:
        time.sleep(2.0)
        server = RecordingClickHouse(port)
        back.append(server)
        server.serve_forever()

    threading.Thread(target=restart, daemon=True).start()
    caplog.set_level(logging.INFO, logger="streamling.clickhouse")
    started = time.monotonic()
    try:
        sink.deliver(pa.table({"id": [1, 2], "_gs_op": ["i", "i"]}), Epoch("src", 5, {"offset": 0}, {"offset": 2}))
    finally:
        sink.terminate()
        for server in back:
            server.shutdown()
            server.server_close()
    assert time.monotonic() - started >= 1.5
    lines = [r.getMessage() for r in caplog.records if "ClickHouse" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("clickhouse sink 'out': ClickHouse unreachable (")
    assert lines[0].endswith("), waiting up to 600 s")
    assert lines[1].startswith("clickhouse sink 'out': ClickHouse reachable again after ")
    (insert,) = [r for r in back[0].requests if r["query"].startswith("INSERT")]
    token = insert["params"]["insert_deduplication_token"]
    assert token.startswith("streamling:local_app_v1:out:`default`.`wire`:src:5:0:0:")


def test_the_global_compression_applies_to_sinks_without_their_own(spark, make_settings, fake_clickhouse) -> None:
    """``clickhouse_sink.compression`` / ``compression_level`` (the original's global default): a sink that sets
    neither sends gzip at level 1 on the wire; the inserted Arrow is the same."""
    settings = make_settings(
        environ={
            "STREAMLING__CLICKHOUSE_SINK__URL": fake_clickhouse.url,
            "STREAMLING__CLICKHOUSE_SINK__COMPRESSION": "gzip",
            "STREAMLING__CLICKHOUSE_SINK__COMPRESSION_LEVEL": "1",
        }
    )
    sink = ClickHouseSink(
        "out", ClickHouseSinkSpec.model_validate({"type": "clickhouse", "from": "x", "table": "g"}), settings
    )
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("_gs_op", T.StringType())])
    df = spark.createDataFrame([(i, "i") for i in range(300)], schema)
    assert sink.check(df.schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    try:
        assert sink.write(df, Epoch("src", 1, {"offset": 0}, {"offset": 300})) == 300
    finally:
        sink.terminate()
    (insert,) = [r for r in fake_clickhouse.requests if r["query"].startswith("INSERT")]
    assert insert["headers"]["Content-Encoding"] == "gzip"
    assert insert["body"][:2] == b"\x1f\x8b" and insert["body"][8] == 4  # gzip's XFL: the fastest level (1)
    table = pa.ipc.open_file(pa.BufferReader(decompress(insert["body"], "gzip"))).read_all()
    assert table.column("id").to_pylist() == list(range(300))


def test_connection_failures_are_retriable_and_keep_the_password_out(make_settings) -> None:
    settings = make_settings(
        environ={
            "STREAMLING__CLICKHOUSE_SINK__URL": "http://127.0.0.1:9",
            "STREAMLING__CLICKHOUSE_SINK__PASSWORD": "s3cret-pw",
        }
    )
    spec = ClickHouseSinkSpec.model_validate({"type": "clickhouse", "from": "x", "table": "t", "compression": "lz4"})
    sink = ClickHouseSink("out", spec, settings)
    with pytest.raises(StreamlingError) as caught:
        sink.initialize(RunContext(settings, InMemoryStateBackend("app"), None))  # type: ignore[arg-type]
    assert caught.value.retriable
    assert str(caught.value).startswith("clickhouse sink 'out': cannot connect to http://127.0.0.1:9")
    assert "s3cret-pw" not in str(caught.value)


def test_a_replayed_epoch_is_a_no_op_by_its_deduplication_tokens(spark, ch_settings, clickhouse) -> None:
    """The table the sink makes remembers its last inserts' tokens (`non_replicated_deduplication_window`); a
    replay of an epoch (same source, epoch, rows) inserts nothing, though its versions are stamped anew. An epoch
    whose rows differ is written."""
    client, db = clickhouse
    settings = ch_settings()
    spec = ClickHouseSinkSpec.model_validate(
        {"type": "clickhouse", "from": "x", "table": "replayed", "primary_key": "id", "batch_size": 4}
    )
    sink = ClickHouseSink("out", spec, settings)
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("_gs_op", T.StringType())])
    assert sink.check(schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    client.command(f"SYSTEM STOP MERGES {db}.replayed")  # count() then counts every row inserted
    rows = pa.table({"id": list(range(10)), "_gs_op": ["i"] * 10})
    epoch = Epoch("src", 3, {"offset": 0}, {"offset": 10})
    try:
        sink.deliver(rows, epoch)
        sink.deliver(rows, epoch)  # the replay after a crash between the write and the commit
        assert rows_of(client, f"SELECT count() FROM {db}.replayed") == [(10,)]  # no FINAL: nothing doubled
        sink.deliver(pa.table({"id": [0, 1], "_gs_op": ["d", "u"]}), epoch)  # other rows: written
        sink.deliver(rows, Epoch("src", 4, {"offset": 10}, {"offset": 20}))
    finally:
        sink.terminate()
    assert rows_of(client, f"SELECT count() FROM {db}.replayed") == [(22,)]
    (ddl,) = rows_of(
        client, f"SELECT create_table_query FROM system.tables WHERE database = '{db}' AND name = 'replayed'"
    )
    assert "non_replicated_deduplication_window = 1000" in ddl[0]


# ---- tables and fields of the original Streamling ----


@pytest.mark.parametrize(
    ("deleted", "engine"),
    [("", "ReplacingMergeTree(insert_time)"), (", is_deleted UInt8", "ReplacingMergeTree(insert_time, is_deleted)")],
)
def test_a_table_made_for_the_original_is_written_to(
    spark, ch_settings, write_pipeline, clickhouse, deleted: str, engine: str
) -> None:
    """The original's tables version rows by ``insert_time DateTime DEFAULT now()`` (seconds), some without an
    is_deleted column: the sink stamps one version per epoch at that precision (equal versions: the later insert
    wins) and, without is_deleted, applies deletes as mutations. FINAL shows the latest state either way."""
    client, db = clickhouse
    client.command(
        f"CREATE TABLE {db}.legacy (id Int64, amount Nullable(Float64), name Nullable(String){deleted}, "
        f"insert_time DateTime DEFAULT now()) ENGINE = {engine} ORDER BY id"
    )
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: clickhouse, from: src, table: legacy, primary_key: id, batch_size: 100}}
        """)
    settings = ch_settings()
    before = rows_of(client, "SELECT toUnixTimestamp(now())")[0][0]
    run_pipeline(path, settings, spark)
    expected = final_state(generated(SOURCE, settings))
    got = rows_of(client, f"SELECT id, amount, name FROM {db}.legacy FINAL ORDER BY id")
    assert got == [(k, expected[k]["amount"], expected[k]["name"]) for k in sorted(expected)]
    assert 0 < len(expected) < SOURCE["key_space"]
    low, high = rows_of(
        client, f"SELECT toUnixTimestamp(min(insert_time)), toUnixTimestamp(max(insert_time)) FROM {db}.legacy"
    )[0]
    assert before <= low <= high <= before + 300  # stamped with the time of the insert, in seconds
    columns = rows_of(client, f"SELECT name FROM system.columns WHERE database = '{db}' AND table = 'legacy'")
    assert [c[0] for c in columns] == ["id", "amount", "name", *(["is_deleted"] if deleted else []), "insert_time"]
    run_pipeline(path, settings, spark)  # resumes after its last commit: the same state
    assert rows_of(client, f"SELECT id, amount, name FROM {db}.legacy FINAL ORDER BY id") == got


def test_version_column_name_versions_rows_by_an_input_column(spark, ch_settings, write_pipeline, clickhouse) -> None:
    """With ``ver = -id`` the earliest change of each key has the highest version, so FINAL keeps it although
    later epochs insert newer rows: the input column, not the insert order, decides."""
    client, db = clickhouse
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 200, record_batch_size: 50}
        transforms:
          v: {type: sql, primary_key: k, sql: "SELECT id % 10 AS k, -id AS ver, name FROM src"}
        sinks:
          out: {type: clickhouse, from: v, table: versioned, version_column_name: ver}
        """)
    settings = ch_settings()
    run_pipeline(path, settings, spark)
    first: dict[int, dict[str, Any]] = {}
    for row in generated({"rows": 200}, settings):
        first.setdefault(row["id"] % 10, row)
    got = rows_of(client, f"SELECT k, ver, name FROM {db}.versioned FINAL ORDER BY k")
    assert got == [(k, -first[k]["id"], first[k]["name"]) for k in sorted(first)]
    (engine,) = rows_of(client, f"SELECT engine_full FROM system.tables WHERE database = '{db}' AND name = 'versioned'")
    assert engine[0].startswith("ReplacingMergeTree(ver, is_deleted) ORDER BY (k)")
    columns = rows_of(client, f"SELECT name FROM system.columns WHERE database = '{db}' AND table = 'versioned'")
    assert [c[0] for c in columns] == ["k", "ver", "name", "is_deleted"]


def test_deduplicate_false_writes_every_row_into_a_delta_table(spark, ch_settings, write_pipeline, clickhouse) -> None:
    """A SummingMergeTree adds up its rows: every change must arrive, not only the last per key."""
    client, db = clickhouse
    client.command(f"CREATE TABLE {db}.sums (k Int64, amount Nullable(Float64)) ENGINE = SummingMergeTree ORDER BY k")
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 100, record_batch_size: 50}
        transforms:
          s: {type: sql, primary_key: k, sql: "SELECT id % 5 AS k, amount FROM src"}
        sinks:
          out: {type: clickhouse, from: s, table: sums, append_only_mode: false, deduplicate: false, batch_size: 30}
        """)
    settings = ch_settings()
    run_pipeline(path, settings, spark)
    totals: dict[int, float] = {}
    for row in generated({"rows": 100}, settings):
        totals[row["id"] % 5] = totals.get(row["id"] % 5, 0.0) + row["amount"]
    got = dict(rows_of(client, f"SELECT k, sum(amount) FROM {db}.sums GROUP BY k"))
    assert got == pytest.approx(totals)
    assert rows_of(client, f"SELECT count() FROM {db}.sums")[0][0] >= 5


def test_parallelism_inserts_each_epoch_as_key_hashed_streams_on_their_own_connections(
    spark, make_settings, fake_clickhouse
) -> None:
    settings = make_settings(environ={"STREAMLING__CLICKHOUSE_SINK__URL": fake_clickhouse.url})
    spec = ClickHouseSinkSpec.model_validate(
        {"type": "clickhouse", "from": "x", "table": "wire", "parallelism": 3, "deduplicate": False}
    )
    sink = ClickHouseSink("out", spec, settings)
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("_gs_op", T.StringType()),
        ]
    )
    df = spark.createDataFrame([(i % 50, f"n{i}", "i") for i in range(500)], schema)
    assert sink.check(df.schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    try:
        assert sink.write(df, Epoch("src", 1, {"offset": 0}, {"offset": 500})) == 500
    finally:
        sink.terminate()
    inserts = [r for r in fake_clickhouse.requests if r["query"].startswith("INSERT")]
    assert len(inserts) == 3
    # Uncompressed, the client sends the statement's line first and the Arrow file after it.
    tables = [pa.ipc.open_file(pa.BufferReader(r["body"].split(b"\n", 1)[1])).read_all() for r in inserts]
    assert all(r["body"].startswith(b"INSERT INTO `default`.`wire`") for r in inserts)
    keys = [set(t.column("id").to_pylist()) for t in tables]
    assert all(keys) and not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])  # each key in one stream
    assert sorted(n for t in tables for n in t.column("name").to_pylist()) == sorted(f"n{i}" for i in range(500))
    for table in tables:  # a key's rows keep their order within its stream
        names = [int(n[1:]) for n in table.column("name").to_pylist()]
        for key in set(table.column("id").to_pylist()):
            mine = [n for n in names if n % 50 == key]
            assert mine == sorted(mine)
