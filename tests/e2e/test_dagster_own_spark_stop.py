"""A stream op on its own Spark, stopped while an epoch is in flight: the epoch must finish. Starting the session
inside the op (on the run worker's main thread) installed PySpark's SIGINT handler over the op's: Dagster's
termination, a SIGINT, then cancelled every Spark job and raised, and the run logged `the pipeline failed while
stopping: postgres sink 'out': An error occurred while calling o134.getResult` and a step failure (found by
bench/dagster_engine.py's peer). Real Spark in a fresh process, as a run worker starts it (the test process has a
SparkContext already)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.e2e.cli import cli_env

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, threading, time

    from streamling.config import load_settings
    from streamling_dagster.resources import StreamlingSparkResource
    from streamling_dagster.streaming import StopSignals, own_session

    stop = threading.Event()
    out = {}
    resource = StreamlingSparkResource.from_settings(load_settings())
    with StopSignals(stop) as signals:
        spark = own_session(signals, lambda: resource.spark_session)  # as the op starts it
        sc = spark.sparkContext

        def epoch():
            try:
                out["rows"] = sc.parallelize([7], 1).map(lambda x: time.sleep(3) or x).collect()
            except Exception as exc:
                out["error"] = repr(exc)[:500]

        worker = threading.Thread(target=epoch)
        worker.start()
        while not sc.statusTracker().getActiveJobsIds():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # what Dagster's Terminate sends the run worker
        worker.join()
    out["stop_requested"] = stop.is_set()
    print(json.dumps(out))
    spark.stop()
    """
)


def test_a_sigint_after_the_op_started_its_own_spark_lets_the_in_flight_job_finish(tmp_path: Path) -> None:
    env = cli_env(tmp_path, {"STREAMLING__SPARK__MASTER": "local[1]", "PYTHONPATH": ":".join(sys.path)})
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rows": [7], "stop_requested": True}
