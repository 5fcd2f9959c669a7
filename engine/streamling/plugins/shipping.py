"""Sending plugins loaded by path to Spark's Python workers.

Workers rebuild plugin instances by importing the plugin's module by name (`adapters.PluginRef`), so every
plugin loaded from ``STREAMLING__PLUGIN__PATH`` goes to them as an archive added with ``addPyFile``, in local
mode as on a cluster (where `runtime.session` ships the ``streamling`` package the same way). Plugins installed
as distributions are not shipped: they must be installed where the workers run.
"""

from __future__ import annotations

import tempfile
import threading
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from streamling.plugins.loader import PathPlugin, path_plugins

_lock = threading.Lock()
_shipped: dict[int, set[tuple[str, Path]]] = {}
"""What each SparkContext (by its JVM object's id) has been sent already."""
_archives: list[str] = []


def local_archives() -> tuple[str, ...]:
    """The archives built in this process: the Python worker that plans a plugin source's epochs runs beside
    the driver and does not get ``addPyFile``'s files, so it imports plugins from these paths."""
    with _lock:
        return tuple(_archives)


def ship_plugins(spark: SparkSession) -> None:
    """Add every path plugin this context has not received yet (one archive per call that adds any)."""
    context = spark.sparkContext
    key = id(context._jsc)
    with _lock:
        sent = _shipped.setdefault(key, set())
        fresh = [p for p in path_plugins() if (p.name, p.root) not in sent]
        if not fresh:
            return
        archive = _archive(fresh)
        context.addPyFile(str(archive))
        _archives.append(str(archive))
        sent.update((p.name, p.root) for p in fresh)


def _archive(plugins: list[PathPlugin]) -> Path:
    target = Path(tempfile.mkdtemp(prefix="streamling-plugins-")) / "plugins.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for plugin in plugins:
            if plugin.root.is_file():
                archive.write(plugin.root, f"{plugin.name}.py")
                continue
            for path in sorted(plugin.root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, Path(plugin.name) / path.relative_to(plugin.root))
    return target
