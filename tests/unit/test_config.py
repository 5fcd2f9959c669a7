"""Configuration layering: embedded < file < environment, typed coercion, errors naming field+value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamling.config import load_settings
from streamling.errors import StreamlingError


def test_embedded_defaults_apply_without_file_or_env(tmp_path: Path) -> None:
    s = load_settings(config=str(tmp_path / "nothing-here"), environ={})
    assert s.application_id == "local_app_v1"
    assert s.checkpoint_interval_sec == 5.0
    assert s.state_backend.backend_type == "Sqlite"
    assert s.state_backend.sqlite.database_path == "./state.db"
    assert s.spark.master == "local[*]"
    assert s.job_mode is False


def test_file_overrides_embedded_and_env_overrides_file(tmp_path: Path) -> None:
    (tmp_path / "myconf.yaml").write_text(
        "application_id: from_file\nrecord_batch_size: 1000\nprint_sink:\n  sample_every: 3\n"
    )
    env = {"STREAMLING__APPLICATION_ID": "from_env"}
    s = load_settings(config=str(tmp_path / "myconf"), environ=env)
    assert s.application_id == "from_env"
    assert s.record_batch_size == 1000
    assert s.print_sink.sample_every == 3
    assert s.checkpoint_interval_sec == 5.0  # untouched keys keep the embedded default


def test_default_config_base_name_is_found_in_working_directory(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "config.yml").write_text("application_id: cwd_config\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(environ={}).application_id == "cwd_config"


def test_json_config_file(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(json.dumps({"state_backend": {"backend_type": "InMemory"}}))
    assert load_settings(config=str(tmp_path / "c"), environ={}).state_backend.backend_type == "InMemory"


def test_missing_config_file_is_not_an_error(tmp_path: Path) -> None:
    assert load_settings(config=str(tmp_path / "config"), environ={}).application_id == "local_app_v1"


@pytest.mark.parametrize("name", ["nothere.yaml", "nothere"])
def test_a_named_config_file_that_is_missing_runs_on_defaults_with_a_warning(tmp_path: Path, name: str) -> None:
    """As in the original (and docs/configuration.md): a missing file is not an error, with or without an extension; the
    file named explicitly gets one warning at start."""
    settings = load_settings(config=str(tmp_path / name), environ={"STREAMLING__JOB_MODE": "true"})
    assert settings.job_mode is True
    assert settings.startup_warnings() == [
        f"config file '{tmp_path / name}' not found (nor with .yaml, .yml or .json appended); running on the "
        "embedded defaults and STREAMLING__ variables"
    ]
    assert load_settings(environ={}).startup_warnings() == []  # the default base name may be absent silently


def test_nested_env_keys_are_lowercased(tmp_path: Path) -> None:
    env = {
        "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "postgres",
        "STREAMLING__STATE_BACKEND__POSTGRES__PORT": "6543",
        "STREAMLING__JOB_MODE": "true",
    }
    s = load_settings(config=str(tmp_path / "x"), environ=env)
    assert s.state_backend.backend_type == "Postgres"
    assert s.state_backend.postgres.port == 6543
    assert s.job_mode is True


@pytest.mark.parametrize(
    ("key", "raw", "field", "expected"),
    [
        ("RECORD_BATCH_SIZE", "250000", "record_batch_size", 250000),
        ("RECORD_BATCH_INTERVAL_MS", "500ms", "record_batch_interval_ms", 500),
        ("RECORD_BATCH_INTERVAL_MS", "1s", "record_batch_interval_ms", 1000),
        ("RECORD_BATCH_INTERVAL_MS", "250", "record_batch_interval_ms", 250),
        ("CHECKPOINT_INTERVAL_SEC", "500ms", "checkpoint_interval_sec", 0.5),
        ("CHECKPOINT_INTERVAL_SEC", "1s", "checkpoint_interval_sec", 1.0),
        ("CHECKPOINT_INTERVAL_SEC", "2m", "checkpoint_interval_sec", 120.0),
        ("CHECKPOINT_INTERVAL_SEC", "7", "checkpoint_interval_sec", 7.0),
    ],
)
def test_string_values_coerce_to_typed_fields(tmp_path: Path, key, raw, field, expected) -> None:
    s = load_settings(config=str(tmp_path / "x"), environ={f"STREAMLING__{key}": raw})
    assert getattr(s, field) == expected


def test_bad_env_value_names_field_value_and_origin(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "x"), environ={"STREAMLING__CHECKPOINT_INTERVAL_SEC": "soon"})
    assert info.value.user_facing
    assert str(info.value) == (
        "invalid configuration: checkpoint_interval_sec = 'soon' (from STREAMLING__CHECKPOINT_INTERVAL_SEC): "
        "invalid duration 'soon': use a number or a value like '500ms', '5s', '2m'"
    )


def test_bad_file_value_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("record_batch_size: lots\n")
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "config"), environ={})
    assert "record_batch_size = 'lots'" in str(info.value)
    assert f"(from {tmp_path / 'config.yaml'})" in str(info.value)


def test_an_unknown_nested_environment_key_is_blamed_on_its_variable(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError) as caught:
        load_settings(config=str(tmp_path / "x"), environ={"STREAMLING__FOO__BAR": "1"})
    assert caught.value.message == "invalid configuration: unknown setting 'foo' (from STREAMLING__FOO__BAR)"


ORIGINAL_SETTINGS = {
    "STREAMLING__NUM_RECORDS_BEFORE_STOP": "10",
    "STREAMLING__INTERNAL_BUFFER_SIZE": "10",
    "STREAMLING__DRAIN_POLICY": "Fast",
    "STREAMLING__ADMIN_API_PORT": "3000",
    "STREAMLING__ENFORCE_PRIMARY_KEYS": "true",
    "STREAMLING__CLICKHOUSE_SOURCE__QUERY_TIMEOUT_SEC": "90",
    "STREAMLING__CLICKHOUSE_SINK__BATCH_SIZE": "250000",
    "STREAMLING__CLICKHOUSE_SINK__BATCH_FLUSH_INTERVAL": "500ms",
    "STREAMLING__EXTERNAL_HTTP_HANDLER__OPERATOR_TIMEOUT_SEC": "120",
}


def test_the_original_s_settings_are_accepted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no config file: the default base name, absent
    s = load_settings(environ=ORIGINAL_SETTINGS)
    assert s.num_records_before_stop == 10
    assert s.enforce_primary_keys is True
    assert s.clickhouse_source.query_timeout_sec == 90.0
    assert (s.clickhouse_sink.batch_size, s.clickhouse_sink.batch_flush_interval) == (250_000, 500)
    assert s.external_http_handler.operator_timeout_sec == 120.0
    assert s.startup_warnings() == [
        "setting internal_buffer_size = 10 has no effect here: operators hand each epoch on as a whole Spark "
        "DataFrame, with no channel in between; an epoch's size is record_batch_size",
        "setting drain_policy = 'fast' has no effect here: every stop drains (the in-flight epoch finishes and "
        "commits within 25 s, as drain_policy 'drain' does), and a stopped stream resumes from the committed positions",
    ]
    assert s.admin_api_port == 3000 and s.telemetry_enabled  # the admin API is real here
    defaults = load_settings(environ={})
    assert defaults.num_records_before_stop is None and defaults.enforce_primary_keys is False
    assert defaults.clickhouse_source.query_timeout_sec == 60.0
    assert (defaults.clickhouse_sink.batch_size, defaults.clickhouse_sink.batch_flush_interval) == (100_000, None)
    assert defaults.external_http_handler.operator_timeout_sec == 300.0
    assert defaults.startup_warnings() == []
    drain = load_settings(environ={"STREAMLING__DRAIN_POLICY": "drain"})
    assert drain.startup_warnings() == []  # what every stop does here


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "STREAMLING__DRAIN_POLICY",
            "slow",
            "drain_policy = 'slow' (from STREAMLING__DRAIN_POLICY): Input should be 'auto', 'drain' or 'fast'",
        ),
        (
            "STREAMLING__NUM_RECORDS_BEFORE_STOP",
            "0",
            "num_records_before_stop = '0' (from STREAMLING__NUM_RECORDS_BEFORE_STOP): Input should be greater than 0",
        ),
        (
            "STREAMLING__ADMIN_API_PORT",
            "70000",
            "admin_api_port = '70000' (from STREAMLING__ADMIN_API_PORT): Input should be less than or equal to 65535",
        ),
        (
            "STREAMLING__EXTERNAL_HTTP_HANDLER__OPERATOR_TIMEOUT_SEC",
            "0",
            "external_http_handler.operator_timeout_sec = '0' (from STREAMLING__EXTERNAL_HTTP_HANDLER__OPERATOR_TIMEOUT_SEC): "
            "must be greater than 0",
        ),
    ],
)
def test_bad_values_of_the_original_s_settings_are_named(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    with pytest.raises(StreamlingError) as caught:
        load_settings(config=str(tmp_path / "x"), environ={variable: value})
    assert caught.value.message == f"invalid configuration: {message}"


def test_unknown_setting_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError, match=r"unknown setting 'chekpoint_interval_sec' \(from STREAMLING__"):
        load_settings(config=str(tmp_path / "x"), environ={"STREAMLING__CHEKPOINT_INTERVAL_SEC": "5"})


def test_secret_values_are_masked_in_errors(tmp_path: Path) -> None:
    env = {"STREAMLING__STATE_BACKEND__POSTGRES__PASSWORD": '{"x": 1}'}
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "x"), environ=env)
    assert "state_backend.postgres.password = '***'" in str(info.value)
    assert '"x"' not in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "STREAMLING__KAFKA_SOURCE",
            '{"sasl_password": "hunter2", ',  # JSON with a typo stays a string
            "kafka_source (from STREAMLING__KAFKA_SOURCE): Input should be a valid dictionary or instance of "
            "KafkaSourceSettings",
        ),
        (
            "STREAMLING__POSTGRES_SINK_CONNECTIONS",
            '{"orders": "hunter2"}',
            "postgres_sink_connections.orders (from STREAMLING__POSTGRES_SINK_CONNECTIONS): Input should be a valid "
            "dictionary or instance of PostgresSinkSettings",
        ),
        (
            "STREAMLING__POSTGRES_SINK",
            '["hunter2"]',
            "postgres_sink (from STREAMLING__POSTGRES_SINK): Input should be a valid dictionary or instance of "
            "PostgresSinkSettings",
        ),
        (
            "STREAMLING__CLICKHOUSE_SINK__PASSWORD",
            '{"a": "hunter2"}',
            "clickhouse_sink.password = '***' (from STREAMLING__CLICKHOUSE_SINK__PASSWORD): Input should be a valid "
            "string",
        ),
    ],
)
def test_a_section_given_as_a_whole_is_not_repeated_in_errors(tmp_path: Path, variable, value, message) -> None:
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "none"), environ={variable: value})
    assert info.value.message == f"invalid configuration: {message}"
    assert "hunter2" not in info.value.message


def test_invalid_backend_type_lists_choices(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError, match=r"state_backend.backend_type = 'Redis'"):
        load_settings(config=str(tmp_path / "x"), environ={"STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Redis"})


def test_config_files_nested_too_deeply_are_reported(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000)
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(
        StreamlingError, match=r"^config file '.*deep.yaml': cannot be read: nested more than 64 levels"
    ):
        load_settings(config=str(tmp_path / "deep.yaml"), environ={})
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "deep.json"), environ={})
    assert info.value.message == f"config file '{tmp_path / 'deep.json'}': cannot be read: nested too deeply"


def test_postgres_sink_settings_of_the_original_are_accepted(tmp_path: Path) -> None:
    env = {
        "STREAMLING__POSTGRES_SINK__BATCH_SIZE": "500",
        "STREAMLING__POSTGRES_SINK__STATEMENT_TIMEOUT_SECS": "45",
        "STREAMLING__POSTGRES_SINK__POOL_ACQUIRE_TIMEOUT_SECS": "2s",
    }
    sink = load_settings(config=str(tmp_path / "x"), environ=env).postgres_sink
    assert (sink.batch_size, sink.statement_timeout_secs, sink.pool_acquire_timeout_secs) == (500, 45.0, 2.0)
    defaults = load_settings(config=str(tmp_path / "x"), environ={}).postgres_sink
    assert (defaults.batch_size, defaults.statement_timeout_secs, defaults.pool_acquire_timeout_secs) == (None, 0, 30)
    assert defaults.retry_timeout_sec == 600


def test_postgres_state_backend_retries_as_long_as_the_sinks_by_default(tmp_path: Path) -> None:
    state = load_settings(config=str(tmp_path / "x"), environ={}).state_backend.postgres
    assert (state.retry_timeout_sec, state.pool_acquire_timeout_secs, state.statement_timeout_secs) == (600, 30, 0)
    env = {"STREAMLING__STATE_BACKEND__POSTGRES__RETRY_TIMEOUT_SEC": "2m"}
    assert load_settings(config=str(tmp_path / "x"), environ=env).state_backend.postgres.retry_timeout_sec == 120


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("POSTGRES_SINK__STATEMENT_TIMEOUT_SECS", "-1", "postgres_sink.statement_timeout_secs = '-1'"),
        ("POSTGRES_SINK__POOL_ACQUIRE_TIMEOUT_SECS", "0", "postgres_sink.pool_acquire_timeout_secs = '0'"),
        ("POSTGRES_SINK__BATCH_SIZE", "0", "postgres_sink.batch_size = '0'"),
        ("DYNAMIC_TABLE_BACKEND__POSTGRES__PORT", "x", "dynamic_table_backend.postgres.port = 'x'"),
    ],
)
def test_bad_postgres_values_name_the_setting(tmp_path: Path, key: str, value: str, message: str) -> None:
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "x"), environ={f"STREAMLING__{key}": value})
    assert f"{message} (from STREAMLING__{key})" in str(info.value)


def test_dynamic_tables_connect_with_their_own_settings_over_the_sinks(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "postgres_sink: {host: sinks.internal, user: writer, pass: sink-secret, db: warehouse}\n"
        "dynamic_table_backend:\n  postgres: {host: lookups.internal, db: lookups, statement_timeout_secs: 5}\n"
        "postgres_sink_connections:\n  Seen Users: {host: own.internal}\n"
    )
    settings = load_settings(config=str(tmp_path / "config"), environ={})
    dynamic = settings.dynamic_table_connection("watch")
    assert (dynamic.host, dynamic.database, dynamic.user, dynamic.password.get_secret_value()) == (
        "lookups.internal",
        "lookups",
        "writer",  # not given for the dynamic tables: postgres_sink's
        "sink-secret",
    )
    assert dynamic.statement_timeout_secs == 5
    assert settings.dynamic_table_connection("Seen Users").host == "own.internal"  # a node's own entry wins
    assert settings.postgres_connection("sink").host == "sinks.internal"  # sinks are unaffected


def test_dynamic_tables_use_the_sink_connection_when_theirs_is_unset(tmp_path: Path) -> None:
    env = {"STREAMLING__POSTGRES_SINK__HOST": "sinks.internal", "STREAMLING__POSTGRES_SINK__PORT": "6000"}
    settings = load_settings(config=str(tmp_path / "x"), environ=env)
    assert settings.dynamic_table_backend.postgres is None
    assert settings.dynamic_table_connection("watch") == settings.postgres_sink
    env["STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__PORT"] = "7000"
    layered = load_settings(config=str(tmp_path / "x"), environ=env).dynamic_table_connection("watch")
    assert (layered.host, layered.port) == ("sinks.internal", 7000)
