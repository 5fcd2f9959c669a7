"""State backend interface: small JSON documents under (namespace, key).

The namespace is the ``application_id``; the runtime stores committed source positions here, so this
is the source of truth for where a pipeline resumes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

JsonDoc = dict[str, Any]


class StateBackend(ABC):
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    @abstractmethod
    def get(self, key: str) -> JsonDoc | None: ...

    def put(self, key: str, value: JsonDoc) -> None:
        self.put_many({key: value})

    @abstractmethod
    def put_many(self, items: Mapping[str, JsonDoc]) -> None:
        """Write all items atomically: a commit of several partitions lands whole or not at all."""

    @abstractmethod
    def remove(self, key: str) -> None: ...

    @abstractmethod
    def clear(self) -> None:
        """Delete every key of this namespace."""

    @abstractmethod
    def items(self, prefix: str = "") -> dict[str, JsonDoc]:
        """All keys of this namespace starting with `prefix`."""

    def close(self) -> None:  # noqa: B027  (optional hook)
        pass

    def __enter__(self) -> StateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
