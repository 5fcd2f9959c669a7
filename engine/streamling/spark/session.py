"""The SparkSession the runtime runs on: local mode by default, any master URL from settings."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession
from pyspark.sql import types as spark_types

import streamling
from streamling.config.model import SparkSettings
from streamling.errors import first_line
from streamling.spark import class_archive, jvm_stderr, packed_env
from streamling.spark.conf import session_conf
from streamling.spark.spark_home import launch_home
from streamling.spark.warm_up import warm_up

log = logging.getLogger("streamling.spark")

WARM_UP_WAIT_SEC = 120.0
"""How long a long-lived session's start waits for its Python workers' daemon (`warm_up`) before it goes on."""
DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager$"


def prepare_environment() -> None:
    """Workers must run this interpreter (it has pyarrow and streamling); bind to loopback locally; launch from
    a Spark home without bundled zips (`spark_home`)."""
    _numpy_checks_without_test_utilities()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "SPARK_HOME" not in os.environ and (home := launch_home()) is not None:
        os.environ["SPARK_HOME"] = str(home)


def _numpy_checks_without_test_utilities() -> None:
    """PySpark registers py4j converters for NumPy values, and the array one is asked first about every object
    argument of every call into the JVM. Each asks ``pyspark.testing.utils.have_numpy``, and importing that module
    loads pandas and protobuf: ~0.2 s of the driver's CPU in the middle of its start (`python -X importtime`).
    An object can be a NumPy value only once NumPy is imported, so asking `sys.modules` answers the same."""

    def scalar(_converter: object, obj: object) -> bool:
        numpy = sys.modules.get("numpy")
        return numpy is not None and isinstance(obj, numpy.generic)

    def array(_converter: object, obj: object) -> bool:
        numpy = sys.modules.get("numpy")
        return numpy is not None and isinstance(obj, numpy.ndarray) and obj.ndim == 1

    spark_types.NumpyScalarConverter.can_convert = scalar  # type: ignore[method-assign]
    spark_types.NumpyArrayConverter.can_convert = array  # type: ignore[method-assign]


def build_session(settings: SparkSettings, long_lived: bool = False) -> SparkSession:
    """Create (or reuse, when one is already active in this process) the session; `long_lived` for an engine."""
    prepare_environment()
    conf = session_conf(settings, long_lived)
    if settings.class_archive:
        class_archive.build_later(settings.conf)
    return session_from_conf(conf, long_lived)


def session_from_conf(conf: Mapping[str, str], long_lived: bool = False) -> SparkSession:
    """The session of `conf`, a whole Spark configuration (`session_conf`'s, or a caller's such as the Dagster
    resource's): the driver's JVM out of the caller's process group (`start_jvm`), then the engine's finishing."""
    prepare_environment()
    start_jvm(conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return finish_session(builder.getOrCreate(), conf.get("spark.master", "local[*]"), long_lived)


def start_session(settings: SparkSettings) -> Future[SparkSession]:
    """`build_session` on a daemon thread, so the JVM boots while the caller validates the pipeline (~0.9 s of
    plugin imports on 2 cores). A caller that gives up (an invalid pipeline) just exits: the JVM goes with it."""
    future: Future[SparkSession] = Future()

    def build() -> None:
        try:
            future.set_result(build_session(settings))
        except BaseException as exc:  # handed to the caller, who reports it
            future.set_exception(exc)

    threading.Thread(target=build, name="streamling-session-start", daemon=True).start()
    return future


def start_jvm(conf: Mapping[str, str]) -> None:
    """Launch the driver's JVM (the py4j gateway) in a session of its own, unless one runs already.

    A SIGTERM sent to the driver's whole process group — by `timeout`, by a terminal, by supervisors that
    signal the group — would otherwise kill the JVM (and the Python workers it starts) under the graceful
    drain, which then ends in py4j errors. PySpark already starts the JVM ignoring SIGINT for the same
    reason; out of the group, it gets neither. It still dies with the driver: the gateway exits when its
    standard input, a pipe from the driver, closes — on a normal exit and on SIGKILL alike.

    That holds only once the JVM has written its address, into a folder PySpark's launch deletes when it ends,
    also when interrupted: a stop signal raised into the wait (the Dagster run worker's `StopSignals`) left a JVM
    that found no folder, ended its main thread and kept running on its gateway's thread, re-parented to init,
    still there 100 s after `dagster dev`'s group got SIGTERM. So the launch runs on a thread of its own, which no
    signal interrupts: an interrupted caller goes on at once, and the launch, once done, stops the JVM it started
    (`_stop_abandoned`); if this process exits first, the folder stays, and the JVM ends on its closed input."""
    python = _workers_python(conf)
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        if python == packed_env.EXECUTOR_PYTHON:
            _check_driver_directory()
        return
    popen: dict[str, Any] = {"start_new_session": True, "stderr": subprocess.PIPE}
    if python == packed_env.EXECUTOR_PYTHON:
        popen["cwd"] = packed_env.driver_directory()
    spark_conf = SparkConf()
    for key, value in conf.items():
        spark_conf.set(key, value)
    launched: Future[Any] = Future()

    def launch() -> None:
        try:
            launched.set_result(launch_gateway(spark_conf, popen_kwargs=popen))
        except BaseException as exc:  # handed to the caller
            launched.set_exception(exc)

    threading.Thread(target=launch, name="streamling-jvm-launch", daemon=True).start()
    try:
        gateway = launched.result()
    except BaseException:
        launched.add_done_callback(_stop_abandoned)
        raise
    forward = threading.Thread(target=jvm_stderr.forward, args=(gateway.proc.stderr,), name="streamling-jvm-stderr")
    forward.daemon = True
    forward.start()
    SparkContext._ensure_initialized(gateway=gateway)


def _workers_python(conf: Mapping[str, str]) -> str | None:
    """Set ``PYSPARK_PYTHON``, which PySpark reads when each SparkContext starts, for the session about to start:
    Spark's own ``spark.pyspark.python`` (honoured as spark-submit does), or else back to this interpreter if an
    earlier session of this process pointed it into a packed environment."""
    if python := conf.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = python
    elif os.environ.get("PYSPARK_PYTHON") == packed_env.EXECUTOR_PYTHON:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    return os.environ.get("PYSPARK_PYTHON")


def _check_driver_directory() -> None:
    """A session with the packed environment on a JVM this process started for another session: the JVM's working
    directory decides where the driver's own Python processes find `packed_env.EXECUTOR_PYTHON`."""
    jvm = SparkContext._jvm
    if jvm is None:
        return
    if jvm.java.lang.System.getProperty("user.dir") != packed_env.driver_directory():
        log.warning(
            "This process's Spark JVM was started for a session without the packed environment; Python that Spark "
            "runs on the driver (Python data sources' planners) cannot start %s. Start the cluster session in a "
            "process of its own",
            packed_env.EXECUTOR_PYTHON,
        )


def _stop_abandoned(launched: Future[Any]) -> None:
    """End the JVM of a launch its caller gave up waiting for (`start_jvm`); nothing was started on it."""
    if launched.exception() is not None:
        return
    proc = launched.result().proc
    proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stderr):
        stream.close()


def finish_session(spark: SparkSession, master: str, long_lived: bool = False) -> SparkSession:
    """Quiet logs, on a cluster ship the package, and start Spark's Python processes in the background
    (`warm_up`): for sessions built here or by a caller. A long-lived session (an engine) waits for them: fifty
    runs submitted the moment the engine said it was ready otherwise found no daemon yet, and it started, importing
    for seconds, on a machine busy starting the runs (its first read tasks took 25 s; the runs' first rows 30 s
    after their starts, median)."""
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_accumulator_server(spark.sparkContext)
    # PySpark logs every analysis error with its JVM stack; the engine reports them itself.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    if not master.startswith("local") and packed_env.archive_of(spark.sparkContext.getConf()) is None:
        _ship_package(spark)
    skip_data_source_lookup(spark)
    warming = warm_up(spark)
    if long_lived:
        warming.join(WARM_UP_WAIT_SEC)
    return spark


def skip_data_source_lookup(spark: SparkSession) -> None:
    """Tell Spark its statically installed Python data sources are none, unless it looked them up already.

    On its first data source lookup (any ``format(…)``), Spark starts a pyspark daemon and a worker to list the
    ``pyspark_*`` packages of the Python environment (``lookup_data_sources``): two more processes importing pyspark
    on the way to the first row (cold first row 6.90 -> 6.80 s, query started 4.88 -> 4.67 s, medians of 7 pairs).
    The engine reads through its own stream readers (`runtime/reading.py`) and a pipeline cannot name a data
    source, so it never reads the list. `DataSourceManager.dataSourceBuilders` is the JVM-wide slot Spark fills."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        manager = jvm.java.lang.Class.forName(DATA_SOURCE_MANAGER).getField("MODULE$").get(None)
        if manager.dataSourceBuilders().isEmpty():
            none = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(none))
    except Py4JError as exc:  # another Spark version: it looks them up, as it would anyway
        log.debug("Spark's data source lookup stays on: %s", first_line(exc))


def _quiet_accumulator_server(sc: SparkContext) -> None:
    """PySpark's accumulator server prints a traceback when the JVM cuts its connection, as it does when a run
    stops in the middle of an epoch; the engine uses no accumulators, so that goes to the debug log."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: log.debug(
            "Spark's accumulator connection from %s ended", address, exc_info=True
        )


def _ship_package(spark: SparkSession) -> None:
    """On a cluster, executors import streamling for the Python data sources and Arrow operators."""
    package_dir = Path(streamling.__file__).parent
    target = Path(tempfile.mkdtemp(prefix="streamling-pyfiles-")) / "streamling.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in package_dir.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("streamling") / path.relative_to(package_dir))
    spark.sparkContext.addPyFile(str(target))
