"""Running the installed `streamling` console script as a black box."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

STREAMLING = str(Path(sys.executable).with_name("streamling"))
ID = re.compile(r'"id": (\d+)')


def cli_env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__SPARK__MASTER": "local[2]",
            "STREAMLING__SPARK__SHUFFLE_PARTITIONS": "2",
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(cwd / "checkpoints"),
            "STREAMLING__STATE_BACKEND__SQLITE__DATABASE_PATH": str(cwd / "state.db"),
            "STREAMLING_HOME": str(cwd / ".streamling-home"),  # the engine's and admin API's token files
            "STREAMLING__RESTART_STRATEGY__TYPE": "none",  # see tests/conftest.py
        }
    )
    env.update(extra or {})
    return env


def write(cwd: Path, text: str, name: str = "pipeline.yaml") -> Path:
    path = cwd / name
    path.write_text(textwrap.dedent(text))
    return path


def run_cli(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240):
    return subprocess.run(
        [STREAMLING, *args], cwd=cwd, env=cli_env(cwd, env), capture_output=True, text=True, timeout=timeout
    )


def as_from_a_terminal() -> None:
    """`preexec_fn` of a process the tests signal: SIGINT, SIGTERM and SIGQUIT back to their defaults, as a terminal
    or a supervisor starts it. Ignored signals survive exec, and a suite started in the background (``cmd &`` in a
    non-interactive shell ignores SIGINT and SIGQUIT; some job runners ignore SIGTERM too) handed them down:
    `dagster dev`, whose Python keeps an ignored SIGINT ignored, then never stopped on a SIGTERM to its group."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)


def start_cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None, stdout=None, stderr=subprocess.PIPE
) -> subprocess.Popen:
    """Its own process group, so the test can kill the engine and its JVM together."""
    return subprocess.Popen(
        [STREAMLING, *args],
        cwd=cwd,
        env=cli_env(cwd, env),
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )


def printed_ids(text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := ID.search(line))]


def sqlite_state(db: Path, app: str = "local_app_v1") -> dict:
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT key, data FROM state WHERE namespace = ?", (app,)).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {k: json.loads(v) for k, v in rows}


def sqlite_leases(db: Path, app: str = "local_app_v1") -> dict[str, dict]:
    """The run leases held in a Sqlite state file: lease name → holder. A released lease keeps its row, expired (its
    generation goes on), so only unexpired ones are held."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT name, holder FROM leases WHERE namespace = ? AND expires_at > ?", (app, time.time())
        ).fetchall()
    finally:
        conn.close()
    return {name: json.loads(holder) for name, holder in rows}


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll `predicate` until true; fail early, with the engine's stderr, if the engine exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"engine exited early with {proc.returncode}: {proc.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def exit_code(proc: subprocess.Popen, timeout: float = 60) -> int:
    """The engine's exit code; if it is still running after `timeout`, fail with what it was doing: every Python
    thread's stack (the CLI dumps them on SIGUSR1) and its JVM's (`jstack`), then kill its process group."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    jvm_stacks = ""
    for child in Path(f"/proc/{proc.pid}/task").glob("*/children"):
        for pid in child.read_text().split():
            if Path(f"/proc/{pid}/exe").resolve().name == "java":
                jstack = subprocess.run(["jstack", pid], capture_output=True, text=True, timeout=60)
                jvm_stacks += jstack.stdout[-20000:]
    os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    stderr = proc.stderr.read() if proc.stderr else ""
    proc.wait(timeout=30)
    raise AssertionError(
        f"engine still running after {timeout:.0f} s\n--- stderr ---\n{stderr}\n--- JVM ---\n{jvm_stacks}"
    )


def run_processes(cwd: Path) -> list[int]:
    """Every live process of runs started by `start_cli`/`run_cli` in `cwd` — the driver, its JVM and Spark's
    Python workers — recognised by the environment they inherit (the checkpoint root under `cwd`)."""
    marker = f"STREAMLING__SPARK__CHECKPOINT_ROOT={cwd / 'checkpoints'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until_gone(cwd: Path, timeout: float = 30) -> None:
    """The run's processes (its JVM included) exit within `timeout`."""
    deadline = time.time() + timeout
    while (left := run_processes(cwd)) and time.time() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def start_inspectable(cwd: Path, pipeline: Path, rows: int, refresh_sec: float) -> tuple[subprocess.Popen, str]:
    """The CLI running `pipeline` with the admin API on a free port and live inspection (`rows` per node, sampled
    every `refresh_sec`), once it is ready; the process (its own group) and the admin API's base URL."""
    import httpx

    from tests.net import ADMIN_TOKEN, free_port
    from tests.waiting import wait_for

    port = free_port()
    env = {
        "STREAMLING__ADMIN_API_PORT": str(port),
        "STREAMLING__ADMIN_API_TOKEN": ADMIN_TOKEN,
        "STREAMLING__LIVE_DATA_INSPECT_ENABLED": "true",
        "STREAMLING__LIVE_DATA_INSPECT__RECORDS_PER_TOPOLOGY_NODE": str(rows),
        "STREAMLING__LIVE_DATA_INSPECT__REFRESH_IN_SECS": str(refresh_sec),
    }
    engine = start_cli(cwd, str(pipeline), env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{base}/ready", timeout=2).status_code == 200, 120, "readiness", (httpx.HTTPError,))
    except BaseException:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.communicate(timeout=60)
        raise
    return engine, base
