"""Pure parts of the Postgres sinks: type mapping, capacity checks, merge rounds, CSV encoding, settings."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from streamling.config import load_settings
from streamling.config.model import connection_key
from streamling.errors import StreamlingError
from streamling.kafka.avro import WIDE_DECIMAL_KEY
from streamling.postgres.connection import is_transient, with_retries
from streamling.postgres.types import Column, can_hold, columns_of, pg_type
from streamling.postgres.writer import check_keys, merge_rounds, to_csv


@pytest.mark.parametrize(
    ("arrow", "expected"),
    [
        (pa.int8(), "smallint"),
        (pa.int16(), "smallint"),
        (pa.int32(), "integer"),
        (pa.int64(), "bigint"),
        (pa.uint32(), "bigint"),
        (pa.uint64(), "numeric(20,0)"),
        (pa.float32(), "real"),
        (pa.float64(), "double precision"),
        (pa.bool_(), "boolean"),
        (pa.string(), "text"),
        (pa.binary(), "bytea"),
        (pa.date32(), "date"),
        (pa.timestamp("us", tz="UTC"), "timestamp with time zone"),
        (pa.timestamp("us"), "timestamp without time zone"),
        (pa.decimal128(38, 18), "numeric(38,18)"),
        (pa.struct([("a", pa.int64())]), "jsonb"),
        (pa.list_(pa.int64()), "jsonb"),
        (pa.map_(pa.string(), pa.int64()), "jsonb"),
    ],
)
def test_arrow_to_postgres_types(arrow: pa.DataType, expected: str) -> None:
    assert pg_type(arrow) == expected


def test_wide_decimals_from_spark_metadata_become_numeric_78() -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("balance", T.StringType(), metadata={WIDE_DECIMAL_KEY: "decimal(78,0)"}),
            T.StructField("_gs_op", T.StringType()),
        ]
    )
    assert [(c.name, c.pg) for c in columns_of(schema, skip=("_gs_op",))] == [
        ("id", "bigint"),
        ("balance", "numeric(78,0)"),
    ]


@pytest.mark.parametrize(
    ("existing", "required", "ok"),
    [
        ("bigint", "integer", True),
        ("integer", "bigint", False),
        ("numeric(20,0)", "bigint", True),
        ("numeric(18,0)", "bigint", False),
        ("numeric", "numeric(78,0)", True),
        ("numeric(78,0)", "numeric(78,0)", True),
        ("numeric(38,0)", "numeric(78,0)", False),
        ("numeric(40,20)", "numeric(38,18)", True),
        ("numeric(38,10)", "numeric(38,18)", False),
        ("double precision", "real", True),
        ("real", "double precision", False),
        ("integer", "double precision", False),
        ("character varying(10)", "text", True),
        ("text", "jsonb", True),
        ("jsonb", "text", False),
        ("timestamp without time zone", "timestamp with time zone", True),
        ("boolean", "text", False),
    ],
)
def test_existing_column_capacity(existing: str, required: str, ok: bool) -> None:
    assert can_hold(existing, required) is ok


def _table(ids: list[int], ops: list[str], values: list[int]) -> pa.Table:
    return pa.table({"id": ids, "v": values, "_gs_op": ops})


def test_deduplicate_keeps_the_last_row_per_key_in_input_order() -> None:
    table = _table([1, 2, 1, 3, 2], ["i", "i", "u", "i", "d"], [10, 20, 11, 30, 21])
    (only,) = merge_rounds(table, ("id",), deduplicate=True)
    assert only.to_pydict() == {"id": [1, 3, 2], "v": [11, 30, 21], "_gs_op": ["u", "i", "d"]}


def test_without_deduplication_rounds_replay_each_keys_history_in_order() -> None:
    table = _table([1, 2, 1, 1, 2], ["i", "i", "u", "d", "u"], [10, 20, 11, 12, 21])
    rounds = merge_rounds(table, ("id",), deduplicate=False)
    assert [r.to_pydict()["v"] for r in rounds] == [[10, 20], [11, 21], [12]]
    assert rounds[2].to_pydict()["_gs_op"] == ["d"]


def test_null_primary_key_is_a_clear_error() -> None:
    table = pa.table({"id": [1, None], "_gs_op": ["i", "i"]})
    with pytest.raises(StreamlingError, match=r"postgres sink 'x': primary key column 'id' is NULL in 1 row\(s\)"):
        check_keys(table, ("id",), "postgres sink 'x'")


def test_csv_keeps_null_apart_from_empty_and_encodes_json_and_bytes() -> None:
    struct = pa.struct([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    table = pa.table(
        {
            "s": pa.array(["", None, 'say "hi",\nthere']),
            "j": pa.array([{"a": 1, "m": [("k", 2)]}, None, {"a": None, "m": None}], struct),
            "b": pa.array([b"\x00\xff", None, b""]),
            "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-0.01")], pa.decimal128(10, 2)),
            "t": pa.array([datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)] * 3, pa.timestamp("us", "UTC")),
            "_gs_op": ["i", "u", "d"],
        }
    )
    columns = (
        Column("s", pa.string(), "text"),
        Column("j", struct, "jsonb"),
        Column("b", pa.binary(), "bytea"),
        Column("d", pa.decimal128(10, 2), "numeric(10,2)"),
        Column("t", pa.timestamp("us", "UTC"), "timestamp with time zone"),
    )
    lines = to_csv(table, columns).decode().split("\n")
    assert lines[0] == '"","{""a"": 1, ""m"": {""k"": 2}}","\\x00ff",1.50,1735787045000000,"i"'
    assert lines[1] == ',,,,1735787045000000,"u"'
    assert lines[2] == '"say ""hi"",'
    assert lines[3] == 'there","{""a"": null, ""m"": null}","\\x",-0.01,1735787045000000,"d"'


def test_sink_connection_names_are_normalised() -> None:
    assert connection_key("Orders-Sink 1") == "orders_sink_1"
    assert connection_key("__a..b__") == "a_b"


def test_per_sink_connection_overrides_only_the_fields_it_names(tmp_path) -> None:
    settings = load_settings(
        config=str(tmp_path / "none"),
        environ={
            "STREAMLING__POSTGRES_SINK__HOST": "db.internal",
            "STREAMLING__POSTGRES_SINK__PASS": "base-secret",
            "STREAMLING__POSTGRES_SINK_CONNECTIONS__ORDERS_SINK__DB": "orders",
        },
    )
    orders = settings.postgres_connection("Orders Sink")
    assert (orders.host, orders.database, orders.password.get_secret_value()) == (
        "db.internal",
        "orders",
        "base-secret",
    )
    assert settings.postgres_connection("other").database == "postgres"


def test_bad_sink_connection_value_names_setting_and_hides_secret(tmp_path) -> None:
    with pytest.raises(StreamlingError) as caught:
        load_settings(
            config=str(tmp_path / "none"),
            environ={
                "STREAMLING__POSTGRES_SINK__PASS": "hunter2",
                "STREAMLING__POSTGRES_SINK_CONNECTIONS__A__PORT": "x",
            },
        )
    assert "postgres_sink_connections.a.port = 'x' (from STREAMLING__POSTGRES_SINK_CONNECTIONS__A__PORT)" in str(
        caught.value
    )
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        ("25006", True),  # read_only_sql_transaction: the database was switched to read-only
        ("57P01", True),  # admin_shutdown: server restart
        ("08006", True),  # connection_failure
        ("40001", True),  # serialization_failure
        ("53300", True),  # too_many_connections
        ("22003", False),  # numeric_value_out_of_range
        ("22001", False),  # string_data_right_truncation (value too long)
        ("42703", False),  # undefined_column
        ("23502", False),  # not_null_violation
    ],
)
def test_which_postgres_errors_are_retried(error: str, transient: bool) -> None:
    import psycopg.errors

    assert is_transient(psycopg.errors.lookup(error)()) is transient


def test_lost_connection_without_sqlstate_is_retried() -> None:
    import psycopg

    assert is_transient(psycopg.OperationalError("server closed the connection unexpectedly"))


def test_batch_flush_interval_shortens_the_epoch_interval_of_sources_feeding_the_sink(tmp_path) -> None:
    from streamling.runtime.plan import Plan
    from streamling.topology.pipeline import load_pipeline

    text = """
        sources:
          fast: {type: generator}
          slow: {type: generator}
        sinks:
          pg: {type: postgres, from: fast, table: t, primary_key: id, batch_flush_interval: 250ms}
          out: {type: blackhole, from: slow}
    """
    pipeline, report = load_pipeline(text)
    assert report.is_valid, report.errors
    settings = load_settings(config=str(tmp_path / "none"), environ={"STREAMLING__CHECKPOINT_INTERVAL_SEC": "5"})
    plan = Plan(pipeline, settings)
    assert plan.source("fast").settings.checkpoint_interval_sec == 0.25
    assert plan.source("slow").settings.checkpoint_interval_sec == 5.0


def test_names_postgres_would_truncate_or_reject_fail_validation(tmp_path) -> None:
    from streamling.config import load_settings
    from streamling.topology.pipeline import load_pipeline

    long = "x" * 64
    text = f"""
sources: {{a: {{type: generator, primary_key: id}}}}
transforms:
  w: {{type: dynamic_table, backend_type: postgres, backend_entity_name: "a\\0b", column: name, from: a}}
sinks:
  p: {{type: postgres, from: a, table: {long}, schema: "s\\0"}}
  g: {{type: postgres_aggregate, from: a, landing_table: l, agg_table: {"g" * 54}, aggregate: {{n: {{fn: count}}}}}}
"""
    assert load_pipeline(text)[1].errors == [
        "transform 'w' (type 'dynamic_table'): field 'backend_entity_name': holds a NUL character, which Postgres "
        "names cannot (got 'a\\x00b')",
        "sink 'p' (type 'postgres'): field 'schema': holds a NUL character, which Postgres names cannot (got 's\\x00')",
        f"sink 'p' (type 'postgres'): field 'table': must be at most 63 bytes (a Postgres identifier) (got '{long}')",
        "sink 'g' (type 'postgres_aggregate'): field 'agg_table': must be at most 53 bytes (a Postgres identifier) "
        f"(got '{'g' * 54}')",
    ]
    text = f"""
sources: {{a: {{type: generator, primary_key: id}}}}
sinks:
  p: {{type: postgres, from: a, table: t}}
  g: {{type: postgres_aggregate, from: a, landing_table: l, agg_table: t, aggregate: {{{"n" * 60}: {{fn: avg, from: amount}}}}}}
"""
    pipeline, report = load_pipeline(text)
    assert pipeline is not None, report.errors
    settings = load_settings(config=str(tmp_path / "none"), environ={})
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField(long, T.DoubleType())])
    sink = pipeline.nodes["p"].optype.operator("p", pipeline.nodes["p"].spec, settings)
    assert sink.check(schema, ["id"]) == [
        f"postgres sink 'p': column '{long}' must be at most 63 bytes (a Postgres identifier); rename it in a transform"
    ]
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("amount", T.DoubleType())])
    aggregate = pipeline.nodes["g"].optype.operator("g", pipeline.nodes["g"].spec, settings)
    assert aggregate.check(schema, ["id"]) == [
        f"postgres_aggregate sink 'g': aggregate table column '{'n' * 60}_{suffix}' must be at most 63 bytes "
        "(a Postgres identifier); shorten its name"
        for suffix in ("count", "sum")
    ]


def test_a_pool_acquire_timeout_is_transient_and_retried() -> None:
    from psycopg_pool import PoolTimeout

    assert is_transient(PoolTimeout("couldn't get a connection after 30.00 sec"))
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise PoolTimeout("couldn't get a connection after 0.01 sec")
        return "written"

    assert with_retries(attempt, "postgres sink 'x'", 30) == "written"
    assert len(calls) == 3


def test_a_refused_login_is_not_transient_but_a_lost_connection_is() -> None:
    """libpq reports both without a SQLSTATE; only the server's login refusals fail at once."""
    import psycopg

    from streamling.postgres.connection import is_transient, refused_login

    refused = (
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  password authentication '
        'failed for user "app"',
        'FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "app", database "db", no encryption',
        'FATAL:  role "nobody" does not exist',
        'FATAL:  database "nodb" does not exist',
    )
    for text in refused:
        assert refused_login(text)
        assert not is_transient(psycopg.OperationalError(text))
    lost = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused'
    assert not refused_login(lost)
    assert is_transient(psycopg.OperationalError(lost))


def test_a_read_only_terminated_or_lost_session_is_discarded_but_a_conflict_keeps_it() -> None:
    """`connection` closes what `spoils_session` names, so the pool opens a fresh session for the retry."""
    import psycopg
    from psycopg import errors

    from streamling.postgres.connection import spoils_session

    assert spoils_session(errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"))
    assert spoils_session(errors.AdminShutdown("terminating connection due to administrator command"))
    assert spoils_session(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not spoils_session(errors.SerializationFailure("could not serialize access"))
    assert not spoils_session(errors.UndefinedColumn('column "x" does not exist'))
