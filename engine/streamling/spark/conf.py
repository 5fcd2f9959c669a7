"""The engine's Spark configuration: what every session gets, and what the settings add (the driver JVM's options,
the packed environment on a cluster).

Apart from the session (`spark/session.py`) and free of pyspark, so a caller that only shows or hands on the
configuration (the Dagster code location, which builds its resources at load) starts no Spark import.
"""

from __future__ import annotations

import os
import re
from importlib import resources

from streamling.config.model import SparkSettings
from streamling.spark import class_archive, packed_env, worker_daemon

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.timeType.enabled": "true",  # current_time() (the original's Time64) is a TIME
    # Each run's jobs go to its pipeline's pool (`PipelineRunner.bind_thread`), and pools share the task slots fairly:
    # in an engine hosting many runs, a backfill's waiting tasks do not queue a trickling pipeline's behind them.
    "spark.scheduler.mode": "FAIR",
    # What the (disabled) UI's status store keeps of ended jobs, stages and SQL executions: their plans and metrics,
    # never read here. Spark keeps 1,000 of each: an engine of fifty pipelines ends ten epochs a second.
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "100",
}

LOCAL_CONF = {
    "spark.python.daemon.module": "streamling.spark.worker_daemon",
    "spark.python.unix.domain.socket.enabled": "true",
}
"""Local mode: the workers run this interpreter, with this engine installed (see `worker_daemon`), and they and
the driver's Arrow transfers talk to the JVM over Unix domain sockets rather than loopback TCP (an epoch's
`addBatch` at 20k rec/s 198-200 -> 147-151 ms, p50 latency 430-455 -> 351-379 ms, bulk throughput unchanged:
bench/README.md). Not on a cluster by default: a socket's path is limited to 107 bytes, and an executor's temporary
directory (YARN's container directories) can be longer."""

LONG_LIVED_CONF = {f"spark.executorEnv.{worker_daemon.PRELOAD_VARIABLE}": "pandas"}
"""An engine's Python workers fork with pandas imported (`worker_daemon.PRELOAD_VARIABLE`)."""

JIT_OPTIONS = "-XX:CompileThresholdScaling=5"
"""Methods must run 5x as often before the JIT compiles them. Most of a bounded run's JVM CPU was the JIT
compiling start-up and planning code that runs a few times (7 of 12 CPU-s on a 20k-record job); the per-row code
still gets compiled within the first epochs (bench/README.md: 5M records 22.5 -> 17.6 JVM CPU-s with the GC
choice below, a CPU-heavy SQL's steady epochs unchanged)."""
SMALL_HEAP_GC = "-XX:+UseSerialGC"
"""For a driver heap of at most `SMALL_HEAP_MB`: half the resident memory of G1 (0.96 -> 0.48 GB on a 20k-record
job) and less CPU, where pauses stay short. Larger heaps keep the JVM's own choice."""
SMALL_HEAP_MB = 2048
GC_FLAG = re.compile(r"-XX:[+-]Use\w*GC\b")


def driver_java_options(settings: SparkSettings, long_lived: bool = False) -> str:
    """Ours first, then the user's `spark.driver.extraJavaOptions`, which win where they repeat a flag (the
    JVM takes the last); a user's own collector replaces ours (two collectors are an error). A long-lived driver
    (`streamling serve`) keeps the JIT's own thresholds: its per-epoch code runs millions of times, and compiled
    sooner it costs less from the first hour on (an engine of 50 pipelines: JVM CPU per small query -10 %)."""
    log4j = resources.files("streamling").joinpath("log4j2.properties")
    own = [f"-Dlog4j2.configurationFile=file:{log4j}", *([] if long_lived else [JIT_OPTIONS])]
    if settings.class_archive:
        own.append(class_archive.java_options(settings.conf))
    user = settings.conf.get("spark.driver.extraJavaOptions", "")
    if not GC_FLAG.search(user) and _heap_mb(settings.conf.get("spark.driver.memory", "1g")) <= SMALL_HEAP_MB:
        own.append(SMALL_HEAP_GC)
    return " ".join(part for part in (*own, user) if part)


def _heap_mb(size: str) -> float:
    """Spark's memory strings (`1g`, `512m`, `2048k`, a bare number of MiB); an unreadable one counts as large."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", size.lower())
    if match is None:
        return float("inf")
    return float(match[1]) * {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024**2}[match[2]]


def session_conf(settings: SparkSettings, long_lived: bool = False, resolve_archive: bool = True) -> dict[str, str]:
    """Everything the engine's session needs, as Spark configuration (master and app name included), for
    callers that build the session themselves (the Dagster Spark resource, through `streamling.spark_conf`).
    Without `resolve_archive` (a configuration to show, not to start), ``spark.archives`` names the
    `environment_archive` setting as it is rather than building or checking the archive."""
    return {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        **DEFAULT_CONF,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        **(LOCAL_CONF if settings.master.startswith("local") else {}),
        **(LONG_LIVED_CONF if long_lived else {}),
        **settings.conf,
        "spark.driver.extraJavaOptions": driver_java_options(settings, long_lived),
        **_packed_environment(settings, resolve_archive),
    }


PATH_LISTS = ("spark.archives", "spark.files", "spark.jars", "spark.submit.pyFiles")
PATHS = ("spark.eventLog.dir", "spark.sql.warehouse.dir", "spark.local.dir")
"""Settings Spark resolves against the driver JVM's working directory, which the packed environment moves
(`start_jvm`): a relative one is made absolute against this process's, where the user meant it."""


def _packed_environment(settings: SparkSettings, resolve_archive: bool = True) -> dict[str, str]:
    """On a cluster with `environment_archive` set: ship the archive (after the user's own ``spark.archives``) and
    run the executors' Python from it (``spark.pyspark.python``, unless the user set that too)."""
    if settings.master.startswith("local") or not settings.environment_archive:
        return {}
    setting = settings.environment_archive
    archive = packed_env.resolve(setting) if resolve_archive else setting
    conf = {key: _absolute_list(settings.conf[key]) for key in PATH_LISTS if settings.conf.get(key)}
    conf.update({key: _absolute(settings.conf[key]) for key in PATHS if settings.conf.get(key)})
    conf.setdefault("spark.sql.warehouse.dir", os.path.abspath("spark-warehouse"))  # Spark's default, where it was
    return {
        **conf,
        "spark.archives": ",".join(filter(None, [conf.get("spark.archives"), f"{archive}#{packed_env.ALIAS}"])),
        "spark.pyspark.python": settings.conf.get("spark.pyspark.python", packed_env.EXECUTOR_PYTHON),
    }


def _absolute(path: str) -> str:
    """A local path relative to this process's directory made absolute; a URI (``s3a://…``, ``file:/…``) kept."""
    path = path.strip()
    return path if re.match(r"^[a-zA-Z][\w+.-]*:", path) or os.path.isabs(path) else os.path.abspath(path)


def _absolute_list(paths: str) -> str:
    """`_absolute` for each entry of a comma-separated list, each keeping its ``#alias``."""
    out = []
    for entry in filter(None, (p.strip() for p in paths.split(","))):
        path, hashed, alias = entry.partition("#")
        out.append(_absolute(path) + hashed + alias)
    return ",".join(out)
