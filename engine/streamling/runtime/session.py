"""The SparkSession the runtime runs on: local mode by default, any master URL from settings."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

import streamling
from streamling.config.model import SparkSettings

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


def prepare_environment() -> None:
    """Workers must run this interpreter (it has pyarrow and streamling); bind to loopback locally."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """Everything the engine's session needs, as Spark configuration (master and app name included), for
    callers that build the session themselves (the Dagster PySpark resource)."""
    log4j = resources.files("streamling").joinpath("log4j2.properties")
    return {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        **DEFAULT_CONF,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
        **settings.conf,
    }


def build_session(settings: SparkSettings) -> SparkSession:
    """Create (or reuse, when one is already active in this process) the session."""
    prepare_environment()
    builder = SparkSession.builder
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    return finish_session(builder.getOrCreate(), settings)


def finish_session(spark: SparkSession, settings: SparkSettings) -> SparkSession:
    """Quiet logs and, on a cluster, ship the package: for sessions built here or by a caller."""
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark logs every analysis error with its JVM stack; the engine reports them itself.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    if not settings.master.startswith("local"):
        _ship_package(spark)
    return spark


def _ship_package(spark: SparkSession) -> None:
    """On a cluster, executors import streamling for the Python data sources and Arrow operators."""
    package_dir = Path(streamling.__file__).parent
    target = Path(tempfile.mkdtemp(prefix="streamling-pyfiles-")) / "streamling.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in package_dir.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("streamling") / path.relative_to(package_dir))
    spark.sparkContext.addPyFile(str(target))
