"""What the driver's JVM does per epoch for Spark's checkpoint logs, observed with the JVM's own flight recorder
(`jdk.jfr`, part of every Java 17 runtime) on the shared session."""

from __future__ import annotations

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


def test_epochs_write_their_checkpoint_logs_without_starting_readlink(
    spark, make_settings, write_pipeline, tmp_path
) -> None:
    """Hadoop's FileContext, Spark's default for checkpoints, ran `readlink` twice per file it renamed when its
    native library is missing (16 processes per epoch, ~100 ms of each epoch's offset and commit logs)."""
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 4000, record_batch_size: 500}
        sinks:
          out: {type: blackhole, from: src}
        """)
    settings = make_settings(job_mode=True)
    summaries = []
    started = processes_started_during(
        spark, tmp_path / "run.jfr", lambda: summaries.append(run_pipeline(path, settings, spark))
    )
    assert summaries[0].sources["src"].epochs == 8
    assert summaries[0].sink_rows == {"out": 4000}
    assert [command for command in started if command.startswith("readlink")] == []
    # Spark also starts Python processes and, once per session, `sh -c command -v python`; Hadoop's name the files.
    hadoop = [command for command in started if settings.spark.checkpoint_root in command]
    # What is left is Hadoop's `chmod` (no native library) of the run's four folders and of each new file and its
    # checksum: the query's metadata, and per epoch an offset and a commit log entry.
    assert {command.split()[0] for command in hadoop} <= {"chmod"}
    assert len([command for command in hadoop if command.startswith("chmod 0644 ")]) <= 2 * (1 + 2 * 8)
    assert len([command for command in hadoop if command.startswith("chmod 0755 ")]) <= 4
