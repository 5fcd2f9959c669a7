"""Typed application settings. Every section rejects unknown keys so a typo fails startup."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, PrivateAttr, SecretStr, field_validator, model_validator

from streamling.config.units import Milliseconds, Seconds


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=True)


class SqliteStateSettings(_Section):
    database_path: str = "./state.db"
    """The SQLite file of the state backend; created on start."""
    max_connections: PositiveInt | None = None
    """The original's SQLite pool size; accepted with a warning (each operation here opens its own connection)."""
    state_table_name: str | None = None
    """The original's name for the state table; accepted with a warning (the tables here are ``state`` and
    ``leases``)."""


class PostgresConnectionSettings(_Section):
    host: str = "127.0.0.1"
    """The Postgres server's host."""
    port: PositiveInt = 5432
    """The Postgres server's port."""
    user: str = "postgres"
    """The user to log in as."""
    password: SecretStr = SecretStr("")
    """The user's password; never logged or shown (`'***'` in configuration errors)."""
    database: str = "postgres"
    """The database to connect to."""
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "disable"
    """libpq's `sslmode`."""
    connect_timeout_sec: PositiveInt = 10
    """libpq's `connect_timeout`: how long opening one connection may take."""
    retry_timeout_sec: Seconds = 600.0
    """How long a write, a read or a position commit retries transient failures (lost connection, server restart,
    read-only database, no pooled connection in time) before the run fails; the epoch is not acknowledged meanwhile. A
    commit is one transaction of upserts, so a retry after a lost connection writes the same values again."""
    statement_timeout_secs: Seconds = 0.0
    """The sessions' `statement_timeout` (sent as a libpq `options` setting): a statement that runs longer is cancelled
    and fails the run with `canceling statement due to statement timeout`. 0: none is sent (the server's own
    applies)."""
    pool_acquire_timeout_secs: Seconds = 30.0
    """Each process keeps a pool of connections per destination; a write waits this long for a free connection (or for
    one to be opened), at most `retry_timeout_sec`, then retries as after a transient failure."""
    pool_idle_timeout_secs: Seconds = 600.0
    """The pool's `max_idle` (psycopg_pool): a connection unused this long is closed, so an idle pipeline gives its
    sessions back to the server. The original's name and default."""
    pool_max_lifetime_secs: Seconds = 1800.0
    """The pool's `max_lifetime` (psycopg_pool): a connection this old is replaced when it comes back, so sessions move
    to a failed-over or rebalanced server in time. The original's name and default."""
    max_connections: PositiveInt | None = None
    """The most connections one process's pool for this destination holds (psycopg_pool's `max_size`); a write or commit
    that finds all busy waits `pool_acquire_timeout_secs`, then retries. Unset: 16. The original's name."""

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
    """The user's password (the original's key `pass`); never logged or shown."""
    database: str = Field(default="postgres", alias="db")
    """The database to connect to (the original's key `db`)."""
    batch_size: PositiveInt | None = None
    """Rows per merge statement for `postgres` and `postgres_aggregate` sinks that set no `batch_size` of their own;
    unset: a whole epoch's stream per merge round."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait, for `postgres` and `postgres_aggregate` sinks that set no `batch_flush_interval` of their
    own: the sources feeding them close epochs at least this often (`1s`, `500ms`; a bare number is milliseconds)."""


class DynamicTablePostgresSettings(PostgresSinkSettings):
    """``dynamic_table_backend.postgres``: the dynamic tables' connection, plus the defaults the original keeps
    there for the tables' own `schema`, `cache` and `cache_refresh_debounce_ms` fields."""

    dt_schema_name: str | None = Field(default=None, min_length=1)
    """The schema of Postgres dynamic tables that set no `schema` of their own (unset: `public`)."""

    cache_enabled: bool | None = None
    """Default of the Postgres dynamic tables' own `cache` (unset: `false`): with `true` every table with a
    `time_column` keeps its rows in each worker (a table without one is still asked every batch, without a warning)."""
    cache_refresh_debounce_ms: Milliseconds | None = None
    """Default of the Postgres dynamic tables' own `cache_refresh_debounce_ms` (unset: 1 s; 0: every batch)."""


def connection_key(node_name: str) -> str:
    """``Orders-Sink 1`` → ``orders_sink_1``: the key of a node's entry in ``postgres_sink_connections``."""
    return re.sub(r"[^a-z0-9]+", "_", node_name.lower()).strip("_")


class ClickHouseConnectionSettings(_Section):
    """A ClickHouse server over HTTP(S) when `url` is set, else the embedded engine (chdb) at `path`."""

    url: str | None = None
    """A ClickHouse server over HTTP(S) (`http://host:8123`); unset: the embedded ClickHouse engine (chdb), storing its
    data under `path`."""
    path: str = "./.streamling/clickhouse"
    """The embedded engine's data directory. The embedded engine opens one data path per process, and only in the
    driver; `clickhouse_source.path` and `clickhouse_sink.path` must then be the same directory."""
    user: str = "default"
    """The server's user."""
    password: SecretStr = SecretStr("")
    """The user's password; never logged or shown."""
    database: str = "default"
    """The database of tables named without one."""
    connect_timeout_sec: PositiveInt = 10
    """How long connecting to the server may take."""
    embedded_wait_sec: Seconds = 0.0
    """While another process holds the embedded engine's data path, a run waits up to this long for it (logging once
    which process holds it), then fails naming that process; 0 fails at once. Dagster runs wait 600 s unless this is
    set."""


class ClickHouseSourceSettings(ClickHouseConnectionSettings):
    compression: Literal["none", "gzip", "zstd", "lz4"] = "none"
    """Against a server: the encoding (`gzip`, `zstd`, `lz4`) the server compresses query answers with."""
    compression_level: int | None = Field(default=None, ge=0, le=9)
    """The original's gzip level of insert bodies; a source inserts nothing: accepted with a warning."""
    page_size: PositiveInt = 100_000
    """Rows per page, and so per epoch, of a ClickHouse source."""
    sort_key_range: PositiveInt = 1_000_000
    """The first width of a range of the first sort key (numbers: units; dates: days; date-times: seconds); halved while
    a range holds more than a page, doubled after sparse ones. `block_range` is the original's older name."""
    query_timeout_sec: Seconds = 60.0
    """ClickHouse's `max_execution_time` for each page and count query. A range that takes longer is read again at half
    the width (logged as a warning); a page that cannot shrink (one sort-key value, or a table paged by its full sort
    key) fails the run with a retriable error naming the setting."""

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
    """The inserts' wire compression against a server (`none`, `gzip`, `zstd`, `lz4`), for ClickHouse sinks without
    their own `compression`; the embedded engine has no wire."""
    compression_level: int = Field(default=6, ge=0, le=9)
    """Its level (0 to 9), for ClickHouse sinks without their own `compression_level`."""
    batch_size: PositiveInt | None = 100_000
    """Rows per insert for ClickHouse sinks without their own `batch_size`; null: the whole epoch."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait, for ClickHouse sinks without their own `batch_flush_interval`: the sources feeding them
    close epochs at least this often."""
    retry_timeout_sec: Seconds = 600.0
    """How long a ClickHouse sink waits out a server it cannot reach (a restart, a failover) before the run fails with a
    retriable error; the epoch is not acknowledged meanwhile."""

    @field_validator("compression", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None or value is False or (isinstance(value, str) and not value.strip()):
            return "none"
        return value.strip().lower() if isinstance(value, str) else value


class DynamicTableBackendSettings(_Section):
    max_batch_size: PositiveInt = 1000
    """Distinct values per dynamic-table lookup query."""
    cache_ttl_ms: Milliseconds = 0
    """How long an executor may reuse a lookup answer, present or absent; 0 (off) asks the table every batch, so outside
    inserts show at once."""
    postgres: DynamicTablePostgresSettings | None = None
    """The connection of Postgres dynamic tables. Each field left out comes from `postgres_sink`; a node's own
    `postgres_sink_connections.<node>` entry wins over both. Unset: `postgres_sink` itself."""


class ExternalHttpHandlerSettings(_Section):
    """Requests of `handler` transforms and `webhook` sinks (``STREAMLING__EXTERNAL_HTTP_HANDLER__…``)."""

    trigger_max_count: PositiveInt = 2000
    """Rows per request of `handler` transforms and `webhook` sinks in batched mode; a node's `batch_size` overrides
    it."""
    buffer_size: PositiveInt = 25
    """Requests in flight at once per Spark task (each Python worker sends its partition's requests concurrently, up to
    this many)."""
    timeout_sec: Seconds = 30.0
    """One attempt's limit: connect, send and read the whole answer. A timeout is retried."""
    max_retries: int = Field(default=10, ge=0)
    """A request that failed retriably (transport error, timeout, 408, 429, 5xx) is tried again at most this many
    times."""
    retry_timeout_sec: Seconds = 300.0
    """No retry starts later than this after a request's first attempt; the retries are then exhausted."""
    retry_backoff_sec: Seconds = 0.5
    """The wait before the first retry, doubling per retry up to `retry_backoff_max_sec`, with jitter (drawn from the
    upper half). A `Retry-After` header (seconds or an HTTP date) replaces it."""
    retry_backoff_max_sec: Seconds = 30.0
    """The longest wait between two retries."""
    operator_timeout_sec: Seconds = 300.0
    """The most one Spark task of a `handler` or `webhook` may spend on an epoch's requests (its partition's, from the
    first request to the last answer, retries included). Past it the task fails with a retriable error: `handler
    transform 'x': the requests of one Spark task took longer than external_http_handler.operator_timeout_sec (300s);
    …`."""

    @field_validator("operator_timeout_sec")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value


class ScriptTransformSettings(_Section):
    """Defaults for script transforms; a transform's own fields win."""

    time_limit_ms: Milliseconds = 10_000
    """The sandbox's wall-clock limit for one batch (a loop that never ends fails the pipeline)."""
    memory_limit_mb: PositiveInt = 256
    """The sandbox's memory cap in MB: the script's heap plus one batch in and out."""
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
    """The OpenTelemetry collector's URL: `http://collector:4318/v1/metrics` for the HTTP protocols (a URL without a
    path gets `/v1/metrics`), `http://collector:4317` for grpc. Anything that is not an `http(s)://` URL, such as the
    default `none`, turns export off (a value other than `none` or empty is also logged as a warning).
    `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` overrides it (and `OTEL_EXPORTER_OTLP_ENDPOINT`, a base URL)."""
    endpoint_protocol: OtlpProtocol = "http/protobuf"
    """The OTLP protocol (empty, as in the original's defaults: `http/protobuf`); `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`
    or `OTEL_EXPORTER_OTLP_PROTOCOL` override it."""
    batch_interval_secs: Seconds = 30.0
    """How often the metrics are exported (and once more when the run ends)."""
    export_timeout_secs: Seconds = 10.0
    """The longest one export may take; a slow or absent collector delays only the exporter's own thread."""
    global_tags: dict[str, str] = Field(default_factory=dict)
    """Tags on every metric: `"environment:production,image_tag:v1.0.0"` (or a mapping in a config file); keys follow
    the `telemetry.labels` rules."""
    metric_deny_list: list[str] = Field(default_factory=list)
    """Comma-separated regular expressions (or a list); a metric whose name matches one anywhere is not exported
    (`_delta$` drops `output_rows_delta`; anchor with `^…$` for exact names)."""

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
    """Rows kept per node."""
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
    """Where positions, leases and epochs are kept: `InMemory`, `Sqlite` or `Postgres`, case-insensitive."""
    sqlite: SqliteStateSettings = Field(default_factory=SqliteStateSettings)
    """The `Sqlite` state backend."""
    postgres: PostgresStateSettings = Field(default_factory=PostgresStateSettings)
    """The `Postgres` state backend's connection; the schema `streamling` and its tables are created on start."""
    lease_ttl_sec: Seconds = 30.0
    """How long a run's lease on its pipeline outlives its last renewal (renewals every sixth of it; at least 1 s). A
    run whose holder stopped renewing waits this long; a holder that cannot renew for this long stops."""

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
    """Plugins to load besides installed packages' `streamling.plugins` entry points: a `.py` file, a package directory,
    or a directory of them (several joined by `:`). They are shipped to Spark's workers."""
    preprocessor_ids: list[str] = Field(default_factory=list)
    """Preprocessors (`<namespace>.<name>`) that rewrite every pipeline definition, in this order, before it is
    validated; a list, or comma-separated in the variable."""
    preprocessor_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """A preprocessor's options (a mapping, validated by its options model):
    `STREAMLING__PLUGIN__PREPROCESSOR_OPTIONS='{"basic_plugin.cap_rows": {"limit": 4000}}'`."""
    side_output_ids: list[str] = Field(default_factory=list)
    """Side outputs (`<namespace>.<name>`) attached to every source of every pipeline, one instance per source (node
    `<source>.<id>`), seeing the source's batches and flushed and committed with its epochs; a list, or comma-separated
    in the variable. A pipeline can also declare a side output as a transform node with `from:`."""
    side_output_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """A side output's options (a mapping, validated by its options model)."""
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
    """What a run does after a failure that is not the user's own (a lost or late Spark Python worker, a failed Spark
    task, an outage that outlived its patience, an internal error): start again from its last committed epochs, as
    Flink's restart strategies do; `none` fails at once. The user's own errors (bad SQL, a type mismatch, a record that
    does not decode without a dead-letter target, an invalid pipeline) and a lost lease always fail at once. Each
    restart is one WARNING line, `pipeline 'orders' failed; restarting from its last committed epochs in 2.0s (restart
    2; failure 2 of at most 5 within 600s): <the cause>`, and one count of the `restarts` metric; the engine's `GET
    /runs` shows `restarts` and `last_error`."""
    initial_backoff_sec: Seconds = 1.0
    """The wait before the first restart (every restart's with `fixed-delay`)."""
    max_backoff_sec: Seconds = 60.0
    """The longest wait before a restart."""
    backoff_multiplier: float = Field(default=2.0, ge=1.0)
    """Each earlier failure within the window multiplies the wait by this (`exponential-delay`)."""
    jitter_factor: float = Field(default=0.1, ge=0.0, le=1.0)
    """The wait varies by up to this fraction either way, so restarts of many runs do not come back in lockstep."""
    max_failures: PositiveInt = 5
    """More than this many failures within `failure_window_sec` end the run with the last one (exit 1)."""
    failure_window_sec: Seconds = 600.0
    """Failures older than this count no more, so the backoff starts small again."""

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
    """Run every `*.yaml`, `*.yml` and `*.json` file of this directory as desired state (also `streamling serve
    --pipelines DIR`)."""
    pipelines_poll_sec: Seconds = 2.0
    """How often the directory is looked at for new, changed and removed files."""
    max_starting_runs: PositiveInt = 2
    """Runs that start (validate, plan, open their sources) at once; later submissions wait, in state `queued`, in the
    order they were submitted."""
    run_retention_sec: Seconds = 900.0
    """How long a finished run's record (state, error, log) stays readable over the API."""
    task_slots_per_core: PositiveInt = 4
    """Spark task slots per core when `spark.master` is `local[*]`: the engine runs `local[cores * this]`, since an
    epoch's task mostly waits on I/O (the broker, a sink). A master naming its slots (`local[2]`, a cluster) is used as
    given."""
    token: SecretStr | None = None
    """The engine API's token; unset: one is generated at the engine's first start into `token_file`, readable by its
    owner only. `streamling submit` and the Dagster resource read the same setting or file."""
    token_file: str | None = None
    """Where the generated token is kept (unset: `~/.streamling/engine-<port>.token`, `$STREAMLING_HOME` instead of
    `~/.streamling`)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Names (`host` or `host:port`) the API may be reached under besides the address it listens on; any other `Host`
    header is refused (DNS rebinding)."""

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


class PrintSinkSettings(_Section):
    sample_every: PositiveInt = 1
    """Global sampling for print sinks: rows `1, k+1, 2k+1, …` are printed. A sink's own `sample_every` wins over it."""
    num_records_before_stop: PositiveInt | None = None
    """The original's print-sink stop: a print sink that has written this many rows requests the graceful stop the
    global `num_records_before_stop` requests for any sink (which wins when both are set); a print sink's own
    `num_records_before_stop` wins over both."""


class SparkSettings(_Section):
    master: str = "local[*]"
    """Any Spark master URL. When it is not local, the executors get the packed environment of
    `spark.environment_archive`, or else the `streamling` package as a zip (then they need its dependencies
    installed)."""
    app_name: str = "streamling"
    """The Spark application name."""
    checkpoint_root: str = "./.streamling/checkpoints"
    """Not used any more: epochs are planned by the engine, not by Spark's streaming checkpoints (the state backend
    always was the only record of positions). Accepted so that configs setting it still load."""
    shuffle_partitions: PositiveInt = 4
    """`spark.sql.shuffle.partitions`."""
    class_archive: bool = True
    """Start the driver's JVM from a class-data-sharing archive of Spark's classes (a JVM + session start ~2 s shorter).
    `./dev setup` builds it (`python -m streamling.class_archive_build`); otherwise the first run that finds it missing
    builds it in the background after it exits. It lives in `<venv>/share/streamling` (`$STREAMLING_CACHE_DIR`
    overrides), named for the Java binary, the pyspark version and the class path, so an upgrade of either builds a
    new one."""
    environment_archive: str | None = None
    """On a cluster master, the Python environment the executors run: a path to the archive `streamling package` built,
    or `auto` (built into `<venv>/share/streamling/environments` when anything that goes in it changed; ~10 s, 195 MB).
    It is shipped with `spark.archives` (after any of your own) and `spark.pyspark.python` points into it, so the
    workers need only Java, Spark and the same CPython at the same path. The driver's JVM then starts in a folder of the
    engine's cache (where that relative `bin/python` is this venv's, for the Python Spark runs on the driver), so
    relative paths in `spark.archives`, `spark.files`, `spark.jars`, `spark.submit.pyFiles`, `spark.eventLog.dir`,
    `spark.sql.warehouse.dir` and `spark.local.dir` are made absolute against the run's working directory first. `auto`
    archives nobody used for 7 days are deleted when a new one is packed. A local master ignores the setting."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration. Spark keys are case-sensitive, so set them in a config file, or as one JSON map in
    `STREAMLING__SPARK__CONF` (`'{"spark.eventLog.enabled": "true"}'`), rather than one environment variable per key,
    whose names are lowercased. `spark.driver.extraJavaOptions` is added after the engine's own driver JVM options, so a
    flag given here wins: the engine sets `-XX:CompileThresholdScaling=5` (less JIT work on code that runs a few times;
    about a quarter of a bounded run's JVM CPU) and, for a driver heap (`spark.driver.memory`) of at most 2 GB, the
    serial collector (half the resident memory of G1); a collector named here replaces it. In local mode the engine also
    turns on `spark.python.unix.domain.socket.enabled` (Python workers and Arrow transfers talk to the JVM over Unix
    domain sockets, ~50 ms less per epoch than loopback TCP); `spark.conf` may turn it off."""

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


SecurityProtocol = Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]


class KafkaConnectionSettings(_Section):
    brokers: str = "localhost:9092"
    """The bootstrap brokers, `host:port[,host:port…]`."""
    security_protocol: SecurityProtocol = "plaintext"
    """librdkafka's `security.protocol`."""
    sasl_mechanism: str | None = None
    """librdkafka's `sasl.mechanism`; the SASL settings apply when the protocol contains `sasl`."""
    sasl_username: str | None = None
    """The SASL user name."""
    sasl_password: SecretStr | None = None
    """The SASL password; never logged or shown."""
    schema_registry_url: str = "http://localhost:18081"
    """The Confluent-compatible Schema Registry of Avro topics."""
    schema_registry_username: str | None = None
    """The Schema Registry's basic-auth user."""
    schema_registry_password: SecretStr | None = None
    """The Schema Registry's basic-auth password; never logged or shown."""
    client_id: str | None = None
    """librdkafka's `client.id`."""
    unavailable_timeout_sec: Seconds = 300.0
    """How long an unreachable Kafka broker or Schema Registry is waited out (no new epochs, reads and deliveries held)
    before the run fails with a retriable error."""

    @field_validator("security_protocol", mode="before")
    @classmethod
    def _lower_protocol(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class KafkaSourceSettings(KafkaConnectionSettings):
    consumer_group_id: str | None = None
    """With it set, positions are also committed to the consumer group `<consumer_group_id>-<source name>`, and a
    partition with no position in the state backend starts from the group's committed offset."""
    lag_report_interval_ms: Milliseconds = Field(default=30_000, ge=0)
    """How often each Kafka source logs its lag at INFO: `kafka source 'src' lag on topic 't': 120 records after the
    committed offsets (partition 0: 100, partition 1: 20)`, the high watermarks minus the positions last committed to
    the state backend. With metrics or the admin API on, the same figures are the `consumer_lag` metric per partition
    and the source's `backlog` in `/api/positions` (`source_status` and the Dagster observations give them on demand
    too). `0` turns it off."""
    consumer_fetch_timeout_sec: Seconds = 1.0
    """How long one poll of a reading task's consumer waits for records before the task looks at its deadlines again
    (the broker probe, the stall watchdog)."""
    stall_watchdog_timeout_sec: Seconds = 60.0
    """A reading task whose offset range is not finished and that gets no record for this long fails the epoch with a
    retriable error (`topic 't' partition 0: no records after offset 41 for 60s, expected up to 99`), and the run
    restarts from its committed positions; while the broker is unreachable the longer `unavailable_timeout_sec` applies.
    `0` turns the watchdog off."""

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
    """The original's WebAssembly runtime file; accepted with a warning (the sandbox's limits are
    `script_transform.*`)."""


class TestSettings(_Section):
    """The original's ``test_settings``: knobs of its own end-to-end tests (telemetry assertions against a
    Prometheus). Nothing here reads them; accepted with a warning whenever the section is given."""

    __test__ = False  # not a pytest class

    telemetry_assertions_enabled: bool = True
    """The original's test knob; accepted with a warning."""
    prometheus_max_attempts: int = Field(default=30, ge=0)
    """The original's test knob; accepted with a warning."""
    prometheus_sleep_ms: Milliseconds = 500
    """The original's test knob; accepted with a warning."""


class BackfillRange(_Section):
    """Job mode over part of the data, read from the start of the range: ClickHouse sources and a hybrid's
    bounded phases read rows whose first sort key is in [start, end); bounded Kafka sources read the records
    whose offsets (integers) or message times (dates, date-times) are in [start, end)."""

    start: int | datetime
    """The range's first value, inclusive: an integer (a sort-key value, a Kafka offset), or a date or date-time (a date
    is its midnight, no zone is UTC)."""
    end: int | datetime
    """The range's end, exclusive; the same kind as `start`."""
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
    """The namespace in the state backend. It must be unique per pipeline deployment that shares a backend."""
    pipeline_definition_location: str | None = None
    """The pipeline file to use when the CLI gets none."""
    engine_url: str | None = None
    """A warm engine (`streamling serve`) that `streamling submit` and the Dagster ops submit pipelines to."""
    job_mode: bool = False
    """All sources must be bounded. The run ends with exit 0 after the final epoch is committed."""
    backfill_range: BackfillRange | None = None
    """Job mode over part of the data: `{start, end, column?}`, `start` inclusive, `end` exclusive
    (`STREAMLING__BACKFILL_RANGE__START=1000`, `…__END=2000`). Integers restrict ClickHouse sources and a hybrid's
    bounded phases to that range of the table's first sort key, and bounded Kafka sources to those offsets in every
    partition; dates or date-times restrict a `Date`/`DateTime` first sort key (a date counts when its midnight is in
    the range, in the range's zone), Kafka message times (the first record at or after each bound, by the broker's time
    index) and a bounded file source's modification times. Generators and other sort keys are refused by name at
    validation. Needs `job_mode`. Use a namespace (`application_id`) of its own per range: positions resume within
    it."""
    record_batch_size: PositiveInt = 250_000
    """The most rows one source puts into one epoch (a Kafka source's first epoch in a run takes at most 10,000 of a
    backlog, from as few partitions as possible, so its first rows arrive sooner; a backlog's later epochs come from as
    many partitions as the epoch has read tasks, most pending first). The generator's `record_batch_size` overrides it
    per source."""
    record_batch_interval_ms: Milliseconds = 200
    """How often sources are polled for new data (the Spark trigger interval)."""
    checkpoint_interval_sec: Seconds = 5.0
    """A trickling source closes an epoch this long after its previous one. A backlog closes full epochs
    (`record_batch_size`) back to back, without waiting."""
    log_format: Literal["text", "json"] = "text"
    """`text`, or `json`: one JSON object per line on stderr."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """`debug` shows every epoch (`Epoch finalized: N`) and the tracebacks of errors that are not the user's."""
    num_records_before_stop: PositiveInt | None = None
    """A graceful stop once any sink has written this many rows in the run: the log says `Stopping after N records`, the
    epoch that reached it (and one Spark had already handed over) commits, nothing after it runs, and the process exits
    0 with the committed positions covering exactly the rows written."""
    enforce_primary_keys: bool = False
    """A source without a `primary_key`, and a sink with none of its own or upstream: `false` lists it as a warning
    (`--validate`'s `warnings`, logged at start), `true` fails validation. Sinks that need a key (Kafka, Postgres,
    ClickHouse) always fail without one."""
    internal_buffer_size: PositiveInt | None = None
    """Accepted for the original's config files, with one warning at start: there are no channels between operators to
    size (epochs go on whole; an epoch's size is `record_batch_size`)."""
    drain_policy: Literal["auto", "drain", "fast"] | None = None
    """Accepted for the original's config files: every stop drains (the in-flight epoch commits). `drain` gives no
    warning, `auto` and `fast` one at start."""
    admin_api_port: int | None = Field(default=None, ge=0, le=65535)
    """The admin API and the pipeline page on this port (the original's default was 3000; here it is off until set). `0`
    is off too. A port in use fails the run at start: `admin API: cannot listen on 127.0.0.1:3000 (admin_api_host,
    admin_api_port): Address already in use`."""
    admin_api_host: str = "127.0.0.1"
    """The address the admin API listens on; `0.0.0.0` for Kubernetes probes and browsers from other machines (the live
    rows are your data: open it only where they may be seen)."""
    admin_api_token: SecretStr | None = None
    """The admin API's token; unset: generated at the first start into `~/.streamling/admin-<port>.token`, readable by
    its owner only, where `streamling inspect` finds it."""
    admin_api_allowed_hosts: list[str] = Field(default_factory=list)
    """Names besides its address that the admin API's `Host` header may carry (any other is refused)."""
    source_stall_timeout_sec: Seconds = 300.0
    """The admin API's `/health` fails once a source has had an epoch in flight, or records waiting (a known backlog)
    with nothing committed, for this long."""
    prometheus_metrics_enabled: bool = True
    """The admin API also serves the metrics in the Prometheus text format at `/metrics`."""
    live_data_inspect_enabled: bool = False
    """Keep the latest rows seen at every node for the admin API's live inspection. Needs `admin_api_port` (a warning at
    start otherwise)."""
    live_data_inspect: LiveDataInspectSettings = Field(default_factory=LiveDataInspectSettings)
    """What live inspection keeps (with `live_data_inspect_enabled`)."""
    open_telemetry_metrics: OpenTelemetryMetricsSettings = Field(default_factory=OpenTelemetryMetricsSettings)
    """Export of the per-node metrics to an OpenTelemetry collector."""
    state_backend: StateBackendSettings = Field(default_factory=StateBackendSettings)
    """Where positions, epochs and run leases are kept."""
    print_sink: PrintSinkSettings = Field(default_factory=PrintSinkSettings)
    """Defaults of print sinks."""
    kafka_source: KafkaSourceSettings = Field(default_factory=KafkaSourceSettings)
    """The connection of Kafka sources (and of a hybrid's stream)."""
    kafka_sink: KafkaConnectionSettings = Field(default_factory=KafkaConnectionSettings)
    """The connection of Kafka sinks and Kafka dead-letter topics."""
    spark: SparkSettings = Field(default_factory=SparkSettings)
    """The Spark session."""
    postgres_sink: PostgresSinkSettings = Field(default_factory=PostgresSinkSettings)
    """The connection of `postgres` and `postgres_aggregate` sinks, their Postgres dead-letter tables, and Postgres
    dynamic tables unless `dynamic_table_backend.postgres` is set."""
    postgres_sink_connections: dict[str, PostgresSinkSettings] = Field(default_factory=dict)
    """Per-node overrides of `postgres_sink`, field by field. `<node>` is the node name lowercased, every other run of
    characters turned into `_` and trimmed: sink `Orders-Sink 1` reads
    `STREAMLING__POSTGRES_SINK_CONNECTIONS__ORDERS_SINK_1__HOST`."""
    dynamic_table_backend: DynamicTableBackendSettings = Field(default_factory=DynamicTableBackendSettings)
    """Dynamic tables' lookups and their Postgres connection."""
    clickhouse_source: ClickHouseSourceSettings = Field(default_factory=ClickHouseSourceSettings)
    """The connection and paging of ClickHouse sources (a server over HTTP(S) when `url` is set, else the embedded
    engine)."""
    clickhouse_sink: ClickHouseSinkSettings = Field(default_factory=ClickHouseSinkSettings)
    """The connection of ClickHouse sinks, and defaults of their own fields."""
    external_http_handler: ExternalHttpHandlerSettings = Field(default_factory=ExternalHttpHandlerSettings)
    """Requests of `handler` transforms and `webhook` sinks."""
    http_secret_header: dict[str, str] = Field(default_factory=dict)
    """The header name a node with `secret_name: <name>` sends: `STREAMLING__HTTP_SECRET_HEADER__<NAME>=Authorization`.
    Names are case-insensitive; values are taken literally (never parsed as JSON)."""
    http_secret_value: dict[str, SecretStr] = Field(default_factory=dict)
    """That header's value: `STREAMLING__HTTP_SECRET_VALUE__<NAME>='Bearer …'`. Taken literally (never parsed as JSON),
    never logged or shown (`'***'` in configuration errors)."""
    script_transform: ScriptTransformSettings = Field(default_factory=ScriptTransformSettings)
    """Defaults of `script` transforms; a transform's own fields win."""
    wasm_script: WasmScriptSettings = Field(default_factory=WasmScriptSettings)
    """The original's `wasm_script` section: its one setting chose the WebAssembly runtime file of its JavaScript
    sandbox; the sandbox here is the one the package ships, so it is accepted with a warning (`wasm_script: {}` is
    silent)."""
    test_settings: TestSettings | None = None
    """The original's end-to-end test knobs (telemetry assertions against a Prometheus). Nothing here reads them;
    accepted with a warning whenever the section is given."""
    plugin: PluginSettings = Field(default_factory=PluginSettings)
    """Where plugins come from besides installed distributions, and which preprocessors and side outputs run."""
    restart_strategy: RestartStrategySettings = Field(default_factory=RestartStrategySettings)
    """What a run does after a failure that is not the user's own: start again from its last committed epochs after
    a backoff, at most `max_failures` times within `failure_window_sec`."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    """The warm engine, `streamling serve`: read from the engine's own config file and environment; a submitted run
    brings its own settings, and these are not among them."""
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
