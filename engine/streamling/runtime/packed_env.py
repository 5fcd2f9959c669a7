"""The packed environment a cluster's executors run: the engine, its dependencies and the plugins, as one archive.

A Spark cluster's workers have Python and Java, not this venv. PySpark's package-management guide ships the job's
Python environment with the job (``spark.archives=env.tar.gz#alias``, ``PYSPARK_PYTHON=./alias/bin/python``); this
module builds that archive with venv-pack from a staged venv that holds only what the executors import:

- the runtime closure of the ``streamling-spark`` distribution's requirements, without pyspark (the cluster's Spark
  puts its own ``python/lib/pyspark.zip`` first on every executor's path, and its 490 MB of jars are the cluster's),
  the control plane (Dagster, its web server, dg) and the embedded ClickHouse engine (`LEFT_OUT`);
- the ``streamling`` package itself, copied even from an editable install, with its entry points;
- the installed plugins (their distributions and closures, compiled extensions included) and the plugins loaded from
  ``STREAMLING__PLUGIN__PATH``;
- the Sucrase bundle (``share/streamling/sucrase.js``), where the engine looks for it under ``sys.prefix``.

venv-pack over PEX (bench/README.md, "Packed environment"): the archive is unpacked once per executor by Spark, and
its Python then starts like any venv's; a PEX is unzipped into ``PEX_ROOT`` by the first process of each executor,
and every Python worker pays PEX's bootstrap. The venv links the interpreter it was made with, so the workers need
the same CPython at the same path (as venv-pack documents), and the archive is for this machine's platform.

``spark.environment_archive: auto`` builds the archive on the first cluster run into the engine's cache, keyed by
everything that goes in it, and reuses it until one of those changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import time
import venv
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pyspark import SparkConf

import streamling
from streamling.errors import StreamlingError
from streamling.plugins.loader import plugin_roots

log = logging.getLogger("streamling.runtime")

DISTRIBUTION = "streamling-spark"
ALIAS = "streamling_env"
"""The folder the archive is unpacked into in each executor's working directory (``spark.archives``'s fragment)."""
EXECUTOR_PYTHON = f"./{ALIAS}/bin/python"
LEFT_OUT = frozenset(
    canonicalize_name(name)
    for name in ("pyspark", "dagster", "dagster-pyspark", "dagster-webserver", "dagster-dg-cli", "chdb", "chdb-core")
)
"""Requirements of the engine the executors never import: the cluster's own pyspark, the control plane, and the
embedded ClickHouse engine (580 MB; it lives in one process, the driver, which is why a multi-machine deployment
names a ClickHouse server instead: docs/deploying.md)."""
PLUGIN_GROUP = "streamling.plugins"
MANIFEST = "streamling-env.json"
"""Written into the archive's root: what it holds and for which interpreter, for `streamling package` and operators."""


@dataclass
class Contents:
    """What goes into one archive."""

    distributions: dict[str, metadata.Distribution] = field(default_factory=dict)
    path_plugins: list[Path] = field(default_factory=list)
    sucrase: Path | None = None

    def digest(self) -> str:
        """Changes whenever any file that goes into the archive changes (by path, size and modification time)."""
        sha = hashlib.sha256(f"{sys.version}|{platform_tag()}|{ALIAS}".encode())
        for name in sorted(self.distributions):
            sha.update(f"|{name}=={self.distributions[name].version}".encode())
        for root in [Path(streamling.__file__).parent, *self.path_plugins, *filter(None, [self.sucrase])]:
            for path in sorted(_files(root)):
                stat = path.stat()
                sha.update(f"|{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return sha.hexdigest()[:16]


def platform_tag() -> str:
    """The interpreter and platform the archive's compiled wheels are for, e.g. ``cp311-linux_x86_64``."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform().replace('-', '_')}"


def contents(plugin_paths: Iterable[Path] = ()) -> Contents:
    """The distributions (the engine's runtime closure and the installed plugins'), path plugins and Sucrase."""
    from streamling.script.typescript import bundle_path

    wanted = Contents(path_plugins=[Path(p).resolve() for p in plugin_paths])
    roots = [Requirement(r) for r in (_distribution(DISTRIBUTION).requires or [])]
    for ep in metadata.entry_points(group=PLUGIN_GROUP):
        if ep.dist is not None and canonicalize_name(ep.dist.metadata["Name"]) != canonicalize_name(DISTRIBUTION):
            roots.append(Requirement(ep.dist.metadata["Name"]))
    _close_over(roots, wanted.distributions)
    sucrase = bundle_path()
    wanted.sucrase = sucrase if sucrase.is_file() else None
    return wanted


def _close_over(requirements: list[Requirement], into: dict[str, metadata.Distribution]) -> None:
    """Add each requirement that applies here and its own requirements, transitively (extras included)."""
    pending = [(req, "") for req in requirements]
    while pending:
        req, extra = pending.pop()
        name = canonicalize_name(req.name)
        if name in LEFT_OUT or (req.marker is not None and not req.marker.evaluate({**_ENV, "extra": extra})):
            continue
        first = name not in into
        dist = into.setdefault(name, _distribution(req.name))
        for wanted_extra in sorted(req.extras) if req.extras else ([""] if first else []):
            for sub in dist.requires or []:
                pending.append((Requirement(sub), wanted_extra))


_ENV = {key: value for key, value in default_environment().items()}


def _distribution(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise StreamlingError(
            f"cannot pack the environment: the distribution '{name}' is required but not installed in "
            f"{sys.prefix}; install it (`./dev setup`) and run `streamling package` again"
        ) from None


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for path in root.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path


def stage(wanted: Contents, target: Path) -> None:
    """A venv at `target` (the interpreter linked, no pip) holding exactly `wanted`."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(target), "platbase": str(target)}))
    engine_name = canonicalize_name(DISTRIBUTION)
    for name, dist in sorted(wanted.distributions.items()):
        if name == engine_name:
            continue
        _copy_distribution(dist, site)
    _copy_engine(site)
    for location in wanted.path_plugins:
        for name, root in plugin_roots(location):
            if root.is_dir():
                shutil.copytree(root, site / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(root, site / f"{name}.py")
    if wanted.sucrase is not None:
        share = target / "share" / "streamling"
        share.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wanted.sucrase, share / "sucrase.js")
    manifest = {
        "python": platform.python_version(),
        "platform": platform_tag(),
        "interpreter": os.path.realpath(sys._base_executable),  # type: ignore[attr-defined]
        "engine": streamling.__version__,
        "distributions": {name: d.version for name, d in sorted(wanted.distributions.items())},
        "path_plugins": [str(p) for p in wanted.path_plugins],
        "sucrase": wanted.sucrase is not None,
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Copy the files its RECORD lists under site-packages (scripts and data outside it are left out)."""
    base = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        source = Path(str(dist.locate_file(entry))).resolve()
        if "__pycache__" in entry.parts or not source.is_file():
            continue
        try:
            relative = source.relative_to(base)
        except ValueError:
            continue
        if relative.parts and relative.parts[0] == "..":
            continue
        destination = site / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _copy_engine(site: Path) -> None:
    """The ``streamling`` package (also from an editable install) and a dist-info with its entry points."""
    package = Path(streamling.__file__).parent
    shutil.copytree(package, site / "streamling", ignore=shutil.ignore_patterns("__pycache__"))
    engine = _distribution(DISTRIBUTION)
    info = site / f"{DISTRIBUTION.replace('-', '_')}-{engine.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {engine.version}\n")
    entry_points = engine.read_text("entry_points.txt") or ""
    (info / "entry_points.txt").write_text(entry_points)
    (info / "INSTALLER").write_text("streamling package\n")


def build(output: Path, plugin_paths: Iterable[Path] = (), compress_level: int = 4) -> dict[str, object]:
    """Stage and pack the archive at `output`; returns the figures `streamling package` prints."""
    import venv_pack

    started = time.monotonic()
    wanted = contents(plugin_paths)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamling-env-") as scratch:
        staged = Path(scratch) / "env"
        stage(wanted, staged)
        staged_bytes = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file() and not p.is_symlink())
        partial = output.with_name(f".{output.name}.{os.getpid()}.partial")  # two runs packing at once both finish
        partial.unlink(missing_ok=True)
        venv_pack.pack(prefix=str(staged), output=str(partial), format="tar.gz", compress_level=compress_level)
        partial.replace(output)
    return {
        "archive": str(output),
        "bytes": output.stat().st_size,
        "unpacked_bytes": staged_bytes,
        "distributions": len(wanted.distributions),
        "path_plugins": len(wanted.path_plugins),
        "sucrase": wanted.sucrase is not None,
        "platform": platform_tag(),
        "seconds": round(time.monotonic() - started, 1),
    }


def shipped(conf: SparkConf) -> bool:
    """Whether this context's executors run the packed environment (it then holds the engine and the installed
    plugins, which are not shipped again as zips)."""
    return any(entry.strip().endswith(f"#{ALIAS}") for entry in (conf.get("spark.archives") or "").split(","))


def driver_directory() -> str:
    """The working directory of a driver JVM whose Python is `EXECUTOR_PYTHON`.

    Spark runs that one command on the executors, where the archive is unpacked into their working directory, and
    on the driver, whose planner processes (Python data sources, `PythonPlannerRunner`) start ``func.pythonExec``
    too, relative to the JVM's working directory. Here `ALIAS` links to this interpreter's environment, which is
    the one that was packed."""
    from streamling.runtime.spark_home import cache_dir

    root = Path(cache_dir() or tempfile.gettempdir()) / "driver" / hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    root.mkdir(parents=True, exist_ok=True)
    link = root / ALIAS
    if not (link.is_symlink() and os.readlink(link) == sys.prefix):
        temporary = root / f".{ALIAS}.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(sys.prefix, target_is_directory=True)
        temporary.replace(link)
    return str(root)


def resolve(setting: str, plugin_paths: Iterable[Path] = ()) -> Path:
    """The archive a run ships: `setting` is a path to one `streamling package` built, or ``auto`` for one built
    (once per content digest) into the engine's cache directory. A run's path plugins travel as zips
    (`plugins.shipping`), so ``auto`` packs the engine and the installed plugins."""
    if setting != "auto":
        path = Path(setting).expanduser().resolve()
        if not path.is_file():
            raise StreamlingError(
                f"spark.environment_archive: '{setting}' is not a file; build it with `streamling package "
                f"--output {setting}` or set it to 'auto'"
            )
        return path
    from streamling.runtime.spark_home import cache_dir

    cache = cache_dir()
    if cache is None:
        raise StreamlingError(
            "spark.environment_archive: 'auto' needs a writable cache directory (STREAMLING_CACHE_DIR)"
        )
    wanted = list(plugin_paths)
    target = cache / "environments" / f"streamling-env-{platform_tag()}-{contents(wanted).digest()}.tar.gz"
    if not target.is_file():
        log.info("Packing the executors' Python environment into %s", target)
        figures = build(target, wanted)
        log.info(
            "Packed %s distributions into %.0f MB in %.1f s",
            figures["distributions"],
            int(figures["bytes"]) / 1e6,
            figures["seconds"],
        )  # type: ignore[call-overload]
        for old in target.parent.glob(f"streamling-env-{platform_tag()}-*.tar.gz"):
            if old != target:
                old.unlink(missing_ok=True)
    return target


def plugin_paths_from(location: str | None) -> list[Path]:
    """``STREAMLING__PLUGIN__PATH``'s entries (``os.pathsep``-separated), the way the plugin loader splits them."""
    return [Path(part.strip()).expanduser() for part in (location or "").split(os.pathsep) if part.strip()]


def main(argv: list[str]) -> int:
    """``streamling package [--output FILE] [--plugin-path PATHS] [--config NAME_OR_PATH]``."""
    import argparse

    from streamling.config import load_settings

    parser = argparse.ArgumentParser(
        prog="streamling package",
        description="Pack the Python environment a Spark cluster's executors run: the engine, its dependencies and "
        "the plugins, for spark.archives (set spark.environment_archive to the file).",
    )
    parser.add_argument("--output", "-o", metavar="FILE", help=f"default: ./streamling-env-{platform_tag()}.tar.gz")
    parser.add_argument(
        "--plugin-path", metavar="PATHS", help="plugins loaded by path to include (default: STREAMLING__PLUGIN__PATH)"
    )
    parser.add_argument("--config", metavar="NAME_OR_PATH", help="config file to read plugin.path from")
    args = parser.parse_args(argv)
    try:
        location = args.plugin_path if args.plugin_path is not None else load_settings(args.config).plugin.path
        paths = plugin_paths_from(location)
        for path in paths:
            if not path.exists():
                raise StreamlingError(f"plugin path '{path}' does not exist (--plugin-path / STREAMLING__PLUGIN__PATH)")
        output = Path(args.output or f"streamling-env-{platform_tag()}.tar.gz").resolve()
        figures = build(output, paths)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2
    print(
        f"Packed the engine, {figures['distributions']} distributions and {figures['path_plugins']} path plugin "
        f"folder(s) into {output} ({int(figures['bytes']) / 1e6:.0f} MB, {int(figures['unpacked_bytes']) / 1e6:.0f} MB "  # type: ignore[call-overload]
        f"unpacked) in {figures['seconds']} s, for {figures['platform']}: executors need Python "
        f"{platform.python_version()} at {os.path.realpath(sys._base_executable)}"  # type: ignore[attr-defined]
    )
    print(f"Run on a cluster with STREAMLING__SPARK__ENVIRONMENT_ARCHIVE={output}")
    return 0
