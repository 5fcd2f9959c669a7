"""Measuring a command's whole process tree: wall clock, CPU seconds, peak RSS (and PSS).

The engine runs as the real CLI in a subprocess, so start-up (JVM, Python workers) is included, as a
user would experience it. Children (the JVM, Spark's Python workers) are sampled with psutil.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Measurement:
    wall_sec: float
    cpu_sec: float
    peak_rss_mb: float
    returncode: int
    stderr_tail: str = ""
    extra: dict = field(default_factory=dict)
    stderr: str = field(default="", repr=False)
    cpu_series: list[tuple[float, float]] = field(default_factory=list, repr=False)
    """(wall-clock time, CPU seconds of the process tree so far), one per sample: CPU spent in a time window."""
    first_row_sec: float | None = None
    """Launch to the first time `first_row` answered true (the cold start), when it was given."""
    rss_at_peak_mb: dict[str, float] = field(default_factory=dict)
    """The peak RSS split by role (`role`): which process the memory is in."""
    cpu_sec_by_role: dict[str, float] = field(default_factory=dict)
    """CPU seconds per role over the whole run: where the CPU goes (the JVM is invisible to py-spy)."""
    peak_pss_mb: float | None = None
    """The tree's memory with each page counted once (the sum of proportional set sizes), at its largest. Summed
    RSS counts a page once per process that maps it: the pages Spark's Python workers share with the daemon they
    were forked from, and the shared libraries every Python process maps. Read every `PSS_EVERY` samples and at a
    new RSS peak at most every `PSS_GAP_SEC`, and while a first row is timed only once it was seen: it walks each
    process's page tables, and read at each new peak of a starting engine it took ~1 CPU-s of the two cores the
    start itself is bound by (cold first row 6.7-7.0 s measured, 6.0-6.5 s unobserved)."""

    def recorded(self) -> dict:
        """What goes into the results JSON (no logs, no samples)."""
        return {k: v for k, v in vars(self).items() if not k.startswith(("stderr", "cpu_series"))}

    def cpu_between(self, start: float, end: float) -> float | None:
        """CPU seconds the process tree spent between two wall-clock times (sampled, so ±one interval)."""
        before = [cpu for t, cpu in self.cpu_series if t <= start]
        after = [cpu for t, cpu in self.cpu_series if t >= end]
        if not before or not after:
            return None
        return after[0] - before[-1]


SETTLED = ("command", "jvm", "engine", "python_workers")
PSS_EVERY = 5
PSS_GAP_SEC = 1.0


def tree_pss(tree: list[psutil.Process]) -> int:
    """Bytes: the tree's proportional set sizes summed (Linux; 0 where the kernel does not report them)."""
    total = 0
    for p in tree:
        try:
            total += getattr(p.memory_full_info(), "pss", 0)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def role(process: psutil.Process, root: int) -> str | None:
    """What a process of the tree is: the command itself, Spark's JVMs (also a cluster's worker and executor), a
    warm engine's process, Spark's Python workers (the daemon and the
    workers it forks: the readers, `mapInArrow` and UDF code), Spark's other Python processes (the streaming
    source's planner), or anything else; None when it cannot be told (an exiting process's command line is gone,
    and it must keep the role it had, or its CPU would be counted under another role than its memory)."""
    if process.pid == root:
        return "command"
    try:
        cmdline = " ".join(process.cmdline())
    except psutil.Error:
        return None
    if not cmdline:  # a zombie's command line reads as empty rather than failing
        return None
    if "java" in process.name() or "org.apache.spark" in cmdline:
        return "jvm"
    if "streamling serve" in cmdline or "streamling.cli serve" in cmdline:
        return "engine"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    if "pyspark" in cmdline:
        return "spark_python_other"
    return "other"


def measure(
    cmd: list[str],
    env: dict[str, str],
    cwd: Path,
    interval: float = 0.1,
    *,
    first_row: Callable[[], bool] | None = None,
    started: Callable[[subprocess.Popen], None] | None = None,
    beside: int | Sequence[int] | None = None,
) -> Measurement:
    """Run ``cmd`` to its end, sampling its process tree every ``interval`` seconds.

    ``first_row`` is polled from a thread (every 20 ms, its own connection's cost is not the tree's) until it
    answers true: the time from launch to then is ``first_row_sec``. ``started`` gets the process right after
    launch, so another thread can stop it (the latency scenario runs a streaming process until SIGTERM).
    ``beside``: processes already running (`streamling serve`; a cluster's workers) whose trees do the command's
    work; their CPU from the launch on and their memory are counted with the command's, their processes' roles as
    if each were the command.
    """
    tops = [] if beside is None else [beside] if isinstance(beside, int) else list(beside)
    engines = [psutil.Process(pid) for pid in tops]
    cpu_before: dict[int, float] = {}
    for p in [p for e in engines for p in (e, *e.children(recursive=True))]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            cpu_before[p.pid] = t.user + t.system
    started_at = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if started is not None:
        started(proc)
    root = psutil.Process(proc.pid)
    cpu_by_pid: dict[int, float] = {}
    role_of: dict[int, str] = {}
    peak = peak_pss = 0
    pss_at = -math.inf
    peak_split: dict[str, int] = {}
    series: list[tuple[float, float]] = []
    stderr_chunks: list[str] = []
    first: list[float] = []
    # stderr is read concurrently: a chatty process must never block on a full pipe while we sample it
    reader = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    watcher = None
    if first_row is not None:

        def watch() -> None:
            while True:
                if first_row():
                    first.append(time.perf_counter() - started_at)
                    return
                if proc.poll() is not None:
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    while proc.poll() is None:
        rss = 0
        split: dict[str, int] = {}
        try:
            tree = [root, *root.children(recursive=True)]
            for engine in engines:
                tree += [engine, *engine.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                with p.oneshot():
                    if role_of.get(p.pid) not in SETTLED:  # launch scripts exec into the JVM under one pid
                        role_of[p.pid] = role(p, root.pid) or role_of.get(p.pid, "other")
                    used = p.memory_info().rss
                    rss += used
                    split[role_of[p.pid]] = split.get(role_of[p.pid], 0) + used
                    t = p.cpu_times()
                    cpu_by_pid[p.pid] = t.user + t.system - cpu_before.get(p.pid, 0.0)
            except psutil.NoSuchProcess:
                continue
        now = time.monotonic()
        pss_due = len(series) % PSS_EVERY == 0 or (rss > peak and now - pss_at >= PSS_GAP_SEC)
        if pss_due and (first_row is None or first):
            peak_pss, pss_at = max(peak_pss, tree_pss(tree)), now
        if rss > peak:
            peak, peak_split = rss, split
        series.append((time.time(), sum(cpu_by_pid.values())))
        time.sleep(interval)
    proc.wait()
    wall = time.perf_counter() - started_at
    reader.join()
    if watcher is not None:
        watcher.join(timeout=10)
    return Measurement(
        wall_sec=round(wall, 3),
        cpu_sec=round(sum(cpu_by_pid.values()), 2),
        peak_rss_mb=round(peak / 2**20, 1),
        returncode=proc.returncode,
        stderr_tail="".join(stderr_chunks)[-2000:],
        stderr="".join(stderr_chunks),
        cpu_series=series,
        first_row_sec=round(first[0], 3) if first else None,
        rss_at_peak_mb={k: round(v / 2**20, 1) for k, v in sorted(peak_split.items())},
        cpu_sec_by_role=_by_role(cpu_by_pid, role_of),
        peak_pss_mb=round(peak_pss / 2**20, 1) if peak_pss else None,
    )


def _by_role(cpu_by_pid: dict[int, float], role_of: dict[int, str]) -> dict[str, float]:
    out: Counter[str] = Counter()
    for pid, cpu in cpu_by_pid.items():
        out[role_of.get(pid, "other")] += cpu
    return {k: round(v, 2) for k, v in sorted(out.items())}


def machine() -> dict:
    import pyspark

    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "platform": platform.platform(),
    }


def summarize(values: list[float], digits: int = 1) -> dict:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def summary(runs: list[Measurement], keys: tuple[str, ...], digits: int = 1) -> dict:
    """Median, min and max of each figure (`extra`'s, else the measurement's own) over the runs, and the runs."""
    out: dict = {}
    for key in keys:
        values = [r.extra[key] if key in r.extra else getattr(r, key) for r in runs]
        values = [v for v in values if v is not None]
        if values:
            out[key] = summarize(values, digits)
    out["runs"] = [r.recorded() for r in runs]
    return out


def ratios(contenders: dict, keys: tuple[str, ...], ours: str = "streamling") -> dict:
    """ours / peer, on medians: above 1 means more of that figure for us (good for rec/s, bad for the rest)."""
    mine = contenders[ours]
    return {
        peer: {
            k: round(mine[k]["median"] / contenders[peer][k]["median"], 2)
            for k in keys
            if k in mine and k in contenders[peer] and contenders[peer][k]["median"]
        }
        for peer in contenders
        if peer != ours
    }


def record(name: str, payload: dict, directory: Path = RESULTS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{name}-{stamp}.json"
    path.write_text(json.dumps({"scenario": name, "recorded_at": stamp, "machine": machine(), **payload}, indent=2))
    return path


def streamling_cmd() -> list[str]:
    return [str(Path(sys.executable).with_name("streamling"))]
