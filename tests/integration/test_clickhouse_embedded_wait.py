"""The embedded ClickHouse data path between processes (the real chdb engine, two real processes): a run that
needs it while another process holds it waits (`embedded_wait_sec`), saying once which process holds it, and
goes on as soon as the holder releases it (`release_embedded`, as a Dagster backfill-then-stream does once its
bounded phase ended) — seeing what the holder wrote; without a wait it fails at once, naming the holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.conftest import REPO

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from streamling.clickhouse.client import get_client, release_embedded
    from streamling.config.model import ClickHouseConnectionSettings

    client = get_client(ClickHouseConnectionSettings(path=sys.argv[1]), "holder")
    client.command("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x")
    client.command("INSERT INTO t VALUES (7)")
    print("held", flush=True)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.1)
    print("released", release_embedded(), flush=True)
    time.sleep(60)  # alive: the path is free because it was released, not because the process ended
    """
)
WAITER = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from streamling.clickhouse.client import get_client
    from streamling.config.model import ClickHouseConnectionSettings
    from streamling.errors import StreamlingError

    try:
        client = get_client(ClickHouseConnectionSettings(path=sys.argv[1], embedded_wait_sec=float(sys.argv[2])), "w")
    except StreamlingError as exc:
        print("Error:", exc.message, flush=True)
        sys.exit(1)
    print("read", client.query("SELECT x FROM t").result_rows, flush=True)
    """
)


def python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_second_process_waits_for_the_data_path_and_goes_on_once_it_is_released(tmp_path: Path) -> None:
    data, release = tmp_path / "data", tmp_path / "release"
    holder = python(HOLDER, str(data), str(release))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        hurried = subprocess.run(
            [sys.executable, "-c", WAITER, str(data), "0"], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert hurried.returncode == 1
        assert f"Error: the embedded ClickHouse data path {data} is open in another process (pid {holder.pid} " in (
            hurried.stdout
        )
        waiter = python(WAITER, str(data), "120")
        assert waiter.stdout is not None
        warning = waiter.stdout.readline()
        assert warning.startswith(
            f"WARNING the embedded ClickHouse data path {data} is open in another process (pid {holder.pid} "
        )
        assert warning.rstrip().endswith("; waiting up to 120 s for it")
        time.sleep(1.0)  # still waiting: nothing else was printed
        assert waiter.poll() is None
        release.touch()
        assert holder.stdout.readline().strip() == "released True"
        rest, _ = waiter.communicate(timeout=120)
        assert waiter.returncode == 0, rest
        assert "INFO the embedded ClickHouse data path" in rest and "is free after" in rest
        assert rest.rstrip().endswith("read [(7,)]")  # what the holder wrote
    finally:
        holder.kill()
        holder.wait()
