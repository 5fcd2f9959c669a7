"""Secrets never show: connection passwords set through ``STREAMLING__…`` variables appear in no log line, no
``--validate`` report, no error message and no Dagster metadata — also when connecting fails.

Every secret is a distinctive string; each check captures everything the engine printed or recorded (stdout,
stderr with the JVM's output, log records, Dagster events) and greps it for every one of them.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

import streamling as engine
from streamling.errors import StreamlingError
from tests.e2e.cli import cli_env
from tests.net import free_port

SECRETS = {
    "STREAMLING__POSTGRES_SINK__PASS": "pgSinkPw-7Qx2",
    "STREAMLING__POSTGRES_SINK_CONNECTIONS__OUT__PASS": "pgNodePw-4Kd9",
    "STREAMLING__STATE_BACKEND__POSTGRES__PASSWORD": "pgStatePw-8Rw3",
    "STREAMLING__KAFKA_SOURCE__SASL_PASSWORD": "kafkaSrcPw-2Hm6",
    "STREAMLING__KAFKA_SINK__SASL_PASSWORD": "kafkaSinkPw-5Vt1",
    "STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_PASSWORD": "registrySrcPw-9Jc4",
    "STREAMLING__KAFKA_SINK__SCHEMA_REGISTRY_PASSWORD": "registrySinkPw-3Lp8",
    "STREAMLING__CLICKHOUSE_SOURCE__PASSWORD": "chSrcPw-6Bn5",
    "STREAMLING__CLICKHOUSE_SINK__PASSWORD": "chSinkPw-1Zf7",
}
SASL = {
    "STREAMLING__KAFKA_SOURCE__SECURITY_PROTOCOL": "sasl_plaintext",
    "STREAMLING__KAFKA_SOURCE__SASL_MECHANISM": "PLAIN",
    "STREAMLING__KAFKA_SOURCE__SASL_USERNAME": "streamling",
    "STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_USERNAME": "streamling",
    "STREAMLING__KAFKA_SINK__SECURITY_PROTOCOL": "sasl_plaintext",
    "STREAMLING__KAFKA_SINK__SASL_MECHANISM": "PLAIN",
    "STREAMLING__KAFKA_SINK__SASL_USERNAME": "streamling",
    "STREAMLING__KAFKA_SINK__SCHEMA_REGISTRY_USERNAME": "streamling",
}


def assert_no_secret(text: str) -> None:
    assert text.strip(), "nothing was captured: the check would pass vacuously"
    for variable, secret in SECRETS.items():
        assert secret not in text, f"the value of {variable} leaked:\n{text[max(0, text.find(secret) - 300) :][:600]}"


def streamling(cwd: Path, *args: str, env: dict[str, str], secrets: bool = True) -> subprocess.CompletedProcess[str]:
    """This checkout's CLI at debug level, with every secret set (unless `secrets` is false) and `env`."""
    return subprocess.run(
        [sys.executable, "-m", "streamling.cli", *args],
        cwd=cwd,
        env=cli_env(cwd, {"STREAMLING__LOG_LEVEL": "debug", **(SECRETS | SASL if secrets else {}), **env}),
        capture_output=True,
        text=True,
        timeout=300,
    )


class Captured(logging.Handler):
    """Every log record of every logger, formatted with its exception, while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def __enter__(self) -> Captured:
        self.loggers = [logging.getLogger(), logging.getLogger("streamling"), logging.getLogger("dagster")]
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        for lg, level in zip(self.loggers, self.levels, strict=True):
            lg.removeHandler(self)
            lg.setLevel(level)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# ---- (a) --validate and configuration errors ----

VALID = """
sources:
  orders:
    type: kafka
    topic: orders
    data_format: json
    schema: {id: bigint, name: string, amount: double}
    primary_key: id
transforms:
  watch: {type: dynamic_table, backend_type: Postgres, backend_entity_name: watched, column: name, from: orders}
sinks:
  out: {type: postgres, from: orders, table: orders}
  ch: {type: clickhouse, from: orders, table: orders}
  copy: {type: kafka, from: orders, topic: copy}
"""
INVALID = VALID + "  broken: {type: postgres, from: nowhere, table: x, colour: red}\n"


def test_validate_reports_and_config_errors_show_no_secret(tmp_path: Path) -> None:
    (tmp_path / "valid.yaml").write_text(VALID)
    (tmp_path / "invalid.yaml").write_text(INVALID)
    outputs = []
    valid = streamling(tmp_path, "valid.yaml", "--validate", env={"STREAMLING__LOG_FORMAT": "json"})
    assert json.loads(valid.stdout)["is_valid"] is True, valid.stdout + valid.stderr
    outputs.append(valid.stdout + valid.stderr)
    invalid = streamling(tmp_path, "invalid.yaml", "--validate", env={})
    assert invalid.returncode == 2 and json.loads(invalid.stdout)["is_valid"] is False
    outputs.append(invalid.stdout + invalid.stderr)
    dry = streamling(tmp_path, "invalid.yaml", "--dry-run", env={})
    assert dry.returncode == 2
    outputs.append(dry.stdout + dry.stderr)
    # A connection section given whole, as JSON with a typo, or as a wrong type: the value is not repeated.
    for variable, value in [
        (
            "STREAMLING__KAFKA_SOURCE",
            '{"sasl_password": "' + SECRETS["STREAMLING__KAFKA_SOURCE__SASL_PASSWORD"] + '", ',
        ),
        ("STREAMLING__POSTGRES_SINK", '["' + SECRETS["STREAMLING__POSTGRES_SINK__PASS"] + '"]'),
        ("STREAMLING__POSTGRES_SINK_CONNECTIONS", '{"out": "' + SECRETS["STREAMLING__POSTGRES_SINK__PASS"] + '"}'),
        ("STREAMLING__CLICKHOUSE_SINK__PASSWORD", '{"a": "' + SECRETS["STREAMLING__CLICKHOUSE_SINK__PASSWORD"] + '"}'),
    ]:
        bad = streamling(tmp_path, "valid.yaml", "--validate", env={variable: value}, secrets=False)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        (error,) = json.loads(bad.stdout)["errors"]
        assert error.startswith("invalid configuration: ") and f"(from {variable})" in error
        outputs.append(bad.stdout + bad.stderr)
    assert_no_secret("\n".join(outputs))


# ---- (b) runs that fail to connect ----


def test_run_against_a_closed_postgres_port_shows_no_secret(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "sources: {orders: {type: generator, rows: 5, primary_key: id}}\n"
        "sinks: {out: {type: postgres, from: orders, table: orders}}\n"
    )
    port = str(free_port())
    env = {
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__POSTGRES_SINK__PORT": port,
        "STREAMLING__POSTGRES_SINK_CONNECTIONS__OUT__PORT": port,
        "STREAMLING__POSTGRES_SINK_CONNECTIONS__OUT__RETRY_TIMEOUT_SEC": "1",
    }
    ran = streamling(tmp_path, "p.yaml", env=env)
    assert ran.returncode == 1, ran.stderr
    refused = f'connection to server at "127.0.0.1", port {port} failed: Connection refused'
    assert re.search(
        f"Error: postgres sink 'out'.*: still failing after [0-9]+ attempts: cannot connect: .*{refused}", ran.stderr
    )
    assert_no_secret(ran.stdout + ran.stderr)


def test_kafka_with_sasl_against_the_local_broker_shows_no_secret(tmp_path: Path, kafka) -> None:
    """SCRAM authentication against the local broker fails; the schema registry got the password before (basic
    auth, which it does not check) to read the topic's schema."""
    topic = kafka.topic("secrets")
    kafka.register(topic, {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]})
    (tmp_path / "p.yaml").write_text(
        f"sources: {{orders: {{type: kafka, topic: {topic}, primary_key: id, ending_offsets: latest}}}}\n"
        "sinks: {out: {type: print, from: orders}}\n"
    )
    env = {k: v for k, v in kafka.env.items() if "KAFKA" in k}
    env |= {"STREAMLING__KAFKA_SOURCE__SASL_MECHANISM": "SCRAM-SHA-512", "STREAMLING__JOB_MODE": "true"}
    env["STREAMLING__KAFKA_SOURCE__UNAVAILABLE_TIMEOUT_SEC"] = "1"  # the broker drops the connection: waited out 1 s
    ran = streamling(tmp_path, "p.yaml", env=env)
    assert ran.returncode == 1, ran.stderr
    assert (
        f"Error: kafka source 'orders': cannot read metadata of topic '{topic}': Failed to get metadata: "
        "Local: Broker transport failure\n" in ran.stderr
    )
    assert_no_secret(ran.stdout + ran.stderr)


def run_in_process(path: Path, environ: dict[str, str], tmp_path: Path, capfd, **overrides: Any) -> str:
    """Run on the test session's Spark; everything it said: the error, log records, stdout and stderr."""
    from streamling import load_settings, run_pipeline

    settings = load_settings(
        config=str(tmp_path / "none"),
        environ={**SECRETS, **SASL, **environ},
        overrides={
            "job_mode": True,
            "log_level": "debug",
            "state_backend.backend_type": "InMemory",
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "restart_strategy.type": "none",
            **overrides,
        },
    )
    with Captured() as logs, pytest.raises(StreamlingError) as failed:
        run_pipeline(path, settings, spark_session())
    out, err = capfd.readouterr()
    return "\n".join([failed.value.message, repr(failed.value), logs.text, out, err])


def spark_session():
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    assert active is not None, "the session fixture starts it"
    return active


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}",
        "http://streamling:" + SECRETS["STREAMLING__CLICKHOUSE_SINK__PASSWORD"] + "@127.0.0.1:{port}",
    ],
    ids=["password-setting", "password-in-url"],
)
def test_clickhouse_server_unreachable_shows_no_secret(tmp_path: Path, spark, capfd, url: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "sources: {orders: {type: generator, rows: 5, primary_key: id}}\n"
        "sinks: {ch: {type: clickhouse, from: orders, table: orders}}\n"
    )
    port = free_port()
    said = run_in_process(path, {"STREAMLING__CLICKHOUSE_SINK__URL": url.format(port=port)}, tmp_path, capfd)
    assert f"clickhouse sink 'ch': cannot connect to http://127.0.0.1:{port}: " in said
    assert_no_secret(said)


def test_clickhouse_source_unreachable_at_validation_shows_no_secret(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "sources: {hist: {type: clickhouse, table_name: db.orders}}\nsinks: {p: {type: print, from: hist}}\n"
    )
    port = free_port()
    url = "http://streamling:" + SECRETS["STREAMLING__CLICKHOUSE_SOURCE__PASSWORD"] + f"@127.0.0.1:{port}"
    validated = streamling(tmp_path, "p.yaml", "--validate", env={"STREAMLING__CLICKHOUSE_SOURCE__URL": url})
    (error,) = json.loads(validated.stdout)["errors"]
    assert error.startswith(f"clickhouse source 'hist': cannot connect to http://127.0.0.1:{port}: "), error
    assert_no_secret(validated.stdout + validated.stderr)


def test_postgres_authentication_failures_show_no_secret(tmp_path: Path, spark, capfd, postgres_env) -> None:
    """The real server, a wrong password: for the state backend, then for the sink."""
    path = tmp_path / "p.yaml"
    path.write_text(
        "sources: {orders: {type: generator, rows: 5, primary_key: id}}\n"
        "sinks: {out: {type: postgres, from: orders, table: orders}}\n"
    )
    server = {k: v for k, v in postgres_env.items() if not k.endswith(("PASSWORD", "__PASS"))}
    said = run_in_process(
        path,
        server,
        tmp_path,
        capfd,
        **{"state_backend.backend_type": "Postgres", "state_backend.postgres.retry_timeout_sec": "1"},
    )
    assert "password authentication failed" in said
    said += run_in_process(path, server, tmp_path, capfd, **{"postgres_sink_connections.out.retry_timeout_sec": "1"})
    assert said.count("password authentication failed") >= 2
    assert_no_secret(said)


def test_schema_registry_unreachable_shows_no_secret(tmp_path: Path, spark, capfd, kafka_env) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "sources: {orders: {type: generator, rows: 5, primary_key: id}}\n"
        "sinks: {copy: {type: kafka, from: orders, topic: secrets_copy}}\n"
    )
    port = free_port()
    environ = {
        "STREAMLING__KAFKA_SINK__BROKERS": kafka_env["STREAMLING__KAFKA_SINK__BROKERS"],
        "STREAMLING__KAFKA_SINK__SECURITY_PROTOCOL": "plaintext",
        "STREAMLING__KAFKA_SINK__SCHEMA_REGISTRY_URL": f"http://127.0.0.1:{port}",
        "STREAMLING__KAFKA_SINK__UNAVAILABLE_TIMEOUT_SEC": "1",  # waited out for 1 s, then the final error
    }
    said = run_in_process(path, environ, tmp_path, capfd)
    assert "kafka sink 'copy': failed to register the Avro schema under subject 'secrets_copy-value'" in said
    assert_no_secret(said)


# ---- (c) Dagster: definitions, asset metadata, sensors ----

SPARK_SECRET = "sparkConfPw-0Yu2"


def dagster_snapshot(defs: dg.Definitions) -> str:
    """Everything the Dagster UI shows about the definitions (metadata, descriptions, resource config), as JSON."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    return serialize_value(RepositorySnap.from_def(defs.get_repository_def()))


def test_dagster_definitions_metadata_and_sensors_show_no_secret(
    tmp_path: Path, monkeypatch, capfd, kafka, postgres_env
) -> None:
    from streamling.state.sqlite import SqliteStateBackend
    from streamling_dagster import build_definitions
    from streamling_dagster.resources import StreamlingResource

    topic = kafka.topic("secrets")
    kafka.register(topic, {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]})
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "stream.yaml").write_text(
        textwrap.dedent(
            f"""
            sources: {{orders: {{type: kafka, topic: {topic}, primary_key: id}}}}
            sinks: {{out: {{type: postgres, from: orders, table: orders}}}}
            """
        )
    )
    (pipelines / "history.yaml").write_text(
        "sources: {hist: {type: clickhouse, table_name: db.orders}}\n"
        "sinks: {p: {type: print, from: hist}}\norchestration: {backfill_on_change: true}\n"
    )
    (pipelines / "broken.yaml").write_text("sources: {a: {type: generator}}\nsinks: {p: {type: print, from: b}}\n")
    url = "http://streamling:" + SECRETS["STREAMLING__CLICKHOUSE_SOURCE__PASSWORD"] + f"@127.0.0.1:{free_port()}"
    environ = {
        **SECRETS,
        **SASL,
        **{k: v for k, v in kafka.env.items() if "KAFKA" in k},
        "STREAMLING__KAFKA_SOURCE__SASL_MECHANISM": "SCRAM-SHA-512",  # authentication fails
        "STREAMLING__CLICKHOUSE_SOURCE__URL": url,
        "STREAMLING__SPARK__CONF": json.dumps({"spark.hadoop.fs.s3a.secret.key": SPARK_SECRET}),
        "STREAMLING__STATE_BACKEND__SQLITE__DATABASE_PATH": str(tmp_path / "state.db"),
    }
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with SqliteStateBackend("local_app_v1.stream", str(tmp_path / "state.db")) as state:
        state.put_many({f"orders:{topic}:0": {"offset": 0}, "orders:__epoch__": {"epoch": 1}})

    said = []
    with Captured() as logs:
        defs = build_definitions(pipelines)
        said.append(dagster_snapshot(defs))
        graph = defs.resolve_asset_graph()
        for key in graph.get_all_asset_keys():
            node = graph.get(key)
            said.append(f"{key.to_user_string()} {node.description} {node.metadata}")
        positions = next(s for s in defs.sensors or [] if s.name == "streamling_committed_positions")
        backfill = next(s for s in defs.sensors or [] if s.name == "history__backfill_sensor")
        server = {  # the real Postgres, with the wrong password from SECRETS
            f"state_backend.postgres.{field}": postgres_env[f"STREAMLING__STATE_BACKEND__POSTGRES__{field.upper()}"]
            for field in ("host", "port", "user", "database")
        }
        for overrides in ({}, {"state_backend.backend_type": "Postgres", **server}):
            resource = StreamlingResource(overrides=overrides)
            context = dg.build_sensor_context(resources={"streamling": resource})
            said.append(repr(positions(context)))
        said.append(repr(backfill(dg.build_sensor_context(resources={"streamling": StreamlingResource()}))))
    out, err = capfd.readouterr()  # the sensor context logs to its own console logger
    text = "\n".join([*said, logs.text, out, err])
    assert "stream: cannot read positions: " in err
    assert "cannot check clickhouse db.orders (cursor kept): " in text
    assert "password authentication failed" in err
    assert_no_secret(text)
    assert SPARK_SECRET not in text


def test_spark_conf_secrets_reach_the_session_but_not_the_resource_config(tmp_path: Path, monkeypatch) -> None:
    from streamling.config import load_settings
    from streamling_dagster import resources

    conf = {"spark.hadoop.fs.s3a.secret.key": SPARK_SECRET, "spark.sql.ansi.enabled": "true"}
    monkeypatch.setenv("STREAMLING__SPARK__CONF", json.dumps(conf))
    resource = resources.StreamlingSparkResource.from_settings(load_settings(str(tmp_path / "none")))
    assert "spark.hadoop.fs.s3a.secret.key" not in resource.spark_config
    assert resource.spark_config["spark.sql.ansi.enabled"] == "true"
    built: dict[str, str] = {}
    monkeypatch.setattr(engine, "start_spark_session", lambda conf: built.update(conf) or "session")
    resource.setup_for_execution(dg.build_init_resource_context())
    assert built == {}  # the session starts on first use, after the op's one-run-per-pipeline check
    assert resource.spark_session == "session"
    assert built == {**resource.spark_config, "spark.hadoop.fs.s3a.secret.key": SPARK_SECRET}


def test_spark_config_values_reach_the_session_as_the_session_builder_takes_them(monkeypatch) -> None:
    """As with dagster-pyspark's resource: a boolean is Spark's ``"true"`` (PySpark compares some options with that
    exact text), a ``None`` is left out, a nested config is flattened. (The session itself is replaced: what is
    asserted is the configuration it would be started from.)"""
    from streamling.spark import session, shipping
    from streamling_dagster import resources

    built: dict[str, str] = {}
    monkeypatch.setattr(session, "session_from_conf", lambda conf: built.update(conf) or "session")
    monkeypatch.setattr(shipping, "ship_plugins", lambda spark: None)
    config = {"spark.master": "local[1]", "spark": {"python": {"profile": True}}, "spark.unset": None}
    resource = resources.StreamlingSparkResource(spark_config=config)
    assert resource.spark_session == "session"
    assert built["spark.python.profile"] == "true" and built["spark.master"] == "local[1]"
    assert "spark.unset" not in built
