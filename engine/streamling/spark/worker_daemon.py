"""Spark's Python daemon for local sessions (`spark.python.daemon.module`): started as
``python -m streamling.spark.worker_daemon <worker module>``, it forks the Python workers as pyspark's does.

Two costs of pyspark's own daemon that every Python worker pays (py-spy of a 2M-record Kafka run: a quarter of the
workers' samples were imports):

- Spark puts the pyspark.zip and py4j zip of the installed pyspark first on the workers' PYTHONPATH, and a module
  imported from a zip is compiled from source in every process (zipimport keeps no bytecode). When the zips lie
  inside an installed pyspark, the same modules are importable, compiled once, from site-packages: the zips go.
- pyspark imports the worker module only after each fork, so every worker imports pyspark.sql and pyarrow (and
  pandas, for some kinds of task) anew, because those start threads (OpenBLAS, Arrow's jemalloc) that a fork does
  not carry over. Here those threads are not started (`THREADLESS`: one BLAS thread, no jemalloc background
  thread; workers run one per core anyway), so the worker module and the engine's readers are imported once, before
  forking, and frozen out of the garbage collector so the children share their pages.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from pathlib import Path

THREADLESS = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
PRELOAD = (
    "pyarrow",
    "streamling.kafka.source.reader",
    "streamling.kafka.source.decoding",  # imported by a read, not by the reader's module (see there)
    "confluent_kafka",  # imported by a read (the reader's module leaves it to the driver's own import)
    "fastavro",  # imported by the decoders a read builds
    "streamling.dead_letters",
    "streamling.builtins.generator_reader",
)
"""Imported before forking besides the worker module. Not polars: its thread pool starts on import. Not pandas:
a worker imports it at its first Arrow array built from Python values (pyarrow's pandas shim), and the session's
warm-up read does that for the first worker in the background, whereas ~0.2 s more in the daemon delayed the
run's first epoch, which waits for the daemon to listen (cold first row 6.36 -> 6.08 s, medians of 7 pairs). Not
the plugin sources' reader either (~0.1 s, most of it the plugin adapters' imports): a plugin source's worker
imports it at its first read (cold first row of a Kafka pipeline 6.27 -> 6.15 s, medians of 8 pairs). Not the
Schema Registry client (0.17 s): the Avro reader needs it only for a writer schema other than the reader schema,
which the driver hands over with its id.

`confluent_kafka` and `fastavro` (0.1 s together) are imported by every Kafka read: here once, rather than in each
worker after its fork. Fifty pipelines starting in one engine on two cores fork eight workers at once, and each
imported them (and pandas) anew on a starved machine: the engine's first eight read tasks took 25 s each
(Spark's event log), while their JVM threads used 0.2 s of CPU."""

PRELOAD_VARIABLE = "STREAMLING_WORKER_PRELOAD"
"""More modules to import before forking, comma-separated: a long-lived session's daemon (`streamling serve`) adds
pandas (0.46 s), which each worker otherwise imports at its first Arrow array built from Python values. The engine
starts its daemon once, before its first run, so what weighed on a CLI run's first row is paid at the engine's
start instead of in every worker it forks."""


def bundled_zip(entry: str) -> bool:
    """A pyspark.zip or py4j zip inside an installed pyspark package (``…/pyspark/python/lib/*.zip``)."""
    path = Path(entry)
    if path.suffix != ".zip" or path.parent.name != "lib" or path.parent.parent.name != "python":
        return False
    package = path.parent.parent.parent
    return package.name == "pyspark" and (package / "__init__.py").is_file()


def preload(worker_module: str) -> None:
    more = [name.strip() for name in os.environ.get(PRELOAD_VARIABLE, "").split(",") if name.strip()]
    for name in (worker_module, *PRELOAD, *more):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part missing: its workers import (and fail) as they would anyway
            continue


def main() -> None:
    dropped = [entry for entry in sys.path if bundled_zip(entry)]
    sys.path[:] = [entry for entry in sys.path if entry not in dropped]
    for entry in dropped:  # each task's `importlib.invalidate_caches()` would re-read the zip's directory
        sys.path_importer_cache.pop(entry, None)
    for key, value in THREADLESS.items():
        os.environ.setdefault(key, value)
    if len(sys.argv) > 1:
        preload(sys.argv[1])
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
