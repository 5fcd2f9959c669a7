"""A class-data-sharing archive of the driver JVM's classes (JDK dynamic AppCDS), for a faster start.

A cold driver loads, parses and verifies some 15,000 classes of Spark's jars before its first row; mapped from an
archive an earlier JVM dumped, they are ready at once (measured on 2 cores: JVM + SparkSession 4.8 → 2.9 s, query
start and first epoch faster too). An archive belongs to one JVM binary and one class path, so its name carries a
digest of both (and pyspark's version): an upgrade of Java or pyspark, or another ``spark.driver.extraClassPath``,
names a new archive, and a JVM that still finds a mismatching one ignores it silently.

`./dev setup` builds it; otherwise the first driver that finds it missing starts a detached, niced builder when it
exits (``python -m streamling.class_archive_build``), which runs a small pipeline in a JVM started with
``-XX:ArchiveClassesAtExit`` and renames the dump into place once the JVM has exited. A failed build leaves a
``.failed`` note beside the archive's name and is not retried automatically (run that module to retry).
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from streamling.spark.spark_home import cache_dir, digest, pyspark_version, spark_home

log = logging.getLogger("streamling.spark")

CLASS_PATH = "spark.driver.extraClassPath"
BUILDER = "streamling.class_archive_build"
"""The module a background build runs (`python -m`): it runs a pipeline, so it lives above the engine's layers."""
QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""A mismatching archive (another class path) would otherwise print a warning on the driver's stdout."""


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
    return root / f"jvm-classes-{pyspark_version()}-{key}.jsa"


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
            [sys.executable, "-m", BUILDER, "--quiet", "--extra-class-path", class_path],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(19),  # only nice(): safe between fork and exec
        )


def build(
    dump_classes: Callable[[Path, dict[str, str]], None], settings_conf: Mapping[str, str] | None = None
) -> Path | None:
    """Build the archive unless it exists or another builder holds its lock; returns it when present.

    `dump_classes(dump, conf)` runs a workload in a JVM that writes its loaded classes to `dump` as it exits
    (``-XX:ArchiveClassesAtExit``); the workload is a pipeline, which this module, below the runtime, cannot run.
    """
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
            dump_classes(dump, conf)
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


def dump_options(dump: Path) -> str:
    """The driver's JVM options that dump its loaded classes to `dump` when it exits."""
    return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
