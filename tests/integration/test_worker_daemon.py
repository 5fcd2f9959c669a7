"""Spark's Python workers in a local session are forked by `streamling.spark.worker_daemon`: pyspark from
site-packages (not the bundled zip, which is compiled from source in every process), the engine's readers imported
before the fork, and a daemon with no thread besides its own, so forking it is safe; each worker talks to the JVM
over a Unix domain socket."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamling.spark.worker_daemon import bundled_zip


def socket_families() -> set[str]:
    """How this process's sockets are connected, from /proc: "unix", "tcp" (IPv4 or IPv6), else "other"."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    tables = {"unix": ["/proc/net/unix"], "tcp": ["/proc/net/tcp", "/proc/net/tcp6"]}
    found = set()
    for family, paths in tables.items():
        for path in paths:
            with open(path) as table:
                columns = [line.split() for line in table.readlines()[1:]]
            index = 6 if family == "unix" else 9  # the inode column
            if inodes & {row[index] for row in columns if len(row) > index}:
                found.add(family)
    return found or {"other"}


def facts(_: object) -> tuple[str, str, bool, int, str, list[str]]:
    import pyspark

    daemon = os.getppid()
    with open(f"/proc/{daemon}/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode()
    return (
        pyspark.__file__ or "",
        os.environ.get("OPENBLAS_NUM_THREADS", ""),
        all(name in sys.modules for name in ("streamling.kafka.source.reader", "confluent_kafka", "fastavro")),
        len(os.listdir(f"/proc/{daemon}/task")),
        command,
        sorted(socket_families()),
    )


def test_workers_come_from_the_engine_daemon_with_compiled_pyspark_and_preloaded_readers(spark) -> None:
    (pyspark_file, blas, preloaded, daemon_threads, command, sockets) = (
        spark.sparkContext.parallelize([0], 1).map(facts).collect()[0]
    )
    assert sockets == ["unix"]  # the worker's connection to the JVM (`spark/conf.LOCAL_CONF`)
    assert "-m streamling.spark.worker_daemon pyspark.worker" in command
    assert ".zip" not in pyspark_file and pyspark_file.endswith("pyspark/__init__.py")
    assert blas == "1"
    assert preloaded
    assert daemon_threads == 1


def test_a_daemon_imports_the_modules_its_preload_variable_names(tmp_path: Path) -> None:
    """What `streamling serve` asks of its daemon (pandas) through `worker_daemon.PRELOAD_VARIABLE`; a name that
    does not import is passed over, as an optional part's would be."""
    probe = "import sys; from streamling.spark.worker_daemon import preload; preload('json'); "
    probe += "print('colorsys' in sys.modules, 'no_such_module_here' in sys.modules)"
    env = {**os.environ, "STREAMLING_WORKER_PRELOAD": "colorsys, no_such_module_here"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_only_zips_inside_an_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (lib.parent.parent / "__init__.py").write_text("")
    assert bundled_zip(str(lib / "pyspark.zip"))
    assert bundled_zip(str(lib / "py4j-0.10.9.9-src.zip"))
    assert not bundled_zip(str(tmp_path / "spark-4.1" / "python" / "lib" / "pyspark.zip"))  # a SPARK_HOME: kept
    assert not bundled_zip(str(tmp_path / "plugins.zip"))
    assert not bundled_zip(str(lib))
