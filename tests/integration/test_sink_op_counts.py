"""Inserts / updates / deletes per sink in the run summary (`RunSummary.sink_ops`), from real pipelines."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Literal

import pytest
from pyspark.sql import DataFrame

from streamling import run_pipeline
from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec, generate
from streamling.operators import Epoch, Sink
from streamling.plugins import operator
from streamling.topology.spec import PluginOptions, SinkSpec

# 5000 rows over 40 keys in 700-row epochs (8 epochs): offsets 0-39 insert, the rest update, and every 7th row
# (offset + 1 divisible by 7) is a delete instead: 714 deletes, 5 of them among the first 40 offsets.
SOURCE = {"rows": 5000, "key_space": 40, "delete_every": 7, "record_batch_size": 700}
ALL = {"inserts": 35, "updates": 4251, "deletes": 714}
# The even ids (id = offset % 40 + 1): offsets with an odd remainder mod 40, 2500 rows.
EVEN = {"inserts": 18, "updates": 2125, "deletes": 357}


class CountOnlySpec(SinkSpec, PluginOptions):
    type: Literal["test.count_only"]


@operator("test.count_only", CountOnlySpec)
class CountOnlySink(Sink[CountOnlySpec]):
    """A plugin sink that implements only `write` and returns a plain row count."""

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return df.count()


def source_yaml() -> str:
    return "src: {type: generator, " + ", ".join(f"{k}: {v}" for k, v in SOURCE.items()) + "}"


def generated_ops(settings, keep=lambda row: True) -> dict[str, int]:
    """The same counts from the generator's rows, computed without Spark (a check on the constants)."""
    spec = GeneratorSourceSpec.model_validate({"type": "generator", **SOURCE})
    config = GeneratorSource("src", spec, settings).reader_config()
    rows = [row for batch in generate(config, 0, SOURCE["rows"], 10_000) for row in batch.to_pylist()]
    counts = Counter(row["_gs_op"] for row in rows if keep(row))
    return {"inserts": counts["i"], "updates": counts["u"], "deletes": counts["d"]}


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_postgres_and_blackhole_sinks_report_exact_operation_counts(
    spark, make_settings, postgres_env, write_pipeline, schema
) -> None:
    """Deduplicating, history-keeping and parallel upserts, the aggregate sink and the blackhole all count
    the rows they received by operation, across 8 epochs; a sink behind a filter counts only its rows."""
    settings = make_settings(environ=postgres_env, job_mode=True)
    assert generated_ops(settings) == ALL
    assert generated_ops(settings, keep=lambda row: row["id"] % 2 == 0) == EVEN
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        transforms:
          keyed:
            type: sql
            primary_key: id
            sql: SELECT id, amount, name FROM src
          even:
            type: sql
            primary_key: id
            sql: SELECT id, amount FROM src WHERE id % 2 = 0
        sinks:
          dedup: {{type: postgres, from: keyed, schema: {schema}, table: dedup}}
          history: {{type: postgres, from: keyed, schema: {schema}, table: history, deduplicate: false}}
          parallel: {{type: postgres, from: keyed, schema: {schema}, table: parallel, parallelism: 3}}
          totals:
            type: postgres_aggregate
            from: keyed
            schema: {schema}
            landing_table: landing
            agg_table: totals
            aggregate: {{n: {{fn: count}}}}
          even_pg: {{type: postgres, from: even, schema: {schema}, table: even}}
          void: {{type: blackhole, from: keyed}}
          even_void: {{type: blackhole, from: even}}
        """)
    summary = run_pipeline(path, settings, spark)
    assert summary.sources["src"].epochs == 8
    assert summary.sink_ops == {
        "dedup": ALL,
        "history": ALL,
        "parallel": ALL,
        "totals": ALL,
        "even_pg": EVEN,
        "void": ALL,
        "even_void": EVEN,
    }
    assert summary.sink_rows == {name: sum(ops.values()) for name, ops in summary.sink_ops.items()}
    assert summary.sink_rows["dedup"] == 5000 and summary.sink_rows["even_pg"] == 2500


def test_print_sink_reports_operations_and_plain_counts_stay_as_rows(spark, make_settings, write_pipeline) -> None:
    """An Arrow sink (print) counts per batch; a plugin sink that only returns an int is in sink_rows alone."""
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          shown: {{type: print, from: src, sample_every: 1000}}
          counted: {{type: test.count_only, from: src}}
        """)
    summary = run_pipeline(path, make_settings(job_mode=True), spark)
    assert summary.sink_ops == {"shown": ALL}
    assert summary.sink_rows == {"shown": 5000, "counted": 5000}


def test_kafka_sink_reports_operations_from_its_tasks(spark, make_settings, write_pipeline, kafka) -> None:
    """Kafka sink tasks count their messages by operation and report them with the sent count."""
    topic = f"ops_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          {source_yaml()}
        sinks:
          out: {{type: kafka, from: src, topic: {topic}, primary_key: id, data_format: json, topic_partitions: 3}}
        """)
    summary = run_pipeline(path, make_settings(environ=kafka.env, job_mode=True), spark)
    assert summary.sink_ops == {"out": ALL}
    assert summary.sink_rows == {"out": 5000}
