"""A class-data-sharing archive of the driver JVM's classes (JDK dynamic AppCDS), for a faster start.

A cold driver loads, parses and verifies some 15,000 classes of Spark's jars before its first row; mapped from an
archive an earlier JVM dumped, they are ready at once (measured on 2 cores: JVM + SparkSession 4.8 → 2.9 s, query
start and first epoch faster too). An archive belongs to one JVM binary and one class path, so its name carries a
digest of both (and pyspark's version): an upgrade of Java or pyspark, or another ``spark.driver.extraClassPath``,
names a new archive, and a JVM that still finds a mismatching one ignores it silently.

`./dev setup` builds it; otherwise the first driver that finds it missing starts a detached, niced builder when it
exits (``python -m streamling.runtime.class_archive``), which runs a small pipeline in a JVM started with
``-XX:ArchiveClassesAtExit`` and renames the dump into place once the JVM has exited. A failed build leaves a
``.failed`` note beside the archive's name and is not retried automatically (run the module to retry).
"""

from __future__ import annotations

import argparse
import atexit
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

import pyspark

from streamling.runtime.spark_home import cache_dir, digest, spark_home

log = logging.getLogger("streamling.runtime")

CLASS_PATH = "spark.driver.extraClassPath"
QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""A mismatching archive (another class path) would otherwise print a warning on the driver's stdout."""

WORKLOAD = textwrap.dedent("""
    sources:
      events: {type: generator, rows: 30000, primary_key: id}
    transforms:
      shaped:
        type: sql
        primary_key: id
        sql: >
          SELECT id, upper(name) AS name, round(amount * 1.1, 2) AS amount, date_trunc('hour', created_at) AS hour
          FROM events WHERE amount > 10
    sinks:
      out: {type: blackhole, from: shaped}
""")
"""What the archived JVM runs: session start, a Python streaming data source, SQL analysis and code generation,
foreachBatch and Arrow transfers — the classes every pipeline's start loads."""


def java_binary() -> Path | None:
    """The java that Spark's launcher runs (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(conf: Mapping[str, str]) -> Path | None:
    """The archive for this JVM, Spark home and class path; None when no cache directory or java is found."""
    root, java = cache_dir(), java_binary()
    jars = spark_home() / "jars"
    if root is None or java is None or not jars.is_dir():
        return None
    stat = java.stat()
    key = digest(
        java,
        stat.st_size,
        stat.st_mtime_ns,
        jars.resolve(),
        sorted(p.name for p in jars.iterdir()),
        conf.get(CLASS_PATH, ""),
    )
    return root / f"jvm-classes-{pyspark.__version__}-{key}.jsa"


def java_options(conf: Mapping[str, str]) -> str:
    """The driver's JVM options that map the archive, when it exists."""
    path = archive_path(conf)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else ""


_pending: set[Path] = set()


def build_later(conf: Mapping[str, str]) -> None:
    """When the archive is missing (and no build failed before), build it in the background once this process
    exits, so the build competes with no run of this process."""
    path = archive_path(conf)
    if path is None or path in _pending or path.is_file() or failed_note(path).exists():
        return
    _pending.add(path)
    atexit.register(_spawn_builder, path, conf.get(CLASS_PATH, ""))


def failed_note(path: Path) -> Path:
    return path.with_suffix(".failed")


def _spawn_builder(path: Path, class_path: str) -> None:
    with open(path.with_suffix(".log"), "wb") as log_file:
        subprocess.Popen(
            [sys.executable, "-m", "streamling.runtime.class_archive", "--quiet", "--extra-class-path", class_path],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(19),  # only nice(): safe between fork and exec
        )


def build(settings_conf: Mapping[str, str] | None = None) -> Path | None:
    """Build the archive unless it exists or another builder holds its lock; returns it when present."""
    from streamling.runtime.session import prepare_environment

    prepare_environment()
    conf = dict(settings_conf or {})
    path = archive_path(conf)
    if path is None:
        return None
    if path.is_file():
        return path
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if path.is_file():
            return path
        dump = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            _dump_classes(dump, conf)
            if not dump.is_file():
                raise RuntimeError("the JVM exited without writing the archive")
            dump.rename(path)
            failed_note(path).unlink(missing_ok=True)
        except Exception as exc:
            failed_note(path).write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {type(exc).__name__}: {exc}\n")
            raise
        finally:
            dump.unlink(missing_ok=True)
    return path


def _dump_classes(dump: Path, conf: dict[str, str]) -> None:
    """Run the workload in a JVM that dumps its loaded classes to `dump` when it exits, and wait for that."""
    from pyspark import SparkContext

    from streamling.api import run_pipeline
    from streamling.config import load_settings
    from streamling.runtime.session import build_session

    work = Path(tempfile.mkdtemp(prefix="streamling-class-archive-"))
    try:
        pipeline = work / "archive.yaml"
        pipeline.write_text(WORKLOAD)
        settings = load_settings(
            environ={},
            overrides={
                "job_mode": True,
                "application_id": "class-archive",
                "state_backend.backend_type": "InMemory",
                "spark.master": "local[2]",
                "spark.checkpoint_root": str(work / "checkpoints"),
                "spark.class_archive": False,
                "spark.conf": conf,
            },
        )
        # Appended to the user's options, which come after the engine's own (`driver_java_options`).
        user = settings.spark.conf.get("spark.driver.extraJavaOptions", "")
        archive = f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
        settings.spark.conf["spark.driver.extraJavaOptions"] = f"{user} {archive}".lstrip()
        spark = build_session(settings.spark)
        run_pipeline(pipeline, settings, spark)
        frame = spark.range(1000).selectExpr("id", "cast(id AS string) AS s", "current_timestamp() AS t")
        frame.toArrow()
        frame.toPandas()
        frame.mapInArrow(lambda batches: batches, frame.schema).count()
        spark.stop()
        gateway = SparkContext._gateway
        if gateway is not None and getattr(gateway, "proc", None) is not None:
            gateway.proc.stdin.close()  # the gateway exits on end of input; the JVM dumps on its way out
            gateway.proc.wait(timeout=300)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the driver JVM's class-data archive when it is missing.")
    parser.add_argument("--quiet", action="store_true", help="print nothing when the archive exists")
    parser.add_argument("--extra-class-path", default="", help=f"the driver's {CLASS_PATH}, if any")
    args = parser.parse_args()
    conf = {CLASS_PATH: args.extra_class_path} if args.extra_class_path else {}
    from streamling.runtime.session import prepare_environment

    prepare_environment()
    started = time.time()
    existing = archive_path(conf)
    if existing is not None and existing.is_file():
        if not args.quiet:
            print(f"class archive: {existing}")
        return
    path = build(conf)
    if path is None:
        print("class archive: not built (no cache directory or java, or another build is running)")
    else:
        print(f"class archive: built {path} ({path.stat().st_size >> 20} MB) in {time.time() - started:.0f}s")


if __name__ == "__main__":
    main()
