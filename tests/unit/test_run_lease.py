"""The run lease (one run per pipeline), without Spark."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streamling.errors import StreamlingError
from streamling.runtime.lease import RunLease, provably_dead, this_process
from streamling.state.sqlite import SqliteStateBackend


def _lease(db: Path, run: str, ttl: float = 1.2) -> RunLease:
    return RunLease(SqliteStateBackend("app", str(db)), "orders", Path("orders.yaml"), ttl, run)


def test_a_live_holder_is_refused_by_name_pid_host_and_since(tmp_path: Path) -> None:
    first = _lease(tmp_path / "state.db", "first")
    assert first.acquire(threading.Event())
    try:
        started = time.monotonic()
        with pytest.raises(StreamlingError) as info:
            _lease(tmp_path / "state.db", "second").acquire(threading.Event())
        holder = this_process()
        assert info.value.message == (
            f"pipeline 'orders' is already running (pid {holder['pid']}, host {holder['host']}, "
            f"since {first.holder['since']})"
        )
        assert info.value.user_facing
        assert time.monotonic() - started < 1.2  # seen renewing (every 0.2 s) before its lease could expire
        first.check()
    finally:
        first.release()
    second = _lease(tmp_path / "state.db", "second")
    assert second.acquire(threading.Event())  # released: free at once
    second.release()


def test_a_holder_that_stops_renewing_loses_the_lease_after_the_ttl_and_stops_committing(tmp_path: Path) -> None:
    frozen = _lease(tmp_path / "state.db", "frozen")
    assert frozen.acquire(threading.Event())
    frozen._done.set()  # its heartbeat stops, as in a frozen or partitioned process; its process lives on
    acquired_at = time.monotonic()
    second = _lease(tmp_path / "state.db", "second")
    assert second.acquire(threading.Event())
    assert time.monotonic() - acquired_at >= 1.0  # only once the lease expired
    with pytest.raises(StreamlingError, match="its run lease was not renewed for 1 s; stopping without committing"):
        frozen.check()
    second.check()
    second.release()


def test_waiting_for_a_lease_ends_when_the_run_is_stopped(tmp_path: Path) -> None:
    holder = _lease(tmp_path / "state.db", "holder", ttl=30)
    assert holder.acquire(threading.Event())
    holder._done.set()  # silent, so the second run keeps waiting
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert not _lease(tmp_path / "state.db", "second", ttl=30).acquire(stop)


def test_only_a_dead_process_on_this_machine_is_provably_dead() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    record = {**this_process(), "pid": gone.pid}
    record["started"] = (Path(f"/proc/{gone.pid}/stat").read_text().rsplit(")", 1)[1].split())[19]
    assert not provably_dead(record)  # alive
    gone.kill()
    gone.wait()
    assert provably_dead(record)
    assert not provably_dead({**record, "host": "elsewhere"})
    assert not provably_dead({**record, "boot_id": "another-boot"})
    assert not provably_dead({**record, "pid_namespace": "0:1"})  # another container
    assert not provably_dead(this_process())
    assert provably_dead({**this_process(), "started": "1"})  # our pid, but an earlier process's
