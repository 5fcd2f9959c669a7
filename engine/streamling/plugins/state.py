"""A plugin node's own state: JSON values under ``<node>:state:<key>`` in the pipeline's state backend.

Values are staged, not written: a `put` made while the runtime handles an epoch (a sink's `write`, a side
output's `observe`, a flush) belongs to that epoch; a polled source's puts belong to the batch its `poll`
returned; others (in `open` or `finalize`) to whichever epoch commits next. The committer writes an epoch's
staged values in the same `put_many` as the source position, so a crash keeps both or neither.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from streamling.plugin import PluginError, State

if TYPE_CHECKING:
    from streamling.state import StateBackend

Bucket = tuple[str, Any] | None
"""What a staged value waits for: (source, epoch id), ("poll", end position), or None: the next commit."""


class NodeState(State):
    def __init__(self, node: str, plugin_id: str) -> None:
        self.node = node
        self.plugin_id = plugin_id
        self.prefix = f"{node}:state:"
        self._committed: dict[str, Any] = {}
        self._staged: dict[Bucket, dict[str, Any]] = {}
        self._latest: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._current = threading.local()

    def attach(self, backend: StateBackend) -> None:
        """Read the committed values (at `initialize`, before any plugin code runs)."""
        docs = backend.items(self.prefix)
        with self._lock:
            self._committed = {key[len(self.prefix) :]: doc.get("value") for key, doc in docs.items()}

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            if key in self._latest:
                return self._latest[key]
            return self._committed.get(key, default)

    def put(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise PluginError(f"plugin '{self.plugin_id}' (node '{self.node}'): state keys are non-empty strings")
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise PluginError(
                f"plugin '{self.plugin_id}' (node '{self.node}'): state value for '{key}' is not JSON: {exc}"
            ) from None
        bucket = getattr(self._current, "bucket", None)
        with self._lock:
            self._staged.setdefault(bucket, {})[key] = value
            self._latest[key] = value

    @contextmanager
    def staging_for(self, bucket: Bucket) -> Iterator[None]:
        """Puts made by this thread inside the block belong to `bucket`."""
        previous = getattr(self._current, "bucket", None)
        self._current.bucket = bucket
        try:
            yield
        finally:
            self._current.bucket = previous

    def move(self, source: Bucket, target: Bucket) -> None:
        with self._lock:
            staged = self._staged.pop(source, None)
            if staged:
                self._staged.setdefault(target, {}).update(staged)

    def entries(self, *buckets: Bucket) -> dict[str, dict[str, Any]]:
        """State-backend entries for what `buckets` (and the next-commit bucket) staged; they leave the stage
        and count as committed (the commit that writes them fails the run otherwise)."""
        now_ms = int(time.time() * 1000)
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for bucket in (None, *buckets):
                for key, value in (self._staged.pop(bucket, None) or {}).items():
                    out[f"{self.prefix}{key}"] = {"value": value, "updated_at": now_ms}
                    self._committed[key] = value
            staged_keys = {key for values in self._staged.values() for key in values}
            for key in [k for k in self._latest if k not in staged_keys]:
                del self._latest[key]
        return out

    def snapshot(self) -> Mapping[str, Any]:
        with self._lock:
            return {**self._committed, **self._latest}
