"""The original Streamling's embedded default configuration (its ``crates/streamling-config/default_config.yaml``,
which the original's README says is compiled into the binary and which users copy as ``config.yaml``), key for key
and value for value, as the tests that check that such a copy starts unchanged write it out.

Beyond the settings its README documents, it carries spellings and sections of its own: ``db`` and ``password``
for the state backend's and the dynamic tables' connections, ``cache_enabled``, ``postgres_sink``'s
``batch_flush_interval``, an empty ``endpoint_protocol``, ``wasm_script: {}``, ``plugin: {}`` and ``test_settings``.
"""

from __future__ import annotations

ORIGINAL_DEFAULT_CONFIG = """\
application_id: "local_app_v1"
log_format: "text"
pipeline_definition_location: "./pipeline.yaml"
record_batch_interval_ms: "100"
record_batch_size: "1000"
internal_buffer_size: "10"
checkpoint_interval_sec: "5"
state_backend:
  backend_type: "Sqlite"
  sqlite:
    database_path: "./state.db"
  postgres:
    host: "localhost"
    port: 5432
    db: "streamling"
    user: "graph-node"
    password: ""
    sslmode: "require"
dynamic_table_backend:
  postgres:
    host: "localhost"
    port: 5432
    db: "streamling"
    user: "graph-node"
    password: ""
    sslmode: "require"
    cache_enabled: false
external_http_handler:
  trigger_max_count: "2000"
  operator_timeout_sec: "300"
  buffer_size: "25"
wasm_script: {}
plugin: {}
kafka_source:
  brokers: "localhost:9092"
  security_protocol: "plaintext"
  sasl_mechanism:
  sasl_username:
  sasl_password:
  schema_registry_url: "http://localhost:18081"
  schema_registry_username:
  schema_registry_password:
  consumer_group_id:
  client_id:
  lag_report_interval_ms: "60000"
kafka_sink:
  brokers: "localhost:9092"
  security_protocol: "plaintext"
  sasl_mechanism:
  sasl_username:
  sasl_password:
  schema_registry_url: "http://localhost:18081"
  schema_registry_username:
  schema_registry_password:
  client_id:
clickhouse_source:
  url: "http://localhost:8123"
  user: default
  password: ""
  database: default
  page_size: "10000000"
clickhouse_sink:
  url: "http://localhost:8123"
  user: default
  password: ""
  database: default
  batch_size: 100000
  batch_flush_interval: "1s"
print_sink:
  sample_every: "1"
postgres_sink:
  host: 127.0.0.1
  port: 5432
  user: "graph-node"
  pass: ""
  db: "postgres"
  sslmode: "disable"
  batch_flush_interval: "1s"
  batch_size: 100
open_telemetry_metrics:
  ingestion_endpoint: "none"
  endpoint_protocol: ""
  batch_interval_secs: 15
  global_tags: ""
  metric_deny_list: "kafka_consumer.msg_decode_latency,kafka_producer.msg_encode_latency"
test_settings:
  telemetry_assertions_enabled: true
  prometheus_max_attempts: 30
  prometheus_sleep_ms: 500
live_data_inspect_enabled: false
live_data_inspect:
  records_per_topology_node: 15
  refresh_in_secs: 30
admin_api_port: 3000
"""

ORIGINAL_DEFAULT_WARNINGS = [
    "setting internal_buffer_size = 10 has no effect here: operators hand each epoch on as a whole Spark DataFrame, "
    "with no channel in between; an epoch's size is record_batch_size",
    "setting test_settings has no effect here: it configured the original's own end-to-end tests (telemetry "
    "assertions against a Prometheus)",
]
"""What a run on that copy warns about at start, once each: the two settings that map to nothing here."""
