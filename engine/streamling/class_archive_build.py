"""Build the driver JVM's class-data archive (`streamling.spark.class_archive`) by running a small pipeline.

It runs a pipeline through the engine's top-level API, so it sits above the runtime and the Spark machinery rather
than inside `spark/`: `./dev setup` runs it, and a driver that found the archive missing starts it in the
background when it exits (``python -m streamling.class_archive_build``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import textwrap
import time
from pathlib import Path

from streamling.spark import class_archive

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


def build(settings_conf: dict[str, str] | None = None) -> Path | None:
    """Build the archive for this Java, pyspark and class path unless it exists; returns it when present."""
    from streamling.spark.session import prepare_environment

    prepare_environment()
    return class_archive.build(dump_classes, settings_conf)


def dump_classes(dump: Path, conf: dict[str, str]) -> None:
    """Run the workload in a JVM that dumps its loaded classes to `dump` when it exits, and wait for that."""
    from pyspark import SparkContext

    from streamling.api import run_pipeline
    from streamling.config import load_settings
    from streamling.spark.session import build_session

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
        settings.spark.conf["spark.driver.extraJavaOptions"] = f"{user} {class_archive.dump_options(dump)}".lstrip()
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
    parser.add_argument("--extra-class-path", default="", help=f"the driver's {class_archive.CLASS_PATH}, if any")
    args = parser.parse_args()
    conf = {class_archive.CLASS_PATH: args.extra_class_path} if args.extra_class_path else {}
    from streamling.spark.session import prepare_environment

    prepare_environment()
    started = time.time()
    existing = class_archive.archive_path(conf)
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
