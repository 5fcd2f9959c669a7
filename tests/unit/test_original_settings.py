"""Settings and node fields of the original Streamling that used to stop start-up (``unknown setting``,
``unknown field``): what each maps to here, or the one warning it gets, from a config file and from its
``STREAMLING__`` variable. No Spark, no services."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from streamling.config import load_settings
from streamling.config.model import Settings
from streamling.errors import StreamlingError
from streamling.runtime.plan import Plan
from streamling.topology.pipeline import load_pipeline
from tests.original_defaults import ORIGINAL_DEFAULT_CONFIG, ORIGINAL_DEFAULT_WARNINGS

SRC = "src: {type: generator, rows: 10, primary_key: id}"


def settings(tmp_path: Path, text: str = "{}\n", **env: str) -> Settings:
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent(text))
    return load_settings(config=str(config), environ={f"STREAMLING__{k}": v for k, v in env.items()})


def plan(pipeline: str, configured: Settings) -> Plan:
    loaded, report = load_pipeline(textwrap.dedent(pipeline))
    assert report.errors == []
    return Plan(loaded, configured)


def test_a_copy_of_the_original_s_embedded_defaults_loads_with_two_warnings(tmp_path: Path) -> None:
    s = settings(tmp_path, ORIGINAL_DEFAULT_CONFIG)
    assert s.startup_warnings() == ORIGINAL_DEFAULT_WARNINGS
    assert (s.postgres_sink.batch_flush_interval, s.postgres_sink.batch_size) == (1000, 100)
    assert s.state_backend.postgres.database == "streamling"  # the original's `db`
    dynamic = s.dynamic_table_backend.postgres
    assert dynamic is not None
    assert (dynamic.database, dynamic.cache_enabled, dynamic.sslmode) == ("streamling", False, "require")
    assert s.open_telemetry_metrics.endpoint_protocol == "http/protobuf"  # the original's ""
    assert s.wasm_script.runtime_wasm_file_path is None
    assert s.plugin.channel_capacity is None


MAPPED: list[tuple[str, str, str, Any]] = [
    ("POSTGRES_SINK__BATCH_FLUSH_INTERVAL", "750ms", "postgres_sink.batch_flush_interval", 750),
    ("POSTGRES_SINK__POOL_IDLE_TIMEOUT_SECS", "120", "postgres_sink.pool_idle_timeout_secs", 120.0),
    ("POSTGRES_SINK__POOL_MAX_LIFETIME_SECS", "900", "postgres_sink.pool_max_lifetime_secs", 900.0),
    ("DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_ENABLED", "true", "dynamic_table_backend.postgres.cache_enabled", True),
    (
        "DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_REFRESH_DEBOUNCE_MS",
        "250",
        "dynamic_table_backend.postgres.cache_refresh_debounce_ms",
        250,
    ),
    ("KAFKA_SOURCE__CONSUMER_FETCH_TIMEOUT_SEC", "3", "kafka_source.consumer_fetch_timeout_sec", 3.0),
    ("KAFKA_SOURCE__STALL_WATCHDOG_TIMEOUT_SEC", "90", "kafka_source.stall_watchdog_timeout_sec", 90.0),
    ("CLICKHOUSE_SINK__COMPRESSION", "GZIP", "clickhouse_sink.compression", "gzip"),
    ("CLICKHOUSE_SINK__COMPRESSION_LEVEL", "9", "clickhouse_sink.compression_level", 9),
    ("PLUGIN__CHANNEL_CAPACITY", "50", "plugin.channel_capacity", 50),
    ("WASM_SCRIPT__RUNTIME_WASM_FILE_PATH", "/opt/rt.wasm", "wasm_script.runtime_wasm_file_path", "/opt/rt.wasm"),
    ("TEST_SETTINGS__PROMETHEUS_MAX_ATTEMPTS", "5", "test_settings.prometheus_max_attempts", 5),
    ("STATE_BACKEND__POSTGRES__MAX_CONNECTIONS", "4", "state_backend.postgres.max_connections", 4),
    ("DYNAMIC_TABLE_BACKEND__POSTGRES__MAX_CONNECTIONS", "3", "dynamic_table_backend.postgres.max_connections", 3),
    ("DYNAMIC_TABLE_BACKEND__POSTGRES__DT_SCHEMA_NAME", "dt", "dynamic_table_backend.postgres.dt_schema_name", "dt"),
    ("STATE_BACKEND__POSTGRES__STATE_SCHEMA_NAME", "s", "state_backend.postgres.state_schema_name", "s"),
    ("STATE_BACKEND__POSTGRES__STATE_TABLE_NAME", "t", "state_backend.postgres.state_table_name", "t"),
    ("STATE_BACKEND__SQLITE__STATE_TABLE_NAME", "t", "state_backend.sqlite.state_table_name", "t"),
    ("STATE_BACKEND__SQLITE__MAX_CONNECTIONS", "2", "state_backend.sqlite.max_connections", 2),
    ("CLICKHOUSE_SOURCE__COMPRESSION", "LZ4", "clickhouse_source.compression", "lz4"),
    ("CLICKHOUSE_SOURCE__COMPRESSION_LEVEL", "4", "clickhouse_source.compression_level", 4),
    ("CLICKHOUSE_SOURCE__BLOCK_RANGE", "5000", "clickhouse_source.sort_key_range", 5000),
    ("PRINT_SINK__NUM_RECORDS_BEFORE_STOP", "7", "print_sink.num_records_before_stop", 7),
]


def _get(s: Settings, dotted: str) -> Any:
    value: Any = s
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(("variable", "raw", "dotted", "expected"), MAPPED)
def test_each_setting_is_read_from_its_environment_variable_and_from_the_file(
    tmp_path: Path, variable: str, raw: str, dotted: str, expected: Any
) -> None:
    assert _get(settings(tmp_path, **{variable: raw}), dotted) == expected
    *sections, leaf = variable.lower().split("__")
    text = "".join(f"{'  ' * i}{part}:\n" for i, part in enumerate(sections)) + f"{'  ' * len(sections)}{leaf}: {raw}\n"
    assert _get(settings(tmp_path, text), dotted) == expected


def test_defaults_keep_what_the_engine_did_before(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert (s.postgres_sink.pool_idle_timeout_secs, s.postgres_sink.pool_max_lifetime_secs) == (600.0, 1800.0)
    assert (s.kafka_source.consumer_fetch_timeout_sec, s.kafka_source.stall_watchdog_timeout_sec) == (1.0, 60.0)
    assert (s.clickhouse_sink.compression, s.clickhouse_sink.compression_level) == ("none", 6)
    assert s.postgres_sink.batch_flush_interval is None
    assert s.startup_warnings() == []


@pytest.mark.parametrize(
    ("variable", "raw", "problem"),
    [
        ("KAFKA_SOURCE__CONSUMER_FETCH_TIMEOUT_SEC", "0", "must be greater than 0"),
        ("POSTGRES_SINK__POOL_IDLE_TIMEOUT_SECS", "0", "must be greater than 0"),
        ("CLICKHOUSE_SINK__COMPRESSION", "brotli", "Input should be 'none', 'gzip', 'zstd' or 'lz4'"),
    ],
)
def test_bad_values_name_setting_origin_and_reason(tmp_path: Path, variable: str, raw: str, problem: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        settings(tmp_path, **{variable: raw})
    dotted = variable.lower().replace("__", ".")
    assert caught.value.message == (
        f"invalid configuration: {dotted} = {raw!r} (from STREAMLING__{variable}): {problem}"
    )


def test_settings_with_no_effect_here_warn_once_each_naming_setting_and_value(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        """
        plugin: {channel_capacity: 50}
        wasm_script: {runtime_wasm_file_path: /opt/streamling/runtime.wasm}
        test_settings: {telemetry_assertions_enabled: false}
        """,
    )
    assert s.startup_warnings() == [
        "setting plugin.channel_capacity = 50 has no effect here: a plugin is handed whole Arrow batches by the "
        "Spark tasks of an epoch, with no channel in between; an epoch's size is record_batch_size",
        "setting wasm_script.runtime_wasm_file_path = '/opt/streamling/runtime.wasm' has no effect here: script "
        "transforms run in the JavaScript sandbox this package ships; its limits are script_transform.*",
        "setting test_settings has no effect here: it configured the original's own end-to-end tests (telemetry "
        "assertions against a Prometheus)",
    ]


def test_the_original_s_connection_spellings_and_a_later_layer_wins(tmp_path: Path) -> None:
    """The state backend's ``db`` (the original's) and ``database`` (ours) are one setting, as are the sinks'
    ``pass`` and ``password``: the environment's spelling overrides the file's whichever each uses."""
    text = """
        state_backend: {postgres: {db: from_file, password: file-pw}}
        dynamic_table_backend: {postgres: {db: dyn, password: dyn-pw}}
        """
    s = settings(tmp_path, text, STATE_BACKEND__POSTGRES__DATABASE="from_env", POSTGRES_SINK__PASSWORD="sink-pw")
    assert s.state_backend.postgres.database == "from_env"
    assert s.state_backend.postgres.password.get_secret_value() == "file-pw"
    assert s.postgres_sink.password.get_secret_value() == "sink-pw"
    dynamic = s.dynamic_table_backend.postgres
    assert dynamic is not None
    assert (dynamic.database, dynamic.password.get_secret_value()) == ("dyn", "dyn-pw")
    s = settings(tmp_path, text, STATE_BACKEND__POSTGRES__DB="env_db")
    assert s.state_backend.postgres.database == "env_db"


def test_both_spellings_in_one_layer_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError) as caught:
        settings(tmp_path, "state_backend: {postgres: {db: a, database: b}}\n")
    assert caught.value.message == (
        f"invalid configuration: state_backend.postgres.database is given twice, as 'db' and as 'database' "
        f"(from {tmp_path / 'config.yaml'}); give one"
    )


# ---- what the mapped settings do ----


def test_postgres_sink_batch_flush_interval_is_the_default_of_postgres_sinks(tmp_path: Path) -> None:
    p = plan(
        f"""
        sources:
          {SRC}
        sinks:
          own: {{type: postgres, from: src, table: a, batch_flush_interval: 2s}}
          default: {{type: postgres, from: src, table: b}}
          agg: {{type: postgres_aggregate, from: src, landing_table: l, agg_table: g, aggregate: {{n: {{fn: count}}}}}}
        """,
        settings(tmp_path, POSTGRES_SINK__BATCH_FLUSH_INTERVAL="1500ms"),
    )
    flush = {name: p.operators[name].flush_interval_sec for name in ("own", "default", "agg")}
    assert flush == {"own": 2.0, "default": 1.5, "agg": 1.5}
    assert p.source("src").settings.checkpoint_interval_sec == 1.5


def test_a_per_node_connection_takes_the_flush_interval_of_postgres_sink_unless_it_sets_one(tmp_path: Path) -> None:
    p = plan(
        f"""
        sources:
          {SRC}
        sinks:
          a: {{type: postgres, from: src, table: a}}
          b: {{type: postgres, from: src, table: b}}
        """,
        settings(
            tmp_path,
            POSTGRES_SINK__BATCH_FLUSH_INTERVAL="4s",
            POSTGRES_SINK_CONNECTIONS__A__HOST="elsewhere",
            POSTGRES_SINK_CONNECTIONS__B__BATCH_FLUSH_INTERVAL="3s",
        ),
    )
    assert (p.operators["a"].flush_interval_sec, p.operators["b"].flush_interval_sec) == (4.0, 3.0)


DYNAMIC = f"""
    sources:
      {SRC}
    transforms:
      timed: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: w, time_column: updated_at}}
      nocache: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: f, time_column: updated_at,
             cache: false}}
      own: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: o, time_column: updated_at,
             cache_refresh_debounce_ms: 20}}
      plain: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: p}}
    sinks:
      out: {{type: blackhole, from: src}}
    """


def test_dynamic_table_backend_cache_settings_are_the_tables_defaults(tmp_path: Path) -> None:
    configured = settings(
        tmp_path,
        DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_ENABLED="true",
        DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_REFRESH_DEBOUNCE_MS="300ms",
    )
    p = plan(DYNAMIC, configured)
    tables = {name: p.operators[name].postgres for name in ("timed", "nocache", "own", "plain")}  # type: ignore[attr-defined]
    assert {n: (t.cached, t.refresh_ms) for n, t in tables.items()} == {
        "timed": (True, 300),
        "nocache": (False, 300),
        "own": (True, 20),
        "plain": (False, 300),  # no time_column to top a cache up by: the table is asked every batch
    }
    assert p.warnings == []  # a default applies where it can, silently


def test_without_the_backend_settings_dynamic_tables_keep_their_own_defaults(tmp_path: Path) -> None:
    p = plan(DYNAMIC, settings(tmp_path))
    timed = p.operators["timed"].postgres  # type: ignore[attr-defined]
    assert (timed.cached, timed.refresh_ms) == (False, 1000)


CLICKHOUSE = f"""
    sources:
      {SRC}
    sinks:
      default: {{type: clickhouse, from: src, table: a}}
      own: {{type: clickhouse, from: src, table: b, compression: none}}
      lz4: {{type: clickhouse, from: src, table: c, compression: lz4, compression_level: 1}}
    """


def test_clickhouse_sink_compression_is_the_default_of_sinks_without_their_own(tmp_path: Path) -> None:
    configured = settings(
        tmp_path,
        CLICKHOUSE_SINK__URL="http://127.0.0.1:8123",
        CLICKHOUSE_SINK__COMPRESSION="gzip",
        CLICKHOUSE_SINK__COMPRESSION_LEVEL="3",
    )
    p = plan(CLICKHOUSE, configured)
    wire = {n: (p.operators[n].wire_compression, p.operators[n].compression_level) for n in ("default", "own", "lz4")}  # type: ignore[attr-defined]
    assert wire == {"default": ("gzip", 3), "own": (None, 3), "lz4": ("lz4", 1)}


def test_the_embedded_engine_has_no_wire_to_compress(tmp_path: Path) -> None:
    p = plan(CLICKHOUSE, settings(tmp_path, CLICKHOUSE_SINK__COMPRESSION="gzip"))
    assert p.operators["default"].compression == "gzip"  # type: ignore[attr-defined]
    assert p.operators["default"].wire_compression is None  # type: ignore[attr-defined]


def _kafka_options(tmp_path: Path, node: dict[str, Any], **env: str) -> dict[str, str]:
    from streamling.kafka.source.operator import KafkaSource
    from streamling.kafka.source.spec import KafkaSourceSpec

    spec = KafkaSourceSpec.model_validate(
        {"type": "kafka", "topic": "t", "data_format": "json", "schema": {"id": "long"}, **node}
    )
    source = KafkaSource("src", spec, settings(tmp_path, **env))
    return source.reader_options({"0": 0}, None, parallelism=1)


def test_kafka_source_batch_size_is_the_records_per_batch_its_reading_tasks_hand_on(tmp_path: Path) -> None:
    assert _kafka_options(tmp_path, {"batch_size": 500})["batch_rows"] == "500"
    assert _kafka_options(tmp_path, {"batch_size": 80000, "record_batch_size": 1000})["batch_rows"] == "80000"
    assert _kafka_options(tmp_path, {"record_batch_size": 1000})["batch_rows"] == "1000"
    assert _kafka_options(tmp_path, {})["batch_rows"] == "50000"  # record_batch_size 250000, capped


def test_kafka_source_fetch_timeout_and_stall_watchdog_reach_the_reading_tasks(tmp_path: Path) -> None:
    from streamling.kafka.source.reader import KafkaStreamReader

    options = _kafka_options(
        tmp_path,
        {},
        KAFKA_SOURCE__CONSUMER_FETCH_TIMEOUT_SEC="250ms",
        KAFKA_SOURCE__STALL_WATCHDOG_TIMEOUT_SEC="0",
    )
    reader = KafkaStreamReader(options, T.StructType([T.StructField("id", T.LongType())]))
    assert (reader.fetch_timeout_sec, reader.stall_timeout_sec) == (0.25, 0.0)


def test_kafka_source_batch_size_is_accepted_in_a_pipeline() -> None:
    loaded, report = load_pipeline(
        textwrap.dedent("""
        sources:
          k: {type: kafka, topic: t, batch_size: 1000, primary_key: id}
        sinks:
          out: {type: blackhole, from: k}
        """)
    )
    assert report.errors == []
    assert loaded is not None
    assert loaded.nodes["k"].spec.batch_size == 1000  # type: ignore[attr-defined]


def test_a_clickhouse_sink_s_gs_op_override_is_accepted_with_one_warning(tmp_path: Path) -> None:
    p = plan(
        f"""
        sources:
          {SRC}
        sinks:
          ch: {{type: clickhouse, from: src, table: t, schema_override: {{_gs_op: String, name: 'LowCardinality(String)'}}}}
        """,
        settings(tmp_path),
    )
    sink = p.operators["ch"]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("_gs_op", T.StringType(), False),
        ]
    )
    assert sink.check(schema, ["id"]) == []  # type: ignore[attr-defined]
    assert [c.name for c in sink.columns] == ["id", "name"]  # type: ignore[attr-defined]
    assert {c.name: c.ch for c in sink.columns}["name"] == "LowCardinality(String)"  # type: ignore[attr-defined]
    assert p.warnings == [
        "clickhouse sink 'ch': schema_override._gs_op = 'String' has no effect here: the sink consumes _gs_op "
        "(inserts and updates become rows, deletes is_deleted rows or DELETE mutations) and writes no _gs_op column "
        "to the table"
    ]


def test_the_original_s_other_settings_with_no_effect_here_warn_once_each(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        """
        state_backend:
          postgres: {state_schema_name: app, state_table_name: positions}
          sqlite: {state_table_name: positions, max_connections: 4}
        clickhouse_source: {compression_level: 3}
        """,
    )
    tables = (
        "has no effect here: the state backend's tables are state and leases (schema streamling in Postgres); "
        "positions kept under another name are not read"
    )
    assert s.startup_warnings() == [
        f"setting state_backend.postgres.state_schema_name = 'app' {tables}",
        f"setting state_backend.postgres.state_table_name = 'positions' {tables}",
        f"setting state_backend.sqlite.state_table_name = 'positions' {tables}",
        "setting state_backend.sqlite.max_connections = 4 has no effect here: each state operation opens its own "
        "SQLite connection",
        "setting clickhouse_source.compression_level = 3 has no effect here: it sets the gzip level of insert "
        "bodies, and a source inserts nothing (its answers are compressed by the server, as "
        "clickhouse_source.compression asks)",
    ]


def test_dt_schema_name_is_the_schema_of_dynamic_tables_without_their_own(tmp_path: Path) -> None:
    text = f"""
        sources:
          {SRC}
        transforms:
          plain: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: p}}
          own: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: o, schema: mine}}
        sinks:
          out: {{type: blackhole, from: src}}
        """
    p = plan(text, settings(tmp_path, DYNAMIC_TABLE_BACKEND__POSTGRES__DT_SCHEMA_NAME="lookups"))
    assert (p.operators["plain"].postgres.schema, p.operators["own"].postgres.schema) == ("lookups", "mine")  # type: ignore[attr-defined]
    assert p.operators["plain"].writes()[0].path[1:] == ("lookups", "p")  # type: ignore[attr-defined]
    p = plan(text, settings(tmp_path))
    assert p.operators["plain"].postgres.schema == "public"  # type: ignore[attr-defined]


def test_clickhouse_source_compression_asks_the_server_to_compress_its_answers(tmp_path: Path, monkeypatch) -> None:
    import clickhouse_connect

    from streamling.clickhouse.source import ClickHouseSource, ClickHouseSourceSpec

    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(clickhouse_connect, "get_client", lambda **kwargs: asked.append(kwargs) or object())
    spec = ClickHouseSourceSpec.model_validate({"type": "clickhouse", "table_name": "t"})
    for compression in ("gzip", "none"):
        configured = settings(
            tmp_path, CLICKHOUSE_SOURCE__URL="http://127.0.0.1:8123", CLICKHOUSE_SOURCE__COMPRESSION=compression
        )
        assert ClickHouseSource("ch", spec, configured).client is not None
    assert [a["compress"] for a in asked] == ["gzip", False]
