"""The bench harness's per-role split: a process is counted under one role for its memory and its CPU."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.bench_util import load_bench_module


def test_a_child_that_exits_before_its_parent_keeps_its_role() -> None:
    """The child becomes a zombie (its parent never waits for it): its command line is gone, and it was once
    counted as `other` for CPU while its memory stayed under `spark_python_other` (CI failed on that)."""
    harness = load_bench_module("harness")
    parent = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.6)', 'pyspark'])\n"
        "time.sleep(1.5)\n"
    )
    m = harness.measure([sys.executable, "-c", parent], env={}, cwd=Path.cwd(), interval=0.05)
    assert m.returncode == 0, m.stderr
    assert "spark_python_other" in m.rss_at_peak_mb
    assert set(m.rss_at_peak_mb) <= set(m.cpu_sec_by_role) == {"command", "spark_python_other"}


def test_pages_a_forked_child_shares_with_its_parent_count_once_in_pss() -> None:
    """Spark's Python workers are forked from a daemon that imported pyarrow and the engine first: summed RSS
    counts those pages once per worker, the tree's PSS once."""
    harness = load_bench_module("harness")
    parent = (
        "import os, time\n"
        "block = bytearray(os.urandom(1 << 20)) * 200\n"  # 200 MiB, written: resident in the parent
        "children = []\n"
        "for _ in range(2):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        time.sleep(1.5)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    m = harness.measure([sys.executable, "-c", parent], env={}, cwd=Path.cwd(), interval=0.05)
    assert m.returncode == 0, m.stderr
    assert m.peak_rss_mb > 3 * 200  # the parent and its two children each report the block
    assert m.peak_pss_mb is not None
    assert 200 < m.peak_pss_mb < 300  # counted once
