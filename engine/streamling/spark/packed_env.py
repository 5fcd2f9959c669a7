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
everything that goes in it, and reuses it until one of those changes. Beside each archive, ``<archive>.json`` holds
its manifest and content digest: a run warns when a named archive was built from other files than its own, and
does not ship again as zips the path plugins the archive holds.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamling
from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from packaging.requirements import Requirement
    from pyspark import SparkConf

log = logging.getLogger("streamling.spark")

DISTRIBUTION = "streamling-spark"
ALIAS = "streamling_env"
"""The folder the archive is unpacked into in each executor's working directory (``spark.archives``'s fragment)."""
EXECUTOR_PYTHON = f"./{ALIAS}/bin/python"
LEFT_OUT = frozenset(
    ("pyspark", "dagster", "dagster-spark", "dagster-webserver", "dagster-dg-cli", "chdb", "chdb-core")
)
"""Requirements of the engine the executors never import (canonical names): the cluster's own pyspark, the control
plane, and the embedded ClickHouse engine (580 MB; it lives in one process, the driver, which is why a
multi-machine deployment names a ClickHouse server instead: docs/deploying.md)."""
PLUGIN_GROUP = "streamling.plugins"
MANIFEST = "streamling-env.json"
"""Written into the archive's root, and beside it as ``<archive>.json`` with the content digest."""
KEEP_UNUSED_SEC = 7 * 24 * 3600.0
"""How long an ``auto`` archive nobody used stays in the cache: a driver serves its archive to executors for the
application's whole life (a replacement executor fetches it again), so a newer one never deletes it at once."""


@dataclass
class Contents:
    """What goes into one archive."""

    distributions: dict[str, metadata.Distribution] = field(default_factory=dict)
    editable: dict[str, Path] = field(default_factory=dict)
    """Top-level packages of plugins installed editable (``pip install -e``), copied from their source folders."""
    path_plugins: list[Path] = field(default_factory=list)
    sucrase: Path | None = None

    def digest(self) -> str:
        """Changes whenever anything that goes into the archive changes: the interpreter, the distributions'
        versions, the engine's entry points, and every copied file (by path, size and modification time)."""
        from streamling.spark.spark_home import digest

        engine_entry_points = _distribution(DISTRIBUTION).read_text("entry_points.txt") or ""
        parts: list[object] = [sys.version, os.path.realpath(sys._base_executable), platform_tag(), ALIAS]  # type: ignore[attr-defined]
        parts += [engine_entry_points, *(f"{n}=={d.version}" for n, d in sorted(self.distributions.items()))]
        roots = [Path(streamling.__file__).parent, *self.editable.values(), *self.path_plugins]
        for root in [*roots, *filter(None, [self.sucrase])]:
            for path in sorted(_files(root)):
                stat = path.stat()
                parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
        return digest(*parts)


@dataclass
class Packed:
    """What `build` made, as `streamling package` prints it."""

    archive: Path
    bytes: int
    unpacked_bytes: int
    distributions: int
    path_plugins: int
    sucrase: bool
    platform: str
    seconds: float


def platform_tag() -> str:
    """The interpreter and platform the archive's compiled wheels are for, e.g. ``cp311-linux_x86_64``."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform().replace('-', '_')}"


def contents(plugin_paths: Iterable[Path] = ()) -> Contents:
    """The distributions (the engine's runtime closure and the installed plugins'), path plugins and Sucrase."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from streamling.script.typescript import bundle_path

    wanted = Contents(path_plugins=[Path(p).resolve() for p in plugin_paths])
    roots = [Requirement(r) for r in (_distribution(DISTRIBUTION).requires or [])]
    for ep in metadata.entry_points(group=PLUGIN_GROUP):
        if ep.dist is None or canonicalize_name(ep.dist.metadata["Name"]) == DISTRIBUTION:
            continue
        roots.append(Requirement(ep.dist.metadata["Name"]))
        if _editable(ep.dist):
            top = ep.module.split(".")[0]
            wanted.editable[top] = _package_root(top)
    _close_over(roots, wanted.distributions)
    sucrase = bundle_path()
    wanted.sucrase = sucrase if sucrase.is_file() else None
    return wanted


def _close_over(requirements: list[Requirement], into: dict[str, metadata.Distribution]) -> None:
    """Add each requirement that applies here and its own requirements, transitively (extras included); each
    distribution's requirements are expanded once per extra asked for (``""`` for none)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    environment = dict(default_environment())
    expanded: set[tuple[str, str]] = set()
    pending = [(req, "") for req in requirements]
    while pending:
        req, extra = pending.pop()
        name = canonicalize_name(req.name)
        if name in LEFT_OUT or (req.marker is not None and not req.marker.evaluate({**environment, "extra": extra})):
            continue
        if name not in into:
            into[name] = _distribution(req.name)
        for wanted_extra in ["", *sorted(req.extras)]:
            if (name, wanted_extra) not in expanded:
                expanded.add((name, wanted_extra))
                pending += [(Requirement(sub), wanted_extra) for sub in into[name].requires or []]


def _distribution(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise StreamlingError(
            f"cannot pack the environment: the distribution '{name}' is required but not installed in "
            f"{sys.prefix}; install it (`./dev setup`) and run `streamling package` again"
        ) from None


def _editable(dist: metadata.Distribution) -> bool:
    """Installed with ``pip install -e``: its RECORD lists a path hook into a source folder, not the code."""
    try:
        return bool(json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable"))
    except ValueError:
        return False


def _package_root(top: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise StreamlingError(f"cannot pack the environment: the installed plugin package '{top}' cannot be found")
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for path in root.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path


def stage(wanted: Contents, target: Path) -> dict[str, Any]:
    """A venv at `target` (the interpreter linked, no pip) holding exactly `wanted`; returns its manifest."""
    import venv

    from streamling.plugins.loader import plugin_roots

    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(target), "platbase": str(target)}))
    for name, dist in sorted(wanted.distributions.items()):
        if name != DISTRIBUTION:
            _copy_distribution(dist, site, metadata_only=_editable(dist))
    _copy_tree(Path(streamling.__file__).parent, site / "streamling")
    _engine_info(site)
    for top, root in sorted(wanted.editable.items()):
        _copy_tree(root, site / (top if root.is_dir() else f"{top}.py"))
    for location in wanted.path_plugins:
        for name, root in plugin_roots(location):
            _copy_tree(root, site / (name if root.is_dir() else f"{name}.py"))
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
        "editable_plugins": sorted(wanted.editable),
        "path_plugins": [str(p) for p in wanted.path_plugins],
        "sucrase": wanted.sucrase is not None,
        "digest": wanted.digest(),
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _copy_tree(source: Path, destination: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(source, destination)


def _copy_distribution(dist: metadata.Distribution, site: Path, metadata_only: bool = False) -> None:
    """Copy the files its RECORD lists under site-packages (scripts and data outside it are left out); of an
    editable install only its metadata (its code is copied from the source folder, `Contents.editable`)."""
    base = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        source = Path(str(dist.locate_file(entry))).resolve()
        if "__pycache__" in entry.parts or not source.is_file():
            continue
        try:
            relative = source.relative_to(base)
        except ValueError:  # outside site-packages: a console script, data files
            continue
        if metadata_only and not relative.parts[0].endswith(".dist-info"):
            continue
        destination = site / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _engine_info(site: Path) -> None:
    """A dist-info for the engine (also from an editable install) with its entry points: the built-in operators
    register through them on the executors as on the driver."""
    engine = _distribution(DISTRIBUTION)
    info = site / f"{DISTRIBUTION.replace('-', '_')}-{engine.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {engine.version}\n")
    (info / "entry_points.txt").write_text(engine.read_text("entry_points.txt") or "")
    (info / "INSTALLER").write_text("streamling package\n")


def build(output: Path, plugin_paths: Iterable[Path] = (), compress_level: int = 4) -> Packed:
    """Stage and pack the archive at `output`, its manifest beside it (``<archive>.json``)."""
    import venv_pack

    started = time.monotonic()
    wanted = contents(plugin_paths)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamling-env-") as scratch:
        staged = Path(scratch) / "env"
        manifest = stage(wanted, staged)
        staged_bytes = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file() and not p.is_symlink())
        partial = output.with_name(f".{output.name}.{os.getpid()}.partial")  # two runs packing at once both finish
        partial.unlink(missing_ok=True)
        venv_pack.pack(prefix=str(staged), output=str(partial), format="tar.gz", compress_level=compress_level)
        _sidecar(output).write_text(json.dumps(manifest, indent=2) + "\n")
        partial.replace(output)
    return Packed(
        archive=output,
        bytes=output.stat().st_size,
        unpacked_bytes=staged_bytes,
        distributions=len(wanted.distributions),
        path_plugins=len(wanted.path_plugins),
        sucrase=wanted.sucrase is not None,
        platform=platform_tag(),
        seconds=round(time.monotonic() - started, 1),
    )


def _sidecar(archive: Path) -> Path:
    return archive.with_name(archive.name + ".json")


def manifest_of(archive: Path) -> dict[str, Any] | None:
    """The manifest `build` wrote beside `archive`; None for an archive built otherwise."""
    try:
        return json.loads(_sidecar(archive).read_text())
    except (OSError, ValueError):
        return None


def archive_of(conf: SparkConf) -> Path | None:
    """The packed environment this context's executors run, if any (it then holds the engine and the installed
    plugins, which are not shipped again as zips)."""
    for entry in (conf.get("spark.archives") or "").split(","):
        path, _, alias = entry.strip().rpartition("#")
        if alias == ALIAS:
            return Path(path)
    return None


def packed_path_plugins(conf: SparkConf) -> set[Path]:
    """The path plugin folders and files the context's archive holds (from its manifest)."""
    archive = archive_of(conf)
    manifest = manifest_of(archive) if archive is not None else None
    return {Path(p) for p in (manifest or {}).get("path_plugins", [])}


def driver_directory() -> str:
    """The working directory of a driver JVM whose Python is `EXECUTOR_PYTHON`.

    Spark runs that one command on the executors, where the archive is unpacked into their working directory, and
    on the driver, whose planner processes (Python data sources, `PythonPlannerRunner`) start ``func.pythonExec``
    too, relative to the JVM's working directory. Here `ALIAS` links to this interpreter's environment, which is
    the one that was packed. The folder is this user's (0700), in the engine's cache or else the temp directory."""
    from streamling.spark.spark_home import cache_dir, digest

    base = cache_dir() or Path(tempfile.gettempdir()) / f"streamling-{os.getuid()}"
    root = base / "driver" / digest(sys.prefix)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid != os.getuid():
        raise StreamlingError(f"the driver's folder {root} belongs to another user; set STREAMLING_CACHE_DIR")
    link = root / ALIAS
    if not (link.is_symlink() and os.readlink(link) == sys.prefix):
        temporary = root / f".{ALIAS}.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(sys.prefix, target_is_directory=True)
        temporary.replace(link)
    return str(root)


def resolve(setting: str) -> Path:
    """The archive a run ships: `setting` is a path to one `streamling package` built, or ``auto`` for one built
    (once per content digest) into the engine's cache directory. A run's path plugins travel as zips
    (`spark/shipping.py`) unless the archive holds them, so ``auto`` packs the engine and the installed plugins."""
    if setting != "auto":
        path = Path(setting).expanduser().resolve()
        if not path.is_file():
            raise StreamlingError(
                f"spark.environment_archive: '{setting}' is not a file; build it with `streamling package "
                f"--output {setting}` or set it to 'auto'"
            )
        _warn_if_stale(path)
        return path
    from streamling.spark.spark_home import cache_dir

    cache = cache_dir()
    if cache is None:
        raise StreamlingError(
            "spark.environment_archive: 'auto' needs a writable cache directory (set STREAMLING_CACHE_DIR)"
        )
    target = cache / "environments" / f"streamling-env-{platform_tag()}-{contents().digest()}.tar.gz"
    if target.is_file():
        os.utime(target)  # in use: `_prune` keeps it
    else:
        log.info("Packing the executors' Python environment into %s", target)
        packed = build(target)
        log.info(
            "Packed %s distributions into %.0f MB in %.1f s", packed.distributions, packed.bytes / 1e6, packed.seconds
        )
        _prune(target)
    return target


def _warn_if_stale(archive: Path) -> None:
    manifest = manifest_of(archive)
    if manifest is None:
        return
    current = contents([Path(p) for p in manifest.get("path_plugins", [])]).digest()
    if manifest.get("digest") != current:
        log.warning(
            "spark.environment_archive %s was built from other engine, package or plugin files than this driver "
            "runs (the executors would run the archive's); rebuild it with `streamling package --output %s`",
            archive,
            archive,
        )


def _prune(kept: Path) -> None:
    """Delete the cache's other ``auto`` archives that nobody used for `KEEP_UNUSED_SEC`."""
    cutoff = time.time() - KEEP_UNUSED_SEC
    for old in kept.parent.glob(f"streamling-env-{platform_tag()}-*.tar.gz"):
        if old != kept and old.stat().st_mtime < cutoff:
            old.unlink(missing_ok=True)
            _sidecar(old).unlink(missing_ok=True)


def plugin_paths_from(location: str | None) -> list[Path]:
    """``STREAMLING__PLUGIN__PATH``'s entries (``os.pathsep``-separated), the way the plugin loader reads them."""
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
        packed = build(output, paths)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2
    print(
        f"Packed the engine, {packed.distributions} distributions and {packed.path_plugins} path plugin "
        f"folder(s) into {output} ({packed.bytes / 1e6:.0f} MB, {packed.unpacked_bytes / 1e6:.0f} MB unpacked) in "
        f"{packed.seconds} s, for {packed.platform}: executors need Python {platform.python_version()} at "
        f"{os.path.realpath(sys._base_executable)}"  # type: ignore[attr-defined]
    )
    print(f"Run on a cluster with STREAMLING__SPARK__ENVIRONMENT_ARCHIVE={output}")
    return 0
