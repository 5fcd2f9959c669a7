"""Which packer ships the executors' Python environment: venv-pack or PEX, decided by measurement.

    .venv/bin/python bench/packed_env.py [--runs K] [--pex-venv /tmp/pexenv]

A cluster's executors receive the engine's Python environment with the job (`spark.archives`; PySpark's
package-management guide names venv-pack, conda-pack and PEX). engine/streamling/spark/packed_env.py packs it
with venv-pack; this script exists to back (or overturn) that choice with figures, on the same staged venv
(`packed_env.stage`) for every contender:

- **venv_pack**: ``venv_pack.pack(..., format="tar.gz", compress_level=4)``, as `packed_env.build` does;
- **pex**: ``pex --venv-repository <staged venv> <every staged distribution pinned> -o env.pex`` (offline: the
  distributions come out of the staged venv, nothing is downloaded), a zipapp PEX;
- **pex_venv**: the same with ``--venv`` (on first run the PEX becomes a venv under ``PEX_ROOT``).

conda-pack is not measured: it packs conda environments and there is no conda on this machine.

Per contender and run: the build time (the pack step; staging is common to all and timed once) and the archive's
size; what a fresh executor pays once (venv-pack: ``tar xzf`` into an empty directory, then the first
``./env/bin/python -c IMPORTS``; PEX: the first ``python3.11 env.pex -c IMPORTS`` with an empty ``PEX_ROOT``,
which extracts it); the warm start every further Python process pays (the same command again: ``__pycache__`` now
written, the same ``PEX_ROOT``); and the disk the unpacked environment takes. Wall clock by ``perf_counter``,
CPU (user + sys) and peak RSS from ``os.wait4`` on the child, exact for short processes (the harness's sampler
misses up to an interval of them). Runs are sequential; the load average is recorded before and after.

The child processes run with a minimal environment without ``PYTHONDONTWRITEBYTECODE`` (set in this repository's
shells; an executor does not set it, and without bytecode every start would recompile). The page cache is not
dropped: a real fresh node also reads the archive and the interpreter from disk, which is not counted here.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import record, summarize

from streamling.spark import packed_env

IMPORTS = "import streamling, pyarrow, polars, pandas, confluent_kafka, psycopg, httpx"
CHECK = (
    "import sys, streamling; from importlib.metadata import entry_points; from pathlib import Path; "
    "print(streamling.__file__); print(sorted(e.name for e in entry_points(group='streamling.plugins'))); "
    "print((Path(sys.prefix) / 'share' / 'streamling' / 'sucrase.js').is_file())"
)
"""Run once per contender (not timed): where ``streamling`` comes from, whether the engine's plugin entry point is
visible (the built-in operators register through it) and whether the Sucrase bundle is under ``sys.prefix``."""
BASE_PYTHON = os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]
PEX_VERSION = "2.105.2"
CONTENDERS = ("venv_pack", "pex", "pex_venv")
MB = 1e6


@dataclass
class Run:
    """One child process: wall seconds, CPU seconds (user + sys, its waited-for children included), peak RSS."""

    wall_sec: float
    cpu_sec: float
    peak_rss_mb: float


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> Run:
    """Run `cmd` to its end; fails loudly (with its stderr) if it does."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{cmd[:3]}... exited {proc.returncode}: {err.read().decode()[-3000:]}")
    return Run(round(wall, 3), round(usage.ru_utime + usage.ru_stime, 3), round(usage.ru_maxrss / 1024, 1))


def output(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    return subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True).stdout


def child_env(**extra: str) -> dict[str, str]:
    """What the executor's processes see here: no PYTHONDONTWRITEBYTECODE, PYTHONPATH or venv of ours."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def disk_mb(path: Path) -> float:
    """Bytes on disk (``du``: allocated blocks, hard links once, symlinks not followed), in MB."""
    return round(int(output(["du", "-sk", str(path)], child_env()).split()[0]) * 1024 / MB, 1)


def pex_tool(scratch: Path) -> Path:
    """The ``pex`` command of a scratch venv, created and installed into on first use."""
    pex = scratch / "bin" / "pex"
    if not pex.is_file():
        subprocess.run([BASE_PYTHON, "-m", "venv", str(scratch)], check=True)
        subprocess.run([str(scratch / "bin" / "pip"), "install", "-q", f"pex=={PEX_VERSION}"], check=True)
    return pex


def make_wheel_like(site: Path) -> None:
    """Give the engine's dist-info in the staged venv a WHEEL and a RECORD, as an installed wheel has.

    `packed_env.stage` writes only METADATA and entry_points.txt for it (venv-pack needs no more); PEX's
    ``--venv-repository`` turns every installed distribution back into a wheel and refuses one without WHEEL. With
    these the engine goes into the PEX as a distribution, its ``streamling.plugins`` entry point included."""
    info = next(site.glob(f"{packed_env.DISTRIBUTION.replace('-', '_')}-*.dist-info"))
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    rows = []
    for path in sorted([*(site / "streamling").rglob("*"), *info.iterdir()]):
        if path.is_file():
            digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
            rows.append(f"{path.relative_to(site).as_posix()},sha256={digest},{path.stat().st_size}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def build(name: str, staged: Path, requirements: Path, out_dir: Path, pex: Path, pex_root: Path) -> tuple[Path, Run]:
    """Pack the staged venv as contender `name`; PEX builds with `pex_root` as its cache."""
    if name == "venv_pack":
        archive = out_dir / "env.tar.gz"
        code = (
            "import sys, venv_pack; venv_pack.pack(prefix=sys.argv[1], output=sys.argv[2], format='tar.gz', "
            "compress_level=4)"
        )
        env = child_env(PYTHONDONTWRITEBYTECODE="1")
        return archive, run([sys.executable, "-c", code, str(staged), str(archive)], env)
    archive = out_dir / f"{name}.pex"
    cmd = [str(pex), "--venv-repository", str(staged), "-r", str(requirements), "-o", str(archive)]
    if name == "pex_venv":
        cmd.append("--venv")
    # the wheels' RECORDs list console scripts stage() leaves out: pex warns about each, harmlessly
    env = child_env(PEX_ROOT=str(pex_root), PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore")
    return archive, run(cmd, env)


def on_fresh_node(name: str, archive: Path, node: Path) -> dict[str, object]:
    """What an executor pays: unpack (venv-pack) and the first start, then a warm start; and the disk it took."""
    node.mkdir()
    figures: dict[str, object] = {}
    unpack = Run(0.0, 0.0, 0.0)
    if name == "venv_pack":
        (node / "env").mkdir()
        unpack = run(["tar", "xzf", str(archive), "-C", str(node / "env")], child_env())
        cmd, env, unpacked = ["./env/bin/python", "-c", IMPORTS], child_env(), node / "env"
        figures["unpack"] = asdict(unpack)
    else:
        unpacked = node / "pex_root"
        cmd, env = [BASE_PYTHON, str(archive), "-c", IMPORTS], child_env(PEX_ROOT=str(unpacked))
    first = run(cmd, env, cwd=node)
    figures["first_start"] = asdict(first)
    figures["cold_total"] = {
        "wall_sec": round(first.wall_sec + unpack.wall_sec, 3),
        "cpu_sec": round(first.cpu_sec + unpack.cpu_sec, 3),
    }
    figures["warm_start"] = asdict(run(cmd, env, cwd=node))
    figures["disk_mb"] = disk_mb(unpacked)
    figures["check"] = output([*cmd[:-1], CHECK], env, cwd=node).split("\n")[:3]
    return figures


def medians(runs: list[dict[str, object]], *path: str) -> dict[str, float]:
    values: list[float] = []
    for figures in runs:
        value: object = figures
        for key in path:
            value = value[key]  # type: ignore[index]
        values.append(float(value))  # type: ignore[arg-type]
    return summarize(values, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pex-venv", type=Path, default=Path("/tmp/pexenv"))
    args = parser.parse_args()

    load_before = os.getloadavg()
    if load_before[0] > 1.0:
        print(f"note: load average {load_before[0]:.2f} on {os.cpu_count()} cores before the runs", file=sys.stderr)
    pex = pex_tool(args.pex_venv)
    pex_version = output([str(pex), "--version"], child_env()).strip()
    results: dict[str, list[dict[str, object]]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="packed-env-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        staged = scratch / "staged"
        started = time.perf_counter()
        wanted = packed_env.contents()
        packed_env.stage(wanted, staged)
        stage_sec = round(time.perf_counter() - started, 2)
        site = next((staged / "lib").glob("python3.*/site-packages"))
        make_wheel_like(site)
        requirements = scratch / "requirements.txt"
        pins = {name: dist.version for name, dist in wanted.distributions.items()}
        pins[packed_env.DISTRIBUTION] = packed_env._distribution(packed_env.DISTRIBUTION).version
        requirements.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
        staged_mb = disk_mb(staged)
        warm_rebuild: dict[str, dict[str, object]] = {}
        for index in range(args.runs):
            for name in CONTENDERS:
                load_1min = os.getloadavg()[0]
                out_dir, pex_root = scratch / f"{name}-{index}", scratch / f"{name}-{index}-build-root"
                out_dir.mkdir()
                archive, built = build(name, staged, requirements, out_dir, pex, pex_root)
                figures: dict[str, object] = {
                    "load_1min_before": round(load_1min, 2),
                    "build": asdict(built),
                    "archive_mb": round(archive.stat().st_size / MB, 1),
                }
                figures.update(on_fresh_node(name, archive, scratch / f"{name}-{index}-node"))
                if name != "venv_pack" and index == args.runs - 1:
                    # a rebuild with the build cache of the last one (nothing changed): what `auto` would pay
                    warm_rebuild[name] = asdict(build(name, staged, requirements, out_dir, pex, pex_root)[1])
                results[name].append(figures)
                shown = {k: v for k, v in figures.items() if k != "check"}
                print(f"run {index + 1}/{args.runs} {name}: {json.dumps(shown)}", flush=True)
                shutil.rmtree(out_dir)
                shutil.rmtree(scratch / f"{name}-{index}-node")
                shutil.rmtree(pex_root, ignore_errors=True)
        pyc_in_staged = sum(1 for _ in staged.rglob("*.pyc"))
    load_after = os.getloadavg()

    summary: dict[str, dict[str, object]] = {}
    for name, runs in results.items():
        summary[name] = {
            "build_sec": medians(runs, "build", "wall_sec"),
            "build_cpu_sec": medians(runs, "build", "cpu_sec"),
            "archive_mb": medians(runs, "archive_mb"),
            "cold_wall_sec": medians(runs, "cold_total", "wall_sec"),
            "cold_cpu_sec": medians(runs, "cold_total", "cpu_sec"),
            "first_start_wall_sec": medians(runs, "first_start", "wall_sec"),
            "warm_wall_sec": medians(runs, "warm_start", "wall_sec"),
            "warm_cpu_sec": medians(runs, "warm_start", "cpu_sec"),
            "warm_peak_rss_mb": medians(runs, "warm_start", "peak_rss_mb"),
            "disk_mb": medians(runs, "disk_mb"),
            "check": runs[0]["check"],
        }
        if name == "venv_pack":
            summary[name]["unpack_wall_sec"] = medians(runs, "unpack", "wall_sec")
        if name in warm_rebuild:
            summary[name]["rebuild_warm_cache"] = warm_rebuild[name]

    columns = [
        ("build s", "build_sec"),
        ("archive MB", "archive_mb"),
        ("cold wall s", "cold_wall_sec"),
        ("cold CPU s", "cold_cpu_sec"),
        ("warm wall s", "warm_wall_sec"),
        ("warm CPU s", "warm_cpu_sec"),
        ("disk MB", "disk_mb"),
    ]
    print(f"\nmedian of {args.runs} runs (min-max); staged venv: {staged_mb:.0f} MB, staged in {stage_sec} s")
    print(f"{'':10}" + "".join(f"{label:>21}" for label, _ in columns))
    for name, figures in summary.items():
        cells = []
        for _, key in columns:
            stats = figures[key]
            cells.append(f"{stats['median']:g} ({stats['min']:g}-{stats['max']:g})")  # type: ignore[index]
        print(f"{name:10}" + "".join(f"{cell:>21}" for cell in cells))
    for name, figures in summary.items():
        print(
            f"{name}: streamling from {figures['check'][0]}; plugins {figures['check'][1]}; "  # type: ignore[index]
            f"sucrase under sys.prefix: {figures['check'][2]}"
        )  # type: ignore[index]
    path = record(
        "packed_env",
        {
            "imports": IMPORTS,
            "interpreter": BASE_PYTHON,
            "pex": pex_version,
            "conda_pack": "not measured: conda-pack packs conda environments, and there is no conda on this machine",
            "distributions": len(wanted.distributions) + 1,
            "staged_mb": staged_mb,
            "stage_sec": stage_sec,
            "pyc_in_staged_after_builds": pyc_in_staged,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            "mb": "10^6 bytes",
            "summary": summary,
            "runs": results,
        },
    )
    print(f"recorded {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
