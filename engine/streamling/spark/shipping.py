"""Sending plugins loaded by path to Spark's Python workers.

Workers rebuild plugin instances by importing the plugin's module by name (`plugins/worker.py`'s `PluginRef`), so every
plugin loaded from ``STREAMLING__PLUGIN__PATH`` goes to them as an archive added with ``addPyFile``, in local
mode as on a cluster (where `spark/session.py` ships the ``streamling`` package the same way). On a cluster,
plugins installed as distributions (entry points) are shipped too, as their top-level package, when it is pure
Python (zip imports cannot load compiled extensions: such a plugin must be installed where the workers run); in
local mode the workers share the driver's environment and import them as installed. Executors that run the packed
environment (`spark/packed_env.py`) have the installed plugins in it, and the path plugins it was packed with.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from streamling.plugins.archives import record_archive
from streamling.plugins.loader import PathPlugin, installed_plugins, path_plugins
from streamling.spark import packed_env

log = logging.getLogger("streamling.plugins")
COMPILED = (".so", ".pyd", ".dylib")
_lock = threading.Lock()
_shipped: dict[int, set[tuple[str, Path]]] = {}
"""What each SparkContext (by its JVM object's id) has been sent already."""


def ship_plugins(spark: SparkSession) -> None:
    """Add every path plugin this context has not received yet (one archive per call that adds any)."""
    context = spark.sparkContext
    key = id(context._jsc)
    with _lock:
        sent = _shipped.setdefault(key, set())
        packed = packed_env.archive_of(context.getConf()) is not None
        in_archive = packed_env.packed_path_plugins(context.getConf()) if packed else set()
        wanted = [p for p in path_plugins() if not _within(p.root, in_archive)]
        if not context.master.startswith("local") and not packed:
            wanted += [p for p in installed_plugins() if _pure_python(p)]
        fresh = [p for p in wanted if (p.name, p.root) not in sent]
        if not fresh:
            return
        archive = _archive(fresh)
        context.addPyFile(str(archive))
        record_archive(str(archive))
        sent.update((p.name, p.root) for p in fresh)


def _within(root: Path, locations: set[Path]) -> bool:
    """Whether a plugin's file or folder is one of `locations` or inside one (what a packed archive holds)."""
    return any(root == location or location in root.parents for location in locations)


def _pure_python(plugin: PathPlugin) -> bool:
    compiled = plugin.root.is_dir() and any(p.suffix in COMPILED for p in plugin.root.rglob("*"))
    if compiled:
        log.warning(
            "Installed plugin package '%s' holds compiled extensions and is not shipped; install it where Spark's "
            "workers run",
            plugin.name,
        )
    return not compiled


def _archive(plugins: list[PathPlugin]) -> Path:
    """A zip of `plugins`, named after its folder: Spark keys added files by name and refuses a second file of
    the same name with other contents, and a long-lived process (a Dagster code location) ships again whenever
    a pipeline loads another plugin."""
    folder = Path(tempfile.mkdtemp(prefix="streamling-plugins-"))
    target = folder / f"{folder.name.replace('-', '_')}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for plugin in plugins:
            if plugin.root.is_file():
                archive.write(plugin.root, f"{plugin.name}.py")
                continue
            for path in sorted(plugin.root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, Path(plugin.name) / path.relative_to(plugin.root))
    return target
