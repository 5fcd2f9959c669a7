"""Node fields of pipelines written for the original Streamling: accepted by the structural validation, and
what the plan makes of them without Spark (start-up warnings, epoch pacing, primary-key checks)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from streamling.config import load_settings
from streamling.plugin import ArrowSink, ArrowTransform, Epoch, Options, Plugin
from streamling.plugins import loader
from streamling.plugins.registry import REGISTRY
from streamling.runtime.executor import PipelineRunner
from streamling.runtime.plan import Plan
from streamling.topology.pipeline import load_pipeline

SRC = "src: {type: generator, rows: 10, primary_key: id}"
URL = "http://127.0.0.1:9/h"


def loaded(text: str):
    pipeline, report = load_pipeline(textwrap.dedent(text))
    return pipeline, report.errors


def plan(text: str, tmp_path: Path, **env: str) -> Plan:
    pipeline, errors = loaded(text)
    assert errors == []
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    settings = load_settings(config=str(config), environ={f"STREAMLING__{k}": v for k, v in env.items()})
    return Plan(pipeline, settings)


EVENT_TIME = "telemetry: {labels: {team: a}, event_time: {column: ts, unit: seconds}}"
SOURCES = [
    "{type: kafka, topic: t, parallelism: 4}",
    "{type: kafka, topic: t, batch_flush_interval: 500ms, skip_schema_resolution: true,"
    " skip_schema_resolution_for_reader_schema_ids: [3, 4]}",
    f"{{type: kafka, topic: t, {EVENT_TIME}}}",
    f"{{type: clickhouse, table_name: t, {EVENT_TIME}}}",
    "{type: file, path: /tmp/x, format: jsonl, mode: {type: continuous}, telemetry: {event_time: {column: ts}}}",
    "{type: hybrid, bounded_sources: [{source_type: clickhouse, table_name: t}],"
    " unbounded_source: {source_type: kafka, topic: t, skip_schema_resolution: false,"
    " skip_schema_resolution_for_reader_schema_ids: [1]}}",
    "{type: generator, rows: 10, parallelism: 3}",
    "{type: clickhouse, table_name: t, parallelism: 2}",
    "{type: hybrid, parallelism: 2, bounded_sources: [{source_type: clickhouse, table_name: t}],"
    " unbounded_source: {source_type: kafka, topic: t},"
    " offset_table: {topic_name: t, table_name: db.offsets, topic_column: topic, partition_column: p,"
    " offset_column: o}}",
]
TRANSFORMS = [
    "{type: sql, primary_key: id, sql: SELECT * FROM src, parallelism: 4}",
    f"{{type: handler, from: src, primary_key: id, url: '{URL}', parallelism: 2, batch_size: 100,"
    " batch_flush_interval: 1s}",
    "{type: script, from: src, language: javascript, primary_key: id, script: 'function f(r) { return r; }',"
    " parallelism: 2, batch_size: 50, batch_flush_interval: 500ms}",
    "{type: dynamic_table, backend_type: Postgres, backend_entity_name: w, column: addr, time_column: updated_at,"
    " cache: true, cache_refresh_debounce_ms: 5000}",
    "{type: dynamic_table, backend_type: Postgres, backend_entity_name: w2, from: src, column: name}",
    f"{{type: sql, primary_key: id, sql: SELECT * FROM src, {EVENT_TIME}}}",
    f"{{type: dynamic_table, backend_type: in-memory, backend_entity_name: w3, {EVENT_TIME}}}",
]
SINKS = [
    "{type: print, from: src, parallelism: 2, batch_size: 100, batch_flush_interval: 1s}",
    "{type: blackhole, from: src, parallelism: 2, batch_size: 100, batch_flush_interval: 1s}",
    f"{{type: webhook, from: src, url: '{URL}', parallelism: 3, batch_size: 10, batch_flush_interval: 2s}}",
    "{type: kafka, from: src, topic: out, parallelism: 2, batch_size: 100, batch_flush_interval: 5ms}",
    "{type: postgres, from: src, table: t, parallelism: 2, batch_size: 100, batch_flush_interval: 1s}",
    "{type: postgres_aggregate, from: src, landing_table: l, agg_table: a, aggregate: {n: {fn: count}},"
    " parallelism: 2, batch_size: 100, batch_flush_interval: 1s}",
    "{type: clickhouse, from: src, table: t, parallelism: 2, batch_size: 1000, batch_flush_interval: 1s,"
    " version_column_name: amount, deduplicate: false, schema_overrides: {name: LowCardinality(String)}}",
    "{type: print, from: src, sample_every: 2, num_records_before_stop: 5}",
    "{type: memory, from: src, exclude_gs_op: true, parallelism: 2, primary_key: id, batch_size: 10,"
    " batch_flush_interval: 1s}",
    "{type: postgres_aggregate, from: src, landing_table: l, agg_table: a, aggregate: {n: {fn: count}},"
    " deduplicate: false}",
    "{type: postgres, from: src, table: t, schema: public, on_conflict: upsert}",
    f"{{type: webhook, from: src, url: '{URL}', {EVENT_TIME}}}",
]


@pytest.mark.parametrize("node", SOURCES)
def test_source_fields_of_the_original_are_accepted(node: str) -> None:
    assert (
        loaded(f"""
        sources:
          s: {node}
        sinks:
          out: {{type: blackhole, from: s}}
        """)[1]
        == []
    )


@pytest.mark.parametrize("node", TRANSFORMS)
def test_transform_fields_of_the_original_are_accepted(node: str) -> None:
    assert (
        loaded(f"""
        sources:
          {SRC}
        transforms:
          t: {node}
        sinks:
          out: {{type: blackhole, from: {"src" if "dynamic_table" in node else "t"}}}
        """)[1]
        == []
    )


@pytest.mark.parametrize("node", SINKS)
def test_sink_fields_of_the_original_are_accepted(node: str) -> None:
    assert (
        loaded(f"""
        sources:
          {SRC}
        sinks:
          out: {node}
        """)[1]
        == []
    )


def test_schema_overrides_is_the_original_s_spelling_of_schema_override() -> None:
    pipeline, errors = loaded(f"""
        sources:
          {SRC}
        sinks:
          a: {{type: clickhouse, from: src, table: a, schema_overrides: {{name: 'LowCardinality(String)'}}}}
          b: {{type: clickhouse, from: src, table: b, schema_override: {{name: String}}, schema_overrides: {{}}}}
        """)
    assert errors == [
        "sink 'b' (type 'clickhouse'): give 'schema_override' or 'schema_overrides' (the same field), not both"
    ]
    pipeline, errors = loaded(f"""
        sources:
          {SRC}
        sinks:
          a: {{type: clickhouse, from: src, table: a, schema_overrides: {{name: 'LowCardinality(String)'}}}}
        """)
    assert pipeline is not None
    assert pipeline.nodes["a"].spec.schema_override == {"name": "LowCardinality(String)"}


def test_conflicting_fields_are_named() -> None:
    assert loaded("""
        sources:
          g: {type: generator, partitions: 2, parallelism: 3}
          h: {type: hybrid, bounded_sources: [{source_type: clickhouse, table_name: t}], offset_table: {topic_name: x}}
        sinks:
          a: {type: blackhole, from: g}
          b: {type: blackhole, from: h}
        """)[1] == [
        "source 'g' (type 'generator'): 'partitions' and 'parallelism' mean the same; give one",
        "source 'h' (type 'hybrid'): offset_table seeds the unbounded (Kafka) phase; it needs 'unbounded_source'",
    ]


def test_fields_that_map_to_nothing_here_warn_once_naming_node_field_and_meaning(tmp_path: Path) -> None:
    warnings = plan(
        f"""
        sources:
          {SRC}
        transforms:
          mem: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: m, time_column: t, cache: true}}
          pg: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: p, cache: true,
                cache_refresh_debounce_ms: 200}}
        sinks:
          p: {{type: print, from: src, parallelism: 2, batch_size: 100}}
          b: {{type: blackhole, from: src, parallelism: 4}}
          c: {{type: clickhouse, from: src, table: t, append_only_mode: false, version_column_name: amount,
              parallelism: 3}}
        """,
        tmp_path,
        INTERNAL_BUFFER_SIZE="10",
    ).warnings
    assert warnings == [
        "setting internal_buffer_size = 10 has no effect here: operators hand each epoch on as a whole Spark "
        "DataFrame, with no channel in between; an epoch's size is record_batch_size",
        "dynamic table 'mem': time_column = 't' has no effect here: an InMemory table is a set in driver memory, "
        "shipped to the workers when it changes",
        "dynamic table 'mem': cache = True has no effect here: an InMemory table is a set in driver memory, shipped "
        "to the workers when it changes",
        "dynamic table 'pg': cache = True has no effect here: the cache needs a time_column to find newer rows by; "
        "lookups query the table every batch",
        "dynamic table 'pg': cache_refresh_debounce_ms = 200 has no effect here: it applies only with cache: true "
        "and a time_column",
        "print sink 'p': parallelism = 2 has no effect here: the driver prints each epoch's rows in order; Spark's "
        "tasks compute them before that",
        "print sink 'p': batch_size = 100 has no effect here: each epoch's rows are printed when it is written; an "
        "epoch holds up to record_batch_size rows",
        "blackhole sink 'b': parallelism = 4 has no effect here: the rows are discarded by the Spark tasks that "
        "compute them, as many as the input has partitions; a repartition would only add a shuffle to what is "
        "measured",
        "clickhouse sink 'c': version_column_name = 'amount' has no effect here: with append_only_mode: false the "
        "table holds only current rows and has no version",
        "clickhouse sink 'c': parallelism = 3 has no effect here: the embedded engine takes one writer; each epoch "
        "is inserted by one stream",
    ]


@pytest.mark.parametrize(
    "node",
    [
        f"transforms: {{t: {{type: handler, from: src, primary_key: id, url: '{URL}', batch_flush_interval: 800ms}}}}",
        "transforms: {t: {type: script, from: src, language: javascript, primary_key: id,"
        " script: 'function f(r) { return r; }', batch_flush_interval: 800ms}}",
        "sinks: {w: {type: print, from: src, batch_flush_interval: 800ms}}",
        "sinks: {w: {type: blackhole, from: src, batch_flush_interval: 800ms}}",
        f"sinks: {{w: {{type: webhook, from: src, url: '{URL}', batch_flush_interval: 800ms}}}}",
    ],
)
def test_batch_flush_interval_makes_the_sources_feeding_the_node_close_epochs_that_often(
    node: str, tmp_path: Path
) -> None:
    text = f"sources:\n  {SRC}\n{node}\n"
    if not node.startswith("sinks"):
        text += "sinks:\n  out: {type: blackhole, from: t}\n"
    assert plan(text, tmp_path).source("src").settings.checkpoint_interval_sec == 0.8


def test_clickhouse_sink_batch_defaults_come_from_the_settings(tmp_path: Path) -> None:
    text = f"""
        sources:
          {SRC}
        sinks:
          own: {{type: clickhouse, from: src, table: a, batch_size: 10, batch_flush_interval: 2s}}
          default: {{type: clickhouse, from: src, table: b}}
        """
    p = plan(text, tmp_path, CLICKHOUSE_SINK__BATCH_SIZE="500", CLICKHOUSE_SINK__BATCH_FLUSH_INTERVAL="1500ms")
    own, default = p.operators["own"], p.operators["default"]
    assert (own.batch_size, own.flush_interval_sec) == (10, 2.0)  # type: ignore[attr-defined]
    assert (default.batch_size, default.flush_interval_sec) == (500, 1.5)  # type: ignore[attr-defined]
    assert p.source("src").settings.checkpoint_interval_sec == 1.5


KEYLESS = """
    sources:
      keyed: {type: generator, rows: 10, primary_key: id}
      bare: {type: generator, rows: 10}
    transforms:
      t: {type: sql, primary_key: id, sql: SELECT * FROM bare}
    sinks:
      a: {type: blackhole, from: t}
      b: {type: print, from: bare}
      c: {type: print, from: keyed}
    """


def test_missing_primary_keys_are_warnings_unless_enforced(tmp_path: Path) -> None:
    assert plan(KEYLESS, tmp_path).key_problems() == [
        "source 'bare' has no primary key; upserts and deletes downstream cannot be keyed (set primary_key, or "
        "enforce_primary_keys: true to make this an error)",
        "sink 'b' has no primary key of its own or upstream; upserts and deletes downstream cannot be keyed (set "
        "primary_key, or enforce_primary_keys: true to make this an error)",
    ]
    assert plan(KEYLESS, tmp_path, ENFORCE_PRIMARY_KEYS="true").key_problems() == [
        "source 'bare' has no primary key, which enforce_primary_keys requires; set primary_key",
        "sink 'b' has no primary key of its own or upstream, which enforce_primary_keys requires; set primary_key",
    ]


def test_event_time_is_checked_and_warns_naming_the_node(tmp_path: Path) -> None:
    assert loaded("""
        sources:
          s: {type: generator, rows: 1, telemetry: {event_time: {column: ts, unit: nanoseconds}}}
        sinks:
          out: {type: blackhole, from: s}
        """)[1] == [
        "source 's' (type 'generator'): field 'telemetry.event_time.unit': Input should be 'seconds', "
        "'milliseconds' or 'microseconds' (got 'nanoseconds')"
    ]
    warnings = plan(
        f"""
        sources:
          {SRC}
        sinks:
          out: {{type: blackhole, from: src, {EVENT_TIME}}}
        """,
        tmp_path,
    ).warnings
    assert warnings == [
        "blackhole sink 'out': telemetry.event_time = {'column': 'ts', 'unit': 'seconds'} has no effect here: the "
        "original's event-time watermark and lag metrics are not exported; a source's commit_lag is the age of its "
        "newest committed record (a Kafka record's own timestamp with include_metadata: true)"
    ]


SKIP = (
    "has no effect here: a record is decoded with its writer schema and resolved to the reader schema by Avro's "
    "resolution rules, which ignore documentation and other metadata (what the original's skip worked around); "
    "the writer schema is used as is when it equals the reader schema"
)


def test_skip_schema_resolution_warns_on_kafka_and_hybrid_sources(tmp_path: Path) -> None:
    warnings = plan(
        """
        sources:
          k: {type: kafka, topic: t, primary_key: id, skip_schema_resolution: true,
              skip_schema_resolution_for_reader_schema_ids: [3, 4]}
          plain: {type: kafka, topic: u, primary_key: id, skip_schema_resolution: false}
          h: {type: hybrid, primary_key: id, bounded_sources: [{source_type: clickhouse, table_name: t}],
              unbounded_source: {source_type: kafka, topic: t, skip_schema_resolution_for_reader_schema_ids: [7]}}
        sinks:
          a: {type: blackhole, from: k}
          b: {type: blackhole, from: plain}
          c: {type: blackhole, from: h}
        """,
        tmp_path,
    ).warnings
    assert warnings == [
        f"kafka source 'k': skip_schema_resolution = True {SKIP}",
        f"kafka source 'k': skip_schema_resolution_for_reader_schema_ids = [3, 4] {SKIP}",
        f"hybrid source 'h': unbounded_source.skip_schema_resolution_for_reader_schema_ids = [7] {SKIP}",
    ]


def test_kafka_source_batch_flush_interval_makes_it_close_epochs_that_often(tmp_path: Path) -> None:
    p = plan(
        """
        sources:
          k: {type: kafka, topic: t, primary_key: id, batch_flush_interval: 800ms}
          slow: {type: kafka, topic: u, primary_key: id, batch_flush_interval: 1h}
        sinks:
          a: {type: blackhole, from: k}
          b: {type: blackhole, from: slow}
        """,
        tmp_path,
    )
    assert p.source("k").settings.checkpoint_interval_sec == 0.8
    assert p.source("slow").settings.checkpoint_interval_sec == p.settings.checkpoint_interval_sec


def test_print_sink_num_records_before_stop_is_its_own_stop_limit(tmp_path: Path) -> None:
    text = f"""
        sources:
          {SRC}
        sinks:
          own: {{type: print, from: src, num_records_before_stop: 5}}
          other: {{type: print, from: src}}
        """

    def limits(**env: str) -> tuple[int | None, int | None]:
        p = plan(text, tmp_path, **env)
        runner = type("R", (), {"settings": p.settings, "plan": p})()
        return PipelineRunner._stop_limit(runner, "own"), PipelineRunner._stop_limit(runner, "other")  # type: ignore[arg-type]

    assert limits() == (5, None)
    assert limits(NUM_RECORDS_BEFORE_STOP="9") == (5, 9)
    assert limits(PRINT_SINK__NUM_RECORDS_BEFORE_STOP="7") == (5, 7)


def test_sinks_accepted_with_a_warning(tmp_path: Path) -> None:
    warnings = plan(
        f"""
        sources:
          {SRC}
        sinks:
          m: {{type: memory, from: src, exclude_gs_op: true, batch_size: 10}}
          agg: {{type: postgres_aggregate, from: src, landing_table: l, agg_table: a, aggregate: {{n: {{fn: count}}}},
                deduplicate: false}}
          agg2: {{type: postgres_aggregate, from: src, landing_table: l2, agg_table: a2, aggregate: {{n: {{fn: count}}}},
                 deduplicate: true}}
          pg: {{type: postgres, from: src, table: t, on_conflict: Upsert}}
          pg2: {{type: postgres, from: src, table: t2, on_conflict: NOTHING}}
        """,
        tmp_path,
    ).warnings
    assert warnings == [
        "memory sink 'm': type = 'memory' has no effect here: the original kept the rows in a store only its own "
        "tests could read; here they are evaluated and discarded, as by a blackhole sink",
        "memory sink 'm': batch_size = 10 has no effect here: nothing is buffered; each epoch is evaluated and "
        "dropped whole",
        "memory sink 'm': exclude_gs_op = True has no effect here: the rows are not kept",
        "postgres_aggregate sink 'agg': deduplicate = False has no effect here: the landing table holds one row per "
        "primary key and operation per epoch (a later row of the same key and operation replaces the earlier one), "
        "so each is counted once either way",
        "postgres sink 'pg': on_conflict = 'Upsert' has no effect here: it is read as 'update' (as in the original, "
        "only 'nothing' means ON CONFLICT DO NOTHING)",
    ]
    p = plan(
        f"""
        sources:
          {SRC}
        sinks:
          pg: {{type: postgres, from: src, table: t, on_conflict: Upsert}}
          pg2: {{type: postgres, from: src, table: t2, on_conflict: NOTHING}}
        """,
        tmp_path,
    )
    assert [p.operators[n].spec.on_conflict for n in ("pg", "pg2")] == ["update", "nothing"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "warning"),
    [
        ("name: orders", "top-level key 'name' = 'orders'"),
        ("version: 3", "top-level key 'version' = 3"),
        ("description: {text: d}", "top-level key 'description' = {'text': 'd'}"),
        ("apiVersion: 3", "top-level key 'apiVersion' = 3"),
    ],
)
def test_other_top_level_keys_are_ignored_with_a_warning(extra: str, warning: str) -> None:
    pipeline, report = load_pipeline(f"{extra}\nsources:\n  {SRC}\nsinks:\n  out: {{type: blackhole, from: src}}\n")
    assert pipeline is not None and report.errors == []
    assert report.warnings == [
        f"{warning} has no effect here: as in the original, a pipeline is its sources, transforms and sinks, and "
        "other top-level keys are ignored"
    ]


def test_a_misspelt_section_stays_an_error() -> None:
    _, report = load_pipeline(f"sources:\n  {SRC}\ntransfroms: {{}}\nsinks:\n  out: {{type: blackhole, from: src}}\n")
    assert report.errors == ["unknown top-level key 'transfroms'; expected sources, transforms, sinks"]


class _KeepOptions(Options):
    pass


class _Keep(ArrowTransform[_KeepOptions]):
    options_model = _KeepOptions

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return input_schema

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch


class _Drop(ArrowSink[_KeepOptions]):
    options_model = _KeepOptions

    def write(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        pass


class _OwnBatchOptions(Options):
    batch_size: int = 1


class _OwnBatch(_Keep):
    options_model = _OwnBatchOptions  # type: ignore[assignment]


loader.register(
    REGISTRY,
    Plugin(namespace="fieldaudit", operators={"keep": _Keep, "drop": _Drop, "own_batch": _OwnBatch}),
    "tests/unit/test_original_fields.py",
)


def test_plugin_transforms_and_sinks_take_the_original_s_batch_fields(tmp_path: Path) -> None:
    p = plan(
        f"""
        sources:
          {SRC}
        transforms:
          t: {{type: fieldaudit.keep, from: src, batch_size: 10, batch_flush_interval: 800ms}}
          own: {{type: fieldaudit.own_batch, from: src, batch_size: 3}}
        sinks:
          a: {{type: fieldaudit.drop, from: t, batch_size: 20, batch_flush_interval: 2s}}
          b: {{type: blackhole, from: own}}
        """,
        tmp_path,
    )
    assert p.source("src").settings.checkpoint_interval_sec == 0.8
    assert p.operators["own"].spec.options.batch_size == 3  # type: ignore[attr-defined]
    assert p.warnings == [
        "plugin 'fieldaudit.keep' (node 't'): batch_size = 10 has no effect here: a plugin is handed each epoch's "
        "rows as the Arrow batches of the Spark tasks that compute them (an epoch holds up to record_batch_size rows)",
        "plugin 'fieldaudit.drop' (node 'a'): batch_size = 20 has no effect here: a plugin is handed each epoch's "
        "rows as the Arrow batches of the Spark tasks that compute them (an epoch holds up to record_batch_size rows)",
    ]
