"""State backend interface: small JSON documents under (namespace, key), and run leases.

The namespace is the ``application_id``; the runtime stores committed source positions here, so this
is the source of truth for where a pipeline resumes. A lease (`acquire_lease`) lets one run at a time
write a pipeline's positions; it lives beside the documents, in a table of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def epoch_key(source: str) -> str:
    """The key of a source's last committed epoch number, kept beside its positions by the runtime's commits."""
    return f"{source}:__epoch__"


def phase_key(source: str) -> str:
    """The key of a phased (hybrid) source's current phase."""
    return f"{source}:__phase__"


JsonDoc = dict[str, Any]


@dataclass(frozen=True)
class Fence:
    """What a run's commits carry to prove they are still its pipeline's: the lease's name, the run's token and
    the lease's generation (a number that grows with every takeover, so a sink can refuse an older run's write
    without seeing the lease)."""

    name: str
    token: str
    generation: int


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease: the holder's token and description, and how often it has renewed the lease (a
    count that moves while the holder is alive)."""

    token: str
    holder: JsonDoc
    renewals: int


class StateBackend(ABC):
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    @abstractmethod
    def get(self, key: str) -> JsonDoc | None: ...

    def put(self, key: str, value: JsonDoc) -> None:
        self.put_many({key: value})

    @abstractmethod
    def put_many(self, items: Mapping[str, JsonDoc], fence: Fence | None = None) -> None:
        """Write all items atomically: a commit of several partitions lands whole or not at all. With `fence`, the
        same transaction first checks that lease `fence.name` is still `fence.token`'s and unexpired, and raises
        `LeaseLostError` writing nothing when it is not: a run that lost its lease can never commit, however late
        its write (or a retry of it) lands."""

    @abstractmethod
    def remove(self, key: str) -> None: ...

    @abstractmethod
    def clear(self) -> None:
        """Delete every key of this namespace."""

    @abstractmethod
    def items(self, prefix: str = "") -> dict[str, JsonDoc]:
        """All keys of this namespace starting with `prefix`."""

    @abstractmethod
    def acquire_lease(
        self, name: str, token: str, holder: JsonDoc, ttl_sec: float, replace: str | None = None
    ) -> LeaseHolder | None:
        """Take lease `name` of this namespace for `ttl_sec`, atomically: when nobody holds it, its holder's
        time is up, it is ours (`token`) already, or its holder's token is `replace` (a holder known to be
        dead). None when taken; else the current holder, and nothing changes."""

    @abstractmethod
    def renew_lease(self, name: str, token: str, ttl_sec: float) -> bool:
        """Extend our lease to `ttl_sec` from now; False when it is no longer ours (it expired and was taken)."""

    @abstractmethod
    def release_lease(self, name: str, token: str) -> None:
        """Give our lease up (it expires now; its generation is kept); a lease no longer ours is left alone."""

    @abstractmethod
    def lease_generation(self, name: str, token: str) -> int | None:
        """The generation of lease `name` if `token` holds it: 1 for the first holder, one more at every takeover
        by another token, unchanged when a holder takes it again."""

    def fence_refusal(self, name: str) -> str:
        return f"its run lease '{name}' is held by another run or expired; the commit was refused"

    def close(self) -> None:  # noqa: B027  (optional hook)
        pass

    def __enter__(self) -> StateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
