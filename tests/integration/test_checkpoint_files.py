"""What the driver's JVM starts per epoch, observed with the JVM's own flight recorder (`jdk.jfr`, part of every
Java 17 runtime) on the shared session: nothing. Epochs are planned by the engine (`runtime/reading.py`), so no
source gets a Python process of its own (Structured Streaming's `python_streaming_source_runner`, started per query
and waited for for a hard-coded 10 s), and no offset or commit log is written (Hadoop's file system ran `readlink`
and `chmod` processes for each of their files without its native library)."""

from __future__ import annotations

import re
from pathlib import Path

from streamling import run_pipeline


def processes_started_during(spark, dump: Path, action) -> list[str]:  # type: ignore[no-untyped-def]
    """The command lines of every process the driver's JVM started while `action` ran (recorded into `dump`)."""
    recording = spark._jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        action()
    finally:
        recording.stop()
    try:
        path = spark._jvm.java.io.File(str(dump)).toPath()
        recording.dump(path)
        return [
            str(event.getString("command")) for event in spark._jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(path)
        ]
    finally:
        recording.close()


def test_a_run_of_three_sources_starts_no_process_and_writes_no_checkpoint(
    spark, make_settings, write_pipeline, tmp_path
) -> None:
    path = write_pipeline("""
        sources:
          a: {type: generator, rows: 4000, record_batch_size: 500}
          b: {type: generator, rows: 3000, record_batch_size: 500, seed: 1}
          c: {type: generator, rows: 2000, record_batch_size: 500, seed: 2}
        sinks:
          out_a: {type: blackhole, from: a}
          out_b: {type: blackhole, from: b}
          out_c: {type: blackhole, from: c}
        """)
    settings = make_settings(job_mode=True)
    spark.range(1).mapInArrow(lambda batches: batches, "id long").collect()  # the workers' daemon is up already
    summaries = []
    started = processes_started_during(
        spark, tmp_path / "run.jfr", lambda: summaries.append(run_pipeline(path, settings, spark))
    )
    assert {name: p.epochs for name, p in summaries[0].sources.items()} == {"a": 8, "b": 6, "c": 4}
    assert summaries[0].sink_rows == {"out_a": 4000, "out_b": 3000, "out_c": 2000}
    # Spark's own housekeeping only: its executor metrics ask `getconf PAGESIZE` once (ProcfsMetricsGetter), and a
    # session that goes away has its artifact folder removed with `rm -rf` (Utils.deleteRecursively).
    housekeeping = [
        command
        for command in started
        if command == "getconf PAGESIZE" or re.fullmatch(r"rm -rf \S*/artifacts-[0-9a-f-]+(/[0-9a-f-]+)?", command)
    ]
    assert [command for command in started if command not in housekeeping] == []
    assert not Path(settings.spark.checkpoint_root).exists()
