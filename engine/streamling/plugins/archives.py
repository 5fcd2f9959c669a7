"""The plugin archives this process shipped to Spark's workers (`streamling.spark.shipping` builds them): the
Python worker that plans a plugin source's epochs runs beside the driver and does not get ``addPyFile``'s files,
so it imports plugins from these paths (`plugins/worker.py`'s `PluginRef`)."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_archives: list[str] = []


def record_archive(path: str) -> None:
    with _lock:
        _archives.append(path)


def local_archives() -> tuple[str, ...]:
    with _lock:
        return tuple(_archives)
