"""Typed application settings. Every section rejects unknown keys so a typo fails startup."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, PrivateAttr, SecretStr, field_validator, model_validator

from streamling.config.units import Milliseconds, Seconds


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class SqliteStateSettings(_Section):
    database_path: str = "./state.db"
    max_connections: PositiveInt | None = None
    """The original's SQLite pool size; accepted with a warning (each operation here opens its own connection)."""
    state_table_name: str | None = None
    """The original's name for the state table; accepted with a warning (the tables here are ``state`` and
    ``leases``)."""


class PostgresConnectionSettings(_Section):
    host: str = "127.0.0.1"
    port: PositiveInt = 5432
    user: str = "postgres"
    password: SecretStr = SecretStr("")
    database: str = "postgres"
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "disable"
    connect_timeout_sec: PositiveInt = 10
    retry_timeout_sec: Seconds = 600.0
    """How long a write or a state commit keeps retrying transient failures (lost connection, server restart,
    read-only database) before the pipeline fails; the epoch is not acknowledged meanwhile."""
    statement_timeout_secs: Seconds = 0.0
    """The sessions' ``statement_timeout``: a statement running longer is cancelled and fails the run; 0 = none."""
    pool_acquire_timeout_secs: Seconds = 30.0
    """How long one attempt waits for a connection of the process's pool (all busy, or none can be opened);
    then it counts as a transient failure."""
    pool_idle_timeout_secs: Seconds = 600.0
    """A pooled connection unused this long is closed (psycopg_pool's ``max_idle``), so an idle pipeline does not
    hold server sessions; the original's name and default."""
    pool_max_lifetime_secs: Seconds = 1800.0
    """A pooled connection is replaced once it is this old (psycopg_pool's ``max_lifetime``), so sessions move to a
    failed-over or rebalanced server in time; the original's name and default."""
    max_connections: PositiveInt | None = None
    """The most connections one process's pool for this destination holds (psycopg_pool's ``max_size``); unset:
    16. The original's name."""

    @field_validator("statement_timeout_secs")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must be 0 (no limit) or more")
        return value

    @field_validator("pool_acquire_timeout_secs", "pool_idle_timeout_secs", "pool_max_lifetime_secs")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    def conninfo(self) -> dict[str, object]:
        """Keyword arguments for psycopg.connect; the password never leaves this dict."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password.get_secret_value() or None,
            "dbname": self.database,
            "sslmode": self.sslmode,
            "connect_timeout": self.connect_timeout_sec,
            "application_name": "streamling",
        }


class PostgresSinkSettings(PostgresConnectionSettings):
    """Where Postgres sinks and dynamic tables write. Keys follow the original YAML: ``pass`` and ``db``."""

    password: SecretStr = Field(default=SecretStr(""), alias="pass")
    database: str = Field(default="postgres", alias="db")
    batch_size: PositiveInt | None = None
    """Rows per merge statement of a Postgres sink whose node sets no ``batch_size``; unset: a whole epoch's
    stream (per merge round) in one."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait, for Postgres sinks without their own ``batch_flush_interval``: the sources feeding
    them close epochs at least this often (as ``clickhouse_sink.batch_flush_interval``)."""


class DynamicTablePostgresSettings(PostgresSinkSettings):
    """``dynamic_table_backend.postgres``: the dynamic tables' connection, plus the defaults the original keeps
    there for the tables' own `schema`, `cache` and `cache_refresh_debounce_ms` fields."""

    dt_schema_name: str | None = Field(default=None, min_length=1)
    """Default of a Postgres dynamic table's `schema` (unset: ``public``)."""

    cache_enabled: bool | None = None
    """Default of a Postgres dynamic table's `cache` (each worker holds the table; needs its `time_column`)."""
    cache_refresh_debounce_ms: Milliseconds | None = None
    """Default of a Postgres dynamic table's `cache_refresh_debounce_ms` (unset: 1 s; 0: every batch)."""


def connection_key(node_name: str) -> str:
    """``Orders-Sink 1`` → ``orders_sink_1``: the key of a node's entry in ``postgres_sink_connections``."""
    return re.sub(r"[^a-z0-9]+", "_", node_name.lower()).strip("_")


class ClickHouseConnectionSettings(_Section):
    """A ClickHouse server over HTTP(S) when `url` is set, else the embedded engine (chdb) at `path`."""

    url: str | None = None
    path: str = "./.streamling/clickhouse"
    """Data directory of the embedded engine; chdb allows one per process."""
    user: str = "default"
    password: SecretStr = SecretStr("")
    database: str = "default"
    connect_timeout_sec: PositiveInt = 10
    embedded_wait_sec: Seconds = 0.0
    """How long a run waits for the embedded engine's data path while another process holds it (saying which, once,
    while it waits); 0 fails at once, naming that process. Dagster's runs wait 600 s unless this is set."""


class ClickHouseSourceSettings(ClickHouseConnectionSettings):
    compression: Literal["none", "gzip", "zstd", "lz4"] = "none"
    """The original's ``clickhouse_source.compression`` (its connection settings are the sink's): here the encoding
    the server is asked to compress query answers with (a server only)."""
    compression_level: int | None = Field(default=None, ge=0, le=9)
    """The original's gzip level for insert bodies; a source inserts nothing: accepted with a warning."""
    page_size: PositiveInt = 100_000
    """Rows per page (and per epoch) a ClickHouse source reads."""
    sort_key_range: PositiveInt = 1_000_000
    """Initial width of a first-sort-key range (numbers: units; dates: days; date-times: seconds)."""
    query_timeout_sec: Seconds = 60.0
    """The server-side limit of one page query (``max_execution_time``); a range page that exceeds it is read
    again at half the width."""

    @field_validator("query_timeout_sec")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("compression", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None or value is False or (isinstance(value, str) and not value.strip()):
            return "none"
        return value.strip().lower() if isinstance(value, str) else value


ClickHouseCompression = Literal["none", "gzip", "zstd", "lz4"]


class ClickHouseSinkSettings(ClickHouseConnectionSettings):
    compression: ClickHouseCompression = "none"
    """The inserts' wire compression for ClickHouse sinks without their own `compression` (a server only: the
    embedded engine has no wire)."""
    compression_level: int = Field(default=6, ge=0, le=9)
    """Its level, for sinks without their own `compression_level`."""
    batch_size: PositiveInt | None = 100_000
    """Rows per insert for ClickHouse sinks without their own `batch_size`; null: the whole epoch."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait, for ClickHouse sinks without their own `batch_flush_interval`."""
    retry_timeout_sec: Seconds = 600.0
    """How long a write keeps waiting out a server it cannot reach (a restart, a failover) before the pipeline
    fails; the epoch is not acknowledged meanwhile. As ``postgres_sink.retry_timeout_sec``."""

    @field_validator("compression", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None or value is False or (isinstance(value, str) and not value.strip()):
            return "none"
        return value.strip().lower() if isinstance(value, str) else value


class DynamicTableBackendSettings(_Section):
    max_batch_size: PositiveInt = 1000
    """Distinct values per lookup query."""
    cache_ttl_ms: Milliseconds = 0
    """How long a lookup result may be reused; 0 (the default) asks the table every batch."""
    postgres: DynamicTablePostgresSettings | None = None
    """Where Postgres dynamic tables live; each field it leaves out comes from `postgres_sink` (layered by
    `Settings._layer_connections`). Unset: `postgres_sink` itself."""


class ExternalHttpHandlerSettings(_Section):
    """Requests of `handler` transforms and `webhook` sinks (``STREAMLING__EXTERNAL_HTTP_HANDLER__…``)."""

    trigger_max_count: PositiveInt = 2000
    """Most rows per request in batched mode; a node's `batch_size` overrides it."""
    buffer_size: PositiveInt = 25
    """Most requests in flight at once per Spark task (one Python worker)."""
    timeout_sec: Seconds = 30.0
    """Per attempt: connect, send and read the whole response."""
    max_retries: int = Field(default=10, ge=0)
    """Retries of a retriable failure (transport error, timeout, 408, 429, 5xx) after the first attempt."""
    retry_timeout_sec: Seconds = 300.0
    """No retry starts after this long since a request's first attempt; the retries are then exhausted."""
    retry_backoff_sec: Seconds = 0.5
    """The first retry's delay, doubling per retry, with jitter; a ``Retry-After`` header wins."""
    retry_backoff_max_sec: Seconds = 30.0
    operator_timeout_sec: Seconds = 300.0
    """The most one Spark task of a handler or webhook may spend on its requests in one epoch (all of a
    partition's requests, retries included); past it the run fails with a retriable error."""

    @field_validator("operator_timeout_sec")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value


class ScriptTransformSettings(_Section):
    """Defaults for script transforms; a transform's own fields win."""

    time_limit_ms: Milliseconds = 10_000
    """Wall-clock limit for one batch inside the sandbox (a loop that never ends fails the pipeline)."""
    memory_limit_mb: PositiveInt = 256
    """Cap on the sandbox's WebAssembly memory: the script's heap plus one batch in and out."""
    batch_size: PositiveInt = 10_000
    """Rows handed to the sandbox per call (one crossing per batch)."""

    @field_validator("time_limit_ms")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value


OtlpProtocol = Literal["http/protobuf", "http/json", "grpc"]


class OpenTelemetryMetricsSettings(_Section):
    """OTLP export of the per-node metrics (``STREAMLING__OPEN_TELEMETRY_METRICS__…``; the standard
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_PROTOCOL`` override the first two)."""

    ingestion_endpoint: str = "none"
    """The collector's URL (``http://collector:4318/v1/metrics``; for grpc ``http://collector:4317``). Anything
    that is not an http(s) URL, such as the default ``none``, turns export off."""
    endpoint_protocol: OtlpProtocol = "http/protobuf"
    batch_interval_secs: Seconds = 30.0
    """How often the metrics are exported."""
    export_timeout_secs: Seconds = 10.0
    """The longest one export may take (a slow collector delays only the exporter's own thread)."""
    global_tags: dict[str, str] = Field(default_factory=dict)
    """Tags on every metric: ``"environment:production,image_tag:v1.0.0"`` (or a mapping)."""
    metric_deny_list: list[str] = Field(default_factory=list)
    """Regular expressions (comma-separated, or a list); a metric whose name matches one anywhere is not
    exported (anchor with ``^…$`` for exact names)."""

    @field_validator("endpoint_protocol", mode="before")
    @classmethod
    def _lower_protocol(cls, value: object) -> object:
        """An empty protocol (the original's embedded default is ``""``) is the default, ``http/protobuf``."""
        if isinstance(value, str) and not value.strip():
            return "http/protobuf"
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("batch_interval_secs", "export_timeout_secs")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("global_tags", mode="before")
    @classmethod
    def _parse_tags(cls, value: object) -> object:
        if not isinstance(value, str):
            return {str(k): "" if v is None else str(v) for k, v in value.items()} if isinstance(value, dict) else value
        tags: dict[str, str] = {}
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            key, sep, tag = part.partition(":")
            if not sep or not key.strip():
                raise ValueError(f'{part!r} is not key:value (write "k1:v1,k2:v2")')
            tags[key.strip()] = tag.strip()
        return tags

    @field_validator("global_tags")
    @classmethod
    def _valid_tags(cls, value: dict[str, str]) -> dict[str, str]:
        from streamling.core.labels import label_errors

        problems = label_errors("open_telemetry_metrics.global_tags", value, (), what="tag", origin="global_tags")
        if problems:
            raise ValueError("; ".join(p.split(": ", 1)[1] for p in problems))
        return value

    @field_validator("metric_deny_list", mode="before")
    @classmethod
    def _split_patterns(cls, value: object) -> object:
        return [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value

    @field_validator("metric_deny_list")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value

    @property
    def endpoint(self) -> str | None:
        """The export URL, None when export is off. An http(s) endpoint without a path gets the OTLP metrics
        path (``/v1/metrics``), as the standard base-URL variable does."""
        url = self.ingestion_endpoint.strip()
        if not re.match(r"^https?://[^/]", url, re.IGNORECASE):
            return None
        if self.endpoint_protocol != "grpc" and re.fullmatch(r"https?://[^/]+/?", url, re.IGNORECASE):
            return url.rstrip("/") + "/v1/metrics"
        return url


class LiveDataInspectSettings(_Section):
    records_per_topology_node: PositiveInt = 15
    """The latest rows kept per node."""
    refresh_in_secs: Seconds = 30.0
    """How often the kept rows are replaced by a fresh sample (taken by the Spark tasks of the next epoch)."""

    @field_validator("refresh_in_secs")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value


BackendType = Literal["InMemory", "Sqlite", "Postgres"]
_BACKENDS: dict[str, BackendType] = {"inmemory": "InMemory", "sqlite": "Sqlite", "postgres": "Postgres"}


class PostgresStateSettings(PostgresConnectionSettings):
    """``state_backend.postgres``: the state backend's connection."""

    state_schema_name: str | None = None
    """The original's schema of the state table; accepted with a warning (the state here is ``streamling.state``,
    beside ``streamling.leases``)."""
    state_table_name: str | None = None
    """The original's name of the state table; accepted with a warning, as `state_schema_name`."""


class StateBackendSettings(_Section):
    backend_type: BackendType = "Sqlite"
    sqlite: SqliteStateSettings = Field(default_factory=SqliteStateSettings)
    postgres: PostgresStateSettings = Field(default_factory=PostgresStateSettings)
    lease_ttl_sec: Seconds = 30.0
    """How long a run's lease on its pipeline outlives the run's last heartbeat (sent every sixth of it)."""

    @field_validator("lease_ttl_sec")
    @classmethod
    def _lease_at_least_a_second(cls, value: float) -> float:
        if value < 1:
            raise ValueError("must be at least 1 second")
        return value

    @field_validator("backend_type", mode="before")
    @classmethod
    def _case_insensitive(cls, value: object) -> object:
        if isinstance(value, str):
            key = value.replace("-", "").replace("_", "").lower()
            return _BACKENDS.get(key, value)
        return value


class PluginSettings(_Section):
    """Where plugins come from besides installed distributions, and which preprocessors run
    (``STREAMLING__PLUGIN__…``; see `streamling.plugin`)."""

    path: str | None = None
    """A plugin ``.py`` file, a package directory, or a directory of them (several joined by ``:``)."""
    preprocessor_ids: list[str] = Field(default_factory=list)
    """Preprocessors (``<namespace>.<name>``) applied in this order to every pipeline definition before parsing."""
    preprocessor_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Options per preprocessor id."""
    side_output_ids: list[str] = Field(default_factory=list)
    """Side outputs (``<namespace>.<name>``) attached to every source of every pipeline, one instance per source,
    as the original configured them; a pipeline may also declare one as a node (``from:`` the node it observes)."""
    side_output_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Options per side output id."""
    channel_capacity: PositiveInt | None = None
    """The original's capacity of the channels between a plugin and the host; accepted with a warning (a plugin
    here is handed whole Arrow batches by Spark tasks, with no channel to size)."""

    @field_validator("preprocessor_ids", "side_output_ids", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """``STREAMLING__PLUGIN__PREPROCESSOR_IDS=a.x,b.y`` as well as a list."""
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


class RestartStrategySettings(_Section):
    """What a run that failed for a reason other than the user's own does (`runtime/restarts.py`): start again from
    its last committed epochs after a backoff, at most `max_failures` times within `failure_window_sec`."""

    type: Literal["exponential-delay", "fixed-delay", "none"] = "exponential-delay"
    initial_backoff_sec: Seconds = 1.0
    """The wait before the first restart (every restart's with ``fixed-delay``)."""
    max_backoff_sec: Seconds = 60.0
    backoff_multiplier: float = Field(default=2.0, ge=1.0)
    """Each failure within the window multiplies the wait by this (``exponential-delay``)."""
    jitter_factor: float = Field(default=0.1, ge=0.0, le=1.0)
    """The wait varies by up to this fraction either way, so restarts of many runs do not come back in lockstep."""
    max_failures: PositiveInt = 5
    """More failures than this within `failure_window_sec` end the run with the last one."""
    failure_window_sec: Seconds = 600.0

    @field_validator("type", mode="before")
    @classmethod
    def _flink_names(cls, value: object) -> object:
        """``exponential-delay``, ``exponential_delay`` and ``ExponentialDelay`` alike."""
        if isinstance(value, str):
            key = re.sub(r"(?<=[a-z])(?=[A-Z])", "-", value.strip()).replace("_", "-").lower()
            return {"disable": "none", "off": "none", "no-restart": "none"}.get(key, key)
        return value


class EngineSettings(_Section):
    """The warm engine's own settings (`streamling serve`, read from its config file and environment; a submitted
    run brings its own settings, and these are not among them)."""

    pipelines_dir: str | None = None
    """Run every pipeline file in this directory as desired state (``streamling serve --pipelines DIR``)."""
    pipelines_poll_sec: Seconds = 2.0
    """How often the directory is looked at for new, changed and removed files."""
    max_starting_runs: PositiveInt = 2
    """Runs that start (validate, plan, open their sources) at once; later submissions wait, in state ``queued``."""
    run_retention_sec: Seconds = 900.0
    """How long a finished run's record (state, error, log) stays readable over the API."""
    task_slots_per_core: PositiveInt = 4
    """Spark task slots per core when ``spark.master`` is ``local[*]``: the engine runs ``local[cores * this]``.
    An epoch's task mostly waits (on the broker, on a sink), so one slot per core left fifty pipelines queueing for
    two slots while the cores idled (bench scenario 6: `local[2]` 17 of 50 pipelines wrote within 120 s, `local[8]`
    all 50 within 41 s, each sink exact). A master naming its slots (``local[2]``, a cluster) is kept as given."""
    token: SecretStr | None = None
    """The API token; unset: one is generated at the engine's first start into `token_file`."""
    token_file: str | None = None
    """Where the token is kept, readable only by its owner (default ``~/.streamling/engine-<port>.token``,
    ``$STREAMLING_HOME`` instead of ``~/.streamling``); `streamling submit` and the Dagster resource read it."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Names (``host`` or ``host:port``) the API may be reached under besides the address it listens on; any other
    ``Host`` header is refused (DNS rebinding)."""

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


class PrintSinkSettings(_Section):
    sample_every: PositiveInt = 1
    num_records_before_stop: PositiveInt | None = None
    """The original's per-print-sink stop: a print sink that has written this many rows in the run requests a
    graceful stop, as the global `num_records_before_stop` does for any sink (which wins when both are set)."""


class SparkSettings(_Section):
    master: str = "local[*]"
    app_name: str = "streamling"
    checkpoint_root: str = "./.streamling/checkpoints"
    """Unused since epochs are planned by the engine rather than by Spark's streaming checkpoints; accepted so
    configs that set it still load."""
    shuffle_partitions: PositiveInt = 4
    class_archive: bool = True
    """Start the driver's JVM from a class-data archive of Spark's classes (built once, see `class_archive`)."""
    environment_archive: str | None = None
    """On a cluster master, the Python environment the executors run: a path to the archive `streamling package`
    built, or ``auto`` to build it into the engine's cache when what goes in it changed (`runtime.packed_env`).
    Shipped with ``spark.archives``; ``PYSPARK_PYTHON`` points into it. Unset, the workers need the packages
    installed. Ignored by a local master, whose workers run this interpreter."""
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


SecurityProtocol = Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]


class KafkaConnectionSettings(_Section):
    brokers: str = "localhost:9092"
    security_protocol: SecurityProtocol = "plaintext"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    schema_registry_url: str = "http://localhost:18081"
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    client_id: str | None = None
    unavailable_timeout_sec: Seconds = 300.0
    """How long an unreachable broker or Schema Registry is waited out before the run fails."""

    @field_validator("security_protocol", mode="before")
    @classmethod
    def _lower_protocol(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class KafkaSourceSettings(KafkaConnectionSettings):
    consumer_group_id: str | None = None
    lag_report_interval_ms: Milliseconds = Field(default=30_000, ge=0)
    """How often each Kafka source logs its lag (records after the committed offsets); 0 turns it off."""
    consumer_fetch_timeout_sec: Seconds = 1.0
    """How long one poll of a reading task's consumer waits for records (``consume``'s timeout) before the task
    looks at its deadlines again (the broker probe, the stall watchdog)."""
    stall_watchdog_timeout_sec: Seconds = 60.0
    """A reading task whose range is not finished and that gets no record for this long fails the epoch with a
    retriable error, and the run restarts from its committed positions; 0 turns the watchdog off (an unreachable
    broker still fails after ``unavailable_timeout_sec``)."""

    @field_validator("consumer_fetch_timeout_sec")
    @classmethod
    def _positive_fetch(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("stall_watchdog_timeout_sec")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must be 0 (off) or more")
        return value


class WasmScriptSettings(_Section):
    """The original's ``wasm_script`` section. Its one setting chose the WebAssembly runtime file of its
    JavaScript sandbox; the sandbox here is the one the package ships, so it is accepted with a warning."""

    runtime_wasm_file_path: str | None = None


class TestSettings(_Section):
    """The original's ``test_settings``: knobs of its own end-to-end tests (telemetry assertions against a
    Prometheus). Nothing here reads them; accepted with a warning whenever the section is given."""

    __test__ = False  # not a pytest class

    telemetry_assertions_enabled: bool = True
    prometheus_max_attempts: int = Field(default=30, ge=0)
    prometheus_sleep_ms: Milliseconds = 500


class BackfillRange(_Section):
    """Job mode over part of the data, read from the start of the range: ClickHouse sources and a hybrid's
    bounded phases read rows whose first sort key is in [start, end); bounded Kafka sources read the records
    whose offsets (integers) or message times (dates, date-times) are in [start, end)."""

    start: int | datetime
    end: int | datetime
    column: str | None = None
    """The first sort key the range is meant for; a ClickHouse source sorted by another column is an error."""

    @field_validator("start", "end", mode="before")
    @classmethod
    def _typed(cls, value: object) -> object:
        """A date is its midnight; a date-time without a zone is in UTC."""
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime(value.year, value.month, value.day, tzinfo=UTC)
        return value

    @field_validator("start", "end")
    @classmethod
    def _zoned(cls, value: int | datetime) -> int | datetime:
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _ordered(self) -> BackfillRange:
        if isinstance(self.start, int) != isinstance(self.end, int):
            raise ValueError(
                f"start {_text(self.start)} and end {_text(self.end)} must both be integers or both date-times"
            )
        if not self.start < self.end:  # type: ignore[operator]
            raise ValueError(f"start {_text(self.start)} must be before end {_text(self.end)}")
        return self

    @property
    def by_time(self) -> bool:
        return isinstance(self.start, datetime)

    def __str__(self) -> str:
        return f"[{_text(self.start)}, {_text(self.end)})"


def _text(value: int | datetime) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class Settings(_Section):
    application_id: str = Field(default="local_app_v1", min_length=1)
    pipeline_definition_location: str | None = None
    engine_url: str | None = None
    """A warm engine (`streamling serve`) that `streamling submit` and Dagster runs submit pipelines to."""
    job_mode: bool = False
    backfill_range: BackfillRange | None = None
    """Job mode over a range of the bounded sources (see `BackfillRange`); needs `job_mode`."""
    record_batch_size: PositiveInt = 250_000
    record_batch_interval_ms: Milliseconds = 200
    checkpoint_interval_sec: Seconds = 5.0
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    num_records_before_stop: PositiveInt | None = None
    """A graceful stop once any sink has written this many rows in the run (the epoch that reaches it commits)."""
    enforce_primary_keys: bool = False
    """Missing primary keys (sources, and sinks with none upstream) are errors instead of warnings."""
    internal_buffer_size: PositiveInt | None = None
    """The original's channel capacity between operators; accepted with a warning (nothing to size here)."""
    drain_policy: Literal["auto", "drain", "fast"] | None = None
    """The original's shutdown policy; every stop here drains (the in-flight epoch commits)."""
    admin_api_port: int | None = Field(default=None, ge=0, le=65535)
    """The admin HTTP API and page (health, topology, positions, live rows, ``/metrics``); unset or 0: off."""
    admin_api_host: str = "127.0.0.1"
    admin_api_token: SecretStr | None = None
    """The admin API's token; unset: generated at the first start into ``~/.streamling/admin-<port>.token``."""
    admin_api_allowed_hosts: list[str] = Field(default_factory=list)
    """Names the admin API may be reached under besides its address (any other ``Host`` is refused)."""
    """The address the admin API listens on; ``0.0.0.0`` for Kubernetes probes from outside the pod."""
    source_stall_timeout_sec: Seconds = 300.0
    """The admin API's health check fails once a source has had an epoch in flight, or records waiting with
    nothing committed, for this long."""
    prometheus_metrics_enabled: bool = True
    """The admin API also serves the metrics in the Prometheus text format at ``/metrics``."""
    live_data_inspect_enabled: bool = False
    """Keep the latest rows seen at every node for the admin API's live inspection (sampled by the Spark tasks)."""
    live_data_inspect: LiveDataInspectSettings = Field(default_factory=LiveDataInspectSettings)
    open_telemetry_metrics: OpenTelemetryMetricsSettings = Field(default_factory=OpenTelemetryMetricsSettings)
    state_backend: StateBackendSettings = Field(default_factory=StateBackendSettings)
    print_sink: PrintSinkSettings = Field(default_factory=PrintSinkSettings)
    kafka_source: KafkaSourceSettings = Field(default_factory=KafkaSourceSettings)
    kafka_sink: KafkaConnectionSettings = Field(default_factory=KafkaConnectionSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    postgres_sink: PostgresSinkSettings = Field(default_factory=PostgresSinkSettings)
    postgres_sink_connections: dict[str, PostgresSinkSettings] = Field(default_factory=dict)
    """Per-node overrides of `postgres_sink`, keyed by `connection_key` of the node name."""
    dynamic_table_backend: DynamicTableBackendSettings = Field(default_factory=DynamicTableBackendSettings)
    clickhouse_source: ClickHouseSourceSettings = Field(default_factory=ClickHouseSourceSettings)
    clickhouse_sink: ClickHouseSinkSettings = Field(default_factory=ClickHouseSinkSettings)
    external_http_handler: ExternalHttpHandlerSettings = Field(default_factory=ExternalHttpHandlerSettings)
    http_secret_header: dict[str, str] = Field(default_factory=dict)
    """Header name per secret (``STREAMLING__HTTP_SECRET_HEADER__<NAME>``), keyed by the lowercased name."""
    http_secret_value: dict[str, SecretStr] = Field(default_factory=dict)
    """Header value per secret (``STREAMLING__HTTP_SECRET_VALUE__<NAME>``); never logged or shown."""
    script_transform: ScriptTransformSettings = Field(default_factory=ScriptTransformSettings)
    wasm_script: WasmScriptSettings = Field(default_factory=WasmScriptSettings)
    """The original's WebAssembly runtime settings (see `WasmScriptSettings`); `script_transform` sets the sandbox."""
    test_settings: TestSettings | None = None
    """The original's end-to-end test knobs (see `TestSettings`)."""
    plugin: PluginSettings = Field(default_factory=PluginSettings)
    restart_strategy: RestartStrategySettings = Field(default_factory=RestartStrategySettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    _notices: list[str] = PrivateAttr(default_factory=list)
    """Things worth one warning at start that are not errors (a named config file that is missing)."""

    @model_validator(mode="before")
    @classmethod
    def _layer_connections(cls, data: Any) -> Any:
        """Each per-node entry, and the dynamic tables' connection, override only the fields they name; the rest
        come from `postgres_sink`."""
        if not isinstance(data, dict):
            return data
        base = data.get("postgres_sink") if isinstance(data.get("postgres_sink"), dict) else {}
        if isinstance(data.get("postgres_sink_connections"), dict):
            layered = {}
            for name, override in data["postgres_sink_connections"].items():
                layered[connection_key(str(name))] = {**base, **override} if isinstance(override, dict) else override
            data = {**data, "postgres_sink_connections": layered}
        dynamic = data.get("dynamic_table_backend")
        if isinstance(dynamic, dict) and isinstance(dynamic.get("postgres"), dict):
            data = {**data, "dynamic_table_backend": {**dynamic, "postgres": {**base, **dynamic["postgres"]}}}
        return data

    @field_validator("http_secret_header", "http_secret_value", mode="before")
    @classmethod
    def _secret_names(cls, value: object) -> object:
        """Names are case-insensitive: environment keys arrive lowercased, config-file keys may not."""
        return {str(k).lower(): v for k, v in value.items()} if isinstance(value, dict) else value

    def http_secret(self, name: str) -> tuple[str, SecretStr] | None:
        """(header name, value) of secret `name`, None unless both halves are configured."""
        key = name.strip().lower()
        header, value = self.http_secret_header.get(key), self.http_secret_value.get(key)
        return (header, value) if header and value is not None else None

    def postgres_connection(self, node_name: str) -> PostgresSinkSettings:
        return self.postgres_sink_connections.get(connection_key(node_name), self.postgres_sink)

    def postgres_connection_name(self, node_name: str) -> str:
        """Which settings `postgres_connection` takes: ``postgres_sink_connections.<key>`` or ``postgres_sink``."""
        key = connection_key(node_name)
        return f"postgres_sink_connections.{key}" if key in self.postgres_sink_connections else "postgres_sink"

    def dynamic_table_connection_name(self, node_name: str) -> str:
        """Which settings `dynamic_table_connection` takes (its node's entry, the backend's, or `postgres_sink`)."""
        if connection_key(node_name) in self.postgres_sink_connections:
            return self.postgres_connection_name(node_name)
        return "dynamic_table_backend.postgres" if self.dynamic_table_backend.postgres else "postgres_sink"

    def dynamic_table_connection(self, node_name: str) -> PostgresSinkSettings:
        """A Postgres dynamic table's connection: its node's own entry in `postgres_sink_connections`, else
        ``dynamic_table_backend.postgres``, else `postgres_sink`."""
        own = self.postgres_sink_connections.get(connection_key(node_name))
        return own or self.dynamic_table_backend.postgres or self.postgres_sink

    @model_validator(mode="after")
    def _range_in_job_mode(self) -> Settings:
        if self.backfill_range is not None and not self.job_mode:
            raise ValueError(f"backfill_range {self.backfill_range} applies to job mode only; set job_mode: true")
        return self

    @field_validator("record_batch_interval_ms", "checkpoint_interval_sec")
    @classmethod
    def _positive_interval(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("log_level", "log_format", "drain_policy", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    def startup_warnings(self) -> list[str]:
        """One line per setting accepted for compatibility with the original Streamling that does nothing here,
        saying what it maps to; plus the load-time notices. Logged once when a run starts."""
        out = list(self._notices)
        if self.internal_buffer_size is not None:
            out.append(
                f"setting internal_buffer_size = {self.internal_buffer_size} has no effect here: operators hand each "
                "epoch on as a whole Spark DataFrame, with no channel in between; an epoch's size is record_batch_size"
            )
        if self.drain_policy in ("auto", "fast"):
            out.append(
                f"setting drain_policy = {self.drain_policy!r} has no effect here: every stop drains (the in-flight "
                "epoch finishes and commits within 25 s, as drain_policy 'drain' does), and a stopped stream resumes "
                "from the committed positions"
            )
        if self.plugin.channel_capacity is not None:
            out.append(
                f"setting plugin.channel_capacity = {self.plugin.channel_capacity} has no effect here: a plugin is "
                "handed whole Arrow batches by the Spark tasks of an epoch, with no channel in between; an epoch's "
                "size is record_batch_size"
            )
        if self.wasm_script.runtime_wasm_file_path is not None:
            out.append(
                f"setting wasm_script.runtime_wasm_file_path = {self.wasm_script.runtime_wasm_file_path!r} has no "
                "effect here: script transforms run in the JavaScript sandbox this package ships; its limits are "
                "script_transform.*"
            )
        backend = self.state_backend
        for name, value in (
            ("state_backend.postgres.state_schema_name", backend.postgres.state_schema_name),
            ("state_backend.postgres.state_table_name", backend.postgres.state_table_name),
            ("state_backend.sqlite.state_table_name", backend.sqlite.state_table_name),
        ):
            if value is not None:
                out.append(
                    f"setting {name} = {value!r} has no effect here: the state backend's tables are state and "
                    "leases (schema streamling in Postgres); positions kept under another name are not read"
                )
        if backend.sqlite.max_connections is not None:
            out.append(
                f"setting state_backend.sqlite.max_connections = {backend.sqlite.max_connections} has no effect "
                "here: each state operation opens its own SQLite connection"
            )
        if self.clickhouse_source.compression_level is not None:
            out.append(
                f"setting clickhouse_source.compression_level = {self.clickhouse_source.compression_level} has no "
                "effect here: it sets the gzip level of insert bodies, and a source inserts nothing (its answers are "
                "compressed by the server, as clickhouse_source.compression asks)"
            )
        if self.test_settings is not None:
            out.append(
                "setting test_settings has no effect here: it configured the original's own end-to-end tests "
                "(telemetry assertions against a Prometheus)"
            )
        metrics = self.open_telemetry_metrics
        endpoint = metrics.ingestion_endpoint.strip()
        if metrics.endpoint is None and endpoint.lower() not in ("", "none"):
            out.append(
                f"open_telemetry_metrics.ingestion_endpoint = {endpoint!r} is not an http(s) URL: metrics are not "
                "exported (write it as http://host:port/v1/metrics, or grpc's http://host:4317)"
            )
        if self.live_data_inspect_enabled and not self.admin_api_port:
            out.append(
                "setting live_data_inspect_enabled = true has no effect without admin_api_port: the live rows are "
                "served by the admin API"
            )
        return out

    @property
    def admin_api_url(self) -> str | None:
        """The admin page's address as a browser on another machine reaches it (this host's name when the API
        listens on every interface); None when the admin API is off."""
        if not self.admin_api_port:
            return None
        host = self.admin_api_host
        if host in ("0.0.0.0", "::", ""):
            import socket

            host = socket.gethostname()
        return f"http://{f'[{host}]' if ':' in host else host}:{self.admin_api_port}/"

    @property
    def telemetry_enabled(self) -> bool:
        """Whether nodes are counted at all: something (an OTLP collector, the admin API) reads the counts."""
        return self.open_telemetry_metrics.endpoint is not None or bool(self.admin_api_port)
