"""What makes a new driver start faster, seen from outside: its JVM maps the class-data archive (/proc/<pid>/maps);
it loads the code generator's classes (janino) from an unsigned jar, which the archive can hold;
it launches from a Spark home without bundled zips, so a planner process Spark starts for a Python data source
imports the installed pyspark, not the zip compiled from source in every process; the session's warm-up has
started Spark's Python daemons before any pipeline reads, but not the one that lists installed data sources; the
JVM's start-up noise stays off stderr. Real JVM, real Spark processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streamling import class_archive_build
from streamling.spark import class_archive
from streamling.spark.spark_home import launch_home

DRIVER = textwrap.dedent("""
    import json, os, threading
    import pyspark
    from pyspark import SparkContext
    from pyspark.sql.datasource import DataSource, DataSourceReader

    from streamling.config.model import SparkSettings
    from streamling.spark.session import build_session

    class Origin(DataSource):
        @classmethod
        def name(cls):
            return "origin"

        def schema(self):  # runs in Spark's create_data_source planner process
            import pyspark

            return "zip boolean" if ".zip" in pyspark.__file__ else "installed boolean"

        def reader(self, schema):
            return OriginReader()

    class OriginReader(DataSourceReader):
        def read(self, partition):
            yield (True,)

    spark = build_session(SparkSettings(master="local[1]"))
    for thread in threading.enumerate():
        if thread.name == "streamling-warm-up":
            thread.join(120)
    jvm = SparkContext._gateway.proc.pid
    daemons, daemon_pandas = [], None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
                parent = int(parent)
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\\0", b" ").decode().strip()
        except OSError:
            continue
        if parent == jvm and state != "Z" and command:  # not a helper that exited (Spark's `getconf PAGESIZE`)
            daemons.append(command.split(" -m ", 1)[-1])
            if "worker_daemon" in command:
                with open(f"/proc/{pid}/maps") as maps:
                    daemon_pandas = "/pandas/_libs/" in maps.read()
    spark.dataSource.register(Origin)
    planner = spark.read.format("origin").load().columns
    maps = {line.split()[-1] for line in open(f"/proc/{SparkContext._gateway.proc.pid}/maps") if ".jsa" in line}
    import sys
    import numpy
    from pyspark.sql import functions as F, types as T
    from streamling.runtime.plan import empty_frame

    empty = empty_frame(spark, T.StructType([T.StructField("id", T.LongType(), False)]))
    light = {
        "empty": [empty.count(), empty.schema.simpleString(), empty.schema["id"].nullable],
        "imported": sorted(m for m in ("pandas", "pyspark.testing.utils") if m in sys.modules),
        "numpy": spark.range(1).select(F.lit(numpy.int64(3)), F.array(F.lit(numpy.int32(4)))).first()[:],
    }
    janino = spark._jvm.java.lang.Class.forName("org.codehaus.janino.ClassBodyEvaluator")
    signers = janino.getProtectionDomain().getCodeSource().getCertificates()
    print(json.dumps({
        "home": os.environ["SPARK_HOME"], "planner": planner, "archives": sorted(maps), "daemons": sorted(daemons),
        "janino_signed": signers is not None, "light": light, "daemon_pandas": daemon_pandas,
    }))
    spark.stop()
""")


@pytest.fixture(scope="module")
def archive() -> Path:
    path = class_archive_build.build()  # `./dev setup` built it already; a plain pytest run builds it here once
    assert path is not None and path.is_file()
    return path


def test_a_new_driver_maps_the_archive_and_its_planners_import_the_installed_pyspark(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)  # as a new process starts: no home chosen yet
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["home"] == str(launch_home())
    assert not (Path(facts["home"]) / "python").exists()
    assert facts["planner"] == ["installed"]
    assert str(archive) in facts["archives"]
    assert facts["janino_signed"] is False
    assert "[warning][cds" not in done.stdout + done.stderr
    assert "Using incubator modules" not in done.stderr
    # the session's warm-up started the workers' daemon before any pipeline read, and nothing else: the engine hosts
    # its sources' readers itself (`runtime/reading.py`), so no data source planner is ever started
    assert facts["daemons"] == ["streamling.spark.worker_daemon pyspark.worker"]
    # nor does Spark list the environment's pyspark_* packages (`skip_data_source_lookup`), and the data sources
    # registered at run time are found all the same ("planner" above)
    assert not [daemon for daemon in facts["daemons"] if "lookup_data_sources" in daemon]
    # the driver's start loads neither pandas (an empty frame of a schema) nor pyspark's test utilities (asked by
    # its NumPy converters), and NumPy values still reach the JVM
    assert facts["daemon_pandas"] is False  # not preloaded: the first epoch waits for the workers' daemon
    assert facts["light"] == {"empty": [0, "struct<id:bigint>", False], "imported": [], "numpy": [3, [4]]}


def test_the_archive_is_named_for_the_class_path_and_only_mapped_when_present(tmp_path: Path, archive: Path) -> None:
    assert class_archive.archive_path({}) == archive
    assert class_archive.java_options({}) == f"-XX:SharedArchiveFile={archive} {class_archive.QUIET}"
    other = {class_archive.CLASS_PATH: str(tmp_path / "extra.jar")}
    assert class_archive.archive_path(other) not in (None, archive)
    assert class_archive.java_options(other) == ""
