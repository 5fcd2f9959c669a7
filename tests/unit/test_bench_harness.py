"""The bench harness's per-role split: a process is counted under one role for its memory and its CPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "bench" / "harness.py"


def _harness():
    spec = importlib.util.spec_from_file_location("bench_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_child_that_exits_before_its_parent_keeps_its_role() -> None:
    """The child becomes a zombie (its parent never waits for it): its command line is gone, and it was once
    counted as `other` for CPU while its memory stayed under `spark_python_other` (CI failed on that)."""
    harness = _harness()
    parent = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.6)', 'pyspark'])\n"
        "time.sleep(1.5)\n"
    )
    m = harness.measure([sys.executable, "-c", parent], env={}, cwd=Path.cwd(), interval=0.05)
    assert m.returncode == 0, m.stderr
    assert "spark_python_other" in m.rss_at_peak_mb
    assert set(m.rss_at_peak_mb) <= set(m.cpu_sec_by_role) == {"command", "spark_python_other"}
