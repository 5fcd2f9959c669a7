"""In-process state: for tests and throwaway runs; nothing survives a restart."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping

from streamling.state.base import JsonDoc, StateBackend


class InMemoryStateBackend(StateBackend):
    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self._data: dict[str, JsonDoc] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> JsonDoc | None:
        with self._lock:
            value = self._data.get(key)
            return copy.deepcopy(value) if value is not None else None

    def put_many(self, items: Mapping[str, JsonDoc]) -> None:
        with self._lock:
            self._data.update({k: copy.deepcopy(v) for k, v in items.items()})

    def remove(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def items(self, prefix: str = "") -> dict[str, JsonDoc]:
        with self._lock:
            return {k: copy.deepcopy(v) for k, v in self._data.items() if k.startswith(prefix)}
