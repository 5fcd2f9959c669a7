"""`streamling inspect` following a pipeline the `streamling` CLI runs, both as black boxes: live rows of a chosen
node, the probes from outside, then SIGTERM to the pipeline's process group: it drains, and its admin API goes away
with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.e2e.cli import STREAMLING, cli_env, start_inspectable, write
from tests.net import ADMIN_HEADERS, ADMIN_TOKEN
from tests.waiting import wait_for


def test_inspect_follows_a_running_pipeline(tmp_path: Path) -> None:
    pipeline = write(
        tmp_path,
        """
        sources:
          ticks: {type: generator, rows_per_second: 200, record_batch_size: 50, primary_key: id}
        transforms:
          named:
            type: sql
            primary_key: id
            sql: SELECT id, upper(name) AS shout, _gs_op FROM ticks WHERE id % 3 = 0
        sinks:
          out: {type: blackhole, from: named}
        """,
    )
    engine, base = start_inspectable(tmp_path, pipeline, rows=4, refresh_sec=0.5)
    try:
        wait_for(
            lambda: httpx.get(f"{base}/api/live", params={"node": "named"}, headers=ADMIN_HEADERS).json()["nodes"][
                "named"
            ]["rows"],
            60,
            "rows",
        )
        follower = subprocess.Popen(
            [STREAMLING, "inspect", "--node", "named", base],
            cwd=tmp_path,
            env=cli_env(tmp_path, {"STREAMLING__ADMIN_API_TOKEN": ADMIN_TOKEN}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        headers, rows = [], []
        assert follower.stdout is not None
        while len(headers) < 3:
            line = follower.stdout.readline()
            assert line, follower.stderr.read() if follower.stderr else ""
            if line.startswith("--- "):
                headers.append(line)
            else:
                rows.append(json.loads(line))
        follower.terminate()
        follower.wait(10)
        assert all(h.startswith("--- named: ") for h in headers)
        assert rows and all(set(r) == {"id", "shout", "_gs_op"} and r["id"] % 3 == 0 for r in rows)
        assert len({r["id"] for r in rows}) > 4  # three samples, not the same rows again

        once = subprocess.run(
            [STREAMLING, "inspect", "--once", "--node", "nope", base],
            cwd=tmp_path,
            env=cli_env(tmp_path, {"STREAMLING__ADMIN_API_TOKEN": ADMIN_TOKEN}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert once.returncode == 2
        assert once.stderr.strip() == "Error: no node 'nope' (nodes: ticks, named, out)"
        tokenless = subprocess.run(
            [STREAMLING, "inspect", "--once", base],
            cwd=tmp_path,
            env=cli_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert tokenless.returncode == 2
        assert tokenless.stderr.strip() == "Error: the admin API: a token is required (Authorization: Bearer <token>)"
    finally:
        os.killpg(engine.pid, signal.SIGTERM)  # the whole group, as a supervisor does
        _, err = engine.communicate(timeout=120)
    assert engine.returncode == 0, err[-3000:]
    assert "Stop requested" in err
    unreachable = subprocess.run(
        [STREAMLING, "inspect", base], cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith(f"Error: cannot reach the pipeline's admin API at {base}")
