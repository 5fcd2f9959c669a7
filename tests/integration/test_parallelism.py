"""`parallelism` of the original's pipelines on real Spark: how many partitions (tasks) a node's output has,
seen from inside the tasks with ``spark_partition_id()``; rows collected in-process by the `test.collect` sink."""

from __future__ import annotations

import uuid

from streamling import run_pipeline
from streamling.kafka.source.operator import KafkaSource
from streamling.kafka.source.reader import KafkaStreamReader
from streamling.kafka.source.spec import KafkaSourceSpec
from tests.integration.collect_sink import COLLECTED


def parts(key: str) -> dict[int, set[int]]:
    """Partition ids seen per id."""
    seen: dict[int, set[int]] = {}
    for _, row in COLLECTED[key]:
        seen.setdefault(row["id"], set()).add(row["part"])
    return seen


def test_source_and_transform_parallelism_set_the_partitions_of_their_output(
    spark, make_settings, write_pipeline
) -> None:
    key = f"par_{uuid.uuid4().hex[:8]}"
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 40000, record_batch_size: 30000, key_space: 50, parallelism: 3}}
        transforms:
          at_source: {{type: sql, primary_key: id, sql: "SELECT id, spark_partition_id() AS part FROM src"}}
          wide: {{type: sql, primary_key: id, sql: "SELECT id, name FROM src", parallelism: 5}}
          after_wide: {{type: sql, primary_key: id, sql: "SELECT id, spark_partition_id() AS part FROM wide"}}
          scripted:
            type: script
            from: src
            language: javascript
            primary_key: id
            parallelism: 2
            script: "function f(row) {{ return row; }}"
          after_script: {{type: sql, primary_key: id, sql: "SELECT id, spark_partition_id() AS part FROM scripted"}}
        sinks:
          a: {{type: test.collect, from: at_source, options: {{key: {key}_source}}}}
          b: {{type: test.collect, from: after_wide, options: {{key: {key}_wide}}}}
          c: {{type: test.collect, from: after_script, options: {{key: {key}_script}}}}
        """)
    run_pipeline(path, make_settings(job_mode=True), spark)
    source, wide, scripted = parts(f"{key}_source"), parts(f"{key}_wide"), parts(f"{key}_script")
    assert set().union(*source.values()) == {0, 1, 2}  # the generator's 3 input partitions
    assert set().union(*wide.values()) == {0, 1, 2, 3, 4}
    assert set().union(*scripted.values()) == {0, 1}
    # Hashed by the primary key: every id (50 keys, each repeated 800 times) stays in one partition, in every epoch.
    assert len(wide) == len(scripted) == 50
    assert all(len(p) == 1 for p in [*wide.values(), *scripted.values()])


def test_kafka_source_parallelism_splits_an_epoch_into_that_many_reading_tasks(spark, make_settings) -> None:
    spec = KafkaSourceSpec.model_validate(
        {"type": "kafka", "topic": "t", "data_format": "json", "schema": {"id": "bigint"}, "parallelism": 6}
    )
    source = KafkaSource("k", spec, make_settings())
    assert source.reader_parallelism(spark) == 6
    reader = KafkaStreamReader(source.reader_options({"0": 0}, None, source.reader_parallelism(spark)), source.schema())
    ranges = reader.partitions({"0": 0}, {"0": 600_000})
    assert len(ranges) == 6
    default = KafkaSource("k", spec.model_copy(update={"parallelism": None}), make_settings())
    assert default.reader_parallelism(spark) == spark.sparkContext.defaultParallelism
