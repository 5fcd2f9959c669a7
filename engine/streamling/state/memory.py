"""In-process state: for tests and throwaway runs; nothing survives a restart.

Its leases live in the instance like its documents, so they keep runs apart only within one backend object:
another process (or another instance) sees neither the positions nor the lease."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping

from streamling.errors import LeaseLostError
from streamling.state.base import Fence, JsonDoc, LeaseHolder, StateBackend


class InMemoryStateBackend(StateBackend):
    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self._data: dict[str, JsonDoc] = {}
        self._leases: dict[str, tuple[LeaseHolder, float]] = {}  # name -> (holder, expiry on the monotonic clock)
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> JsonDoc | None:
        with self._lock:
            value = self._data.get(key)
            return copy.deepcopy(value) if value is not None else None

    def put_many(self, items: Mapping[str, JsonDoc], fence: Fence | None = None) -> None:
        with self._lock:
            if fence is not None:
                current = self._leases.get(fence.name)
                if current is None or current[0].token != fence.token or current[1] <= time.monotonic():
                    raise LeaseLostError(self.fence_refusal(fence.name), retriable=True)
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

    def acquire_lease(
        self, name: str, token: str, holder: JsonDoc, ttl_sec: float, replace: str | None = None
    ) -> LeaseHolder | None:
        now = time.monotonic()
        with self._lock:
            current = self._leases.get(name)
            if current is None or current[1] <= now or current[0].token in (token, replace):
                if current is None or current[0].token != token:
                    self._generations[name] = self._generations.get(name, 0) + 1
                self._leases[name] = (LeaseHolder(token, copy.deepcopy(holder), 0), now + ttl_sec)
                return None
            return current[0]

    def renew_lease(self, name: str, token: str, ttl_sec: float) -> bool:
        with self._lock:
            current = self._leases.get(name)
            if current is None or current[0].token != token:
                return False
            lease = current[0]
            self._leases[name] = (LeaseHolder(token, lease.holder, lease.renewals + 1), time.monotonic() + ttl_sec)
            return True

    def release_lease(self, name: str, token: str) -> None:
        with self._lock:
            current = self._leases.get(name)
            if current is not None and current[0].token == token:
                self._leases[name] = (current[0], float("-inf"))

    def lease_generation(self, name: str, token: str) -> int | None:
        with self._lock:
            current = self._leases.get(name)
            return self._generations.get(name) if current is not None and current[0].token == token else None
