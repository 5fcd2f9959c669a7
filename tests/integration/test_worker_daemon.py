"""Spark's Python workers in a local session are forked by `streamling.runtime.worker_daemon`: pyspark from
site-packages (not the bundled zip, which is compiled from source in every process), the engine's readers imported
before the fork, and a daemon with no thread besides its own, so forking it is safe."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from streamling.runtime.worker_daemon import bundled_zip


def facts(_: object) -> tuple[str, str, bool, int, str]:
    import pyspark

    daemon = os.getppid()
    with open(f"/proc/{daemon}/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode()
    return (
        pyspark.__file__ or "",
        os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "streamling.kafka.source.reader" in sys.modules,
        len(os.listdir(f"/proc/{daemon}/task")),
        command,
    )


def test_workers_come_from_the_engine_daemon_with_compiled_pyspark_and_preloaded_readers(spark) -> None:
    (pyspark_file, blas, preloaded, daemon_threads, command) = (
        spark.sparkContext.parallelize([0], 1).map(facts).collect()[0]
    )
    assert "-m streamling.runtime.worker_daemon pyspark.worker" in command
    assert ".zip" not in pyspark_file and pyspark_file.endswith("pyspark/__init__.py")
    assert blas == "1"
    assert preloaded
    assert daemon_threads == 1


def test_only_zips_inside_an_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (lib.parent.parent / "__init__.py").write_text("")
    assert bundled_zip(str(lib / "pyspark.zip"))
    assert bundled_zip(str(lib / "py4j-0.10.9.9-src.zip"))
    assert not bundled_zip(str(tmp_path / "spark-4.1" / "python" / "lib" / "pyspark.zip"))  # a SPARK_HOME: kept
    assert not bundled_zip(str(tmp_path / "plugins.zip"))
    assert not bundled_zip(str(lib))
