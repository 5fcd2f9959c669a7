"""Inserts / updates / deletes per sink in the run summary (`RunSummary.sink_ops`), from real pipelines: sinks that
forward rows count them by `_gs_op` as received; the Postgres sinks count what Postgres did."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Literal

import pytest
from pyspark.sql import DataFrame

from streamling import run_pipeline
from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
from streamling.builtins.generator_reader import generate
from streamling.operators import Epoch, Sink
from streamling.plugins import operator
from streamling.spec import PluginOptions, SinkSpec

# 5000 rows over 40 keys in 700-row epochs (8 epochs): offsets 0-39 insert, the rest update, and every 7th row
# (offset + 1 divisible by 7) is a delete instead: 714 deletes, 5 of them among the first 40 offsets.
SOURCE = {"rows": 5000, "key_space": 40, "delete_every": 7, "record_batch_size": 700}
ALL = {"inserts": 35, "updates": 4251, "deletes": 714, "unchanged": 0}
# The even ids (id = offset % 40 + 1): offsets with an odd remainder mod 40, 2500 rows.
EVEN = {"inserts": 18, "updates": 2125, "deletes": 357, "unchanged": 0}
EPOCH_ROWS = SOURCE["record_batch_size"]


class CountOnlySpec(SinkSpec, PluginOptions):
    type: Literal["test.count_only"]


@operator("test.count_only", CountOnlySpec)
class CountOnlySink(Sink[CountOnlySpec]):
    """A plugin sink that implements only `write` and returns a plain row count."""

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return df.count()


def source_yaml() -> str:
    return "src: {type: generator, " + ", ".join(f"{k}: {v}" for k, v in SOURCE.items()) + "}"


def generated_rows(settings) -> list[dict]:
    spec = GeneratorSourceSpec.model_validate({"type": "generator", **SOURCE})
    config = GeneratorSource("src", spec, settings).reader_config()
    return [row for batch in generate(config, 0, SOURCE["rows"], 10_000) for row in batch.to_pylist()]


def generated_ops(settings, keep=lambda row: True) -> dict[str, int]:
    """The same counts from the generator's rows, computed without Spark (a check on the constants)."""
    counts = Counter(row["_gs_op"] for row in generated_rows(settings) if keep(row))
    return {"inserts": counts["i"], "updates": counts["u"], "deletes": counts["d"], "unchanged": 0}


def applied_ops(settings, deduplicate: bool, keep=lambda row: True) -> dict[str, int]:
    """What Postgres does with the generator's rows, epoch by epoch, computed without Spark: with `deduplicate`
    only each key's last row of an epoch is applied; a delete removes a key that is there, an upsert inserts a
    key that is not and updates one that is; every other row changes nothing."""
    rows = generated_rows(settings)
    present: set[int] = set()
    counts = Counter[str]()
    for start in range(0, len(rows), EPOCH_ROWS):
        epoch = [row for row in rows[start : start + EPOCH_ROWS] if keep(row)]
        applied = list({row["id"]: row for row in epoch}.values()) if deduplicate else epoch
        counts["unchanged"] += len(epoch) - len(applied)
        for row in applied:
            if row["_gs_op"] == "d":
                counts["deletes" if row["id"] in present else "unchanged"] += 1
                present.discard(row["id"])
            else:
                counts["updates" if row["id"] in present else "inserts"] += 1
                present.add(row["id"])
    return {op: counts[op] for op in ("inserts", "updates", "deletes", "unchanged")}


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_postgres_and_blackhole_sinks_report_exact_operation_counts(
    spark, make_settings, postgres_env, write_pipeline, schema, pg_connect
) -> None:
    """Over 8 epochs: deduplicating, history-keeping and parallel upserts count what Postgres did (each table
    then holds inserts - deletes rows); the aggregate sink and the blackhole count the rows they received by
    operation; a sink behind a filter counts only its rows; every sink's counts add up to the rows it received."""
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
    even = {"keep": lambda row: row["id"] % 2 == 0}
    deduplicated = applied_ops(settings, deduplicate=True)
    assert deduplicated["unchanged"] > 4000 and deduplicated["deletes"] > 0  # the constants exercise every count
    assert summary.sink_ops == {
        "dedup": deduplicated,
        "history": applied_ops(settings, deduplicate=False),
        "parallel": deduplicated,
        "totals": ALL,  # the aggregate sink: the changes it took in, whatever its landing table did
        "even_pg": applied_ops(settings, deduplicate=True, **even),
        "void": ALL,
        "even_void": EVEN,
    }
    assert summary.sink_rows == {name: sum(ops.values()) for name, ops in summary.sink_ops.items()}
    assert summary.sink_rows["dedup"] == 5000 and summary.sink_rows["even_pg"] == 2500
    with pg_connect() as conn:
        for sink, table in {"dedup": "dedup", "history": "history", "parallel": "parallel", "even_pg": "even"}.items():
            (count,) = conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()
            assert count == summary.sink_ops[sink]["inserts"] - summary.sink_ops[sink]["deletes"], sink


def test_postgres_sink_counts_a_rerun_as_updates(spark, make_settings, postgres_env, write_pipeline, schema) -> None:
    """A second run over the same rows (a partition re-run, a reset) updates what the first inserted: Postgres's
    counts say so, where counting the rows' `_gs_op` would say inserts again."""
    path = write_pipeline(f"""
        sources:
          gen: {{type: generator, rows: 300, record_batch_size: 100, primary_key: id}}
        sinks:
          out: {{type: postgres, from: gen, schema: {schema}, table: rows}}
        """)
    first = run_pipeline(path, make_settings(environ=postgres_env, job_mode=True, application_id="first"), spark)
    again = run_pipeline(path, make_settings(environ=postgres_env, job_mode=True, application_id="again"), spark)
    assert first.sink_ops == {"out": {"inserts": 300, "updates": 0, "deletes": 0, "unchanged": 0}}
    assert again.sink_ops == {"out": {"inserts": 0, "updates": 300, "deletes": 0, "unchanged": 0}}


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
