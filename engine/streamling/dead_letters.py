"""Dead letters: bad records a node set to ``on_error: dead_letter`` routes aside instead of failing the run.

A dead letter goes to a Kafka topic (``kafka_sink`` connection) or a Postgres table (created if missing). Both
are written before the epoch that skipped the record commits, so a crash can only repeat, never lose one:

- Postgres table: rows are keyed by (application_id, node, record_id) with ``ON CONFLICT DO NOTHING``
  (`DeadLetter.record_id`: a source record's position, a sink row's content), so a replayed record is not stored
  twice. The Postgres sink writes its dead letters in the
  transaction that applies its rows and progress row, so they are exactly as durable as the data.
- Kafka topic: produced and flushed before the epoch commits; a replay produces them again (at-least-once).

A `DeadLetterTarget` is built on the driver and travels to executors (the Kafka source writes from its Spark
tasks), as a pickled object inside a sink's write plan or as string options of the source's data source, where
the secrets sit under keys containing ``password`` so Spark redacts them.

What is common lives here (the letter, the target's interface, its travel as options); producing to a topic is
`kafka/dead_letters.py`'s, the table and its inserts `postgres/dead_letters.py`'s: each is a `DeadLetterTarget`
subclass registered by its kind.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Self

from streamling.core.rows import json_default
from streamling.errors import StreamlingError

if TYPE_CHECKING:  # loaded when used: the Kafka reader imports this module in every planner and worker process
    import psycopg

    from streamling.config.model import PostgresSinkSettings, Settings
    from streamling.spec import DeadLetterSpec


@dataclass(frozen=True)
class DeadLetter:
    """One bad record: a source message (topic … headers), a file's line (path as topic, line as offset, version)
    or a sink row (row, primary_key as JSON text)."""

    error: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    row: str | None = None
    primary_key: str | None = None
    version: str | None = None
    """A file's line (`topic` the file's path, `offset` the line, no partition): the file's modification time, so
    a bad line of a rewritten file is a record of its own."""

    @property
    def record_id(self) -> str:
        """What makes a repeat recognisable: the position of a source record, the content of a sink row (a
        replay of the same events rejects the same rows)."""
        if self.topic is not None and self.partition is None:
            return f"{self.topic}@{self.version}:{self.offset}"
        if self.topic is not None:
            return f"{self.topic}:{self.partition}:{self.offset}"
        return "row:" + hashlib.sha256((self.row or "").encode()).hexdigest()[:32]


def row_letter(error: str, row: Mapping[str, Any], keys: Sequence[str]) -> DeadLetter:
    return DeadLetter(
        error=error,
        row=json.dumps(dict(row), default=json_default),
        primary_key=json.dumps({k: row[k] for k in keys}, default=json_default),
    )


@dataclass(frozen=True)
class DeadLetterTarget(ABC):
    """Where one node's dead letters go, with the connection to get there.

    Each destination kind is a subclass in its system's folder, named by the `DeadLetterSpec` field that picks
    it (``topic``: `kafka/dead_letters.py`, ``table``: `postgres/dead_letters.py`) and registered when its class
    is defined; the built-ins' plugin imports both. So this module imports no system's half, although a Kafka
    source's letters may go to a Postgres table and a Postgres sink's to a topic (whose writer hands its transaction
    to `deliver`, which a table target writes in)."""

    application_id: str
    node: str
    label: str

    kind: ClassVar[str]
    """The `DeadLetterSpec` field that picks this destination."""
    _kinds: ClassVar[dict[str, type[DeadLetterTarget]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            DeadLetterTarget._kinds[cls.kind] = cls

    @classmethod
    def of(
        cls, spec: DeadLetterSpec, settings: Settings, node: str, label: str, postgres: PostgresSinkSettings | None
    ) -> DeadLetterTarget:
        """The target `spec` names; `postgres` is the node's own connection (a Postgres sink's), else the
        settings' for `node`."""
        kind = spec.kind
        if kind not in cls._kinds:
            raise StreamlingError(f"{label}: no dead-letter destination of kind '{kind}' is registered")
        return cls._kinds[kind].from_spec(spec, settings, node, label, postgres)

    @classmethod
    @abstractmethod
    def from_spec(
        cls, spec: DeadLetterSpec, settings: Settings, node: str, label: str, postgres: PostgresSinkSettings | None
    ) -> DeadLetterTarget: ...

    @property
    @abstractmethod
    def where(self) -> str:
        """The destination as messages name it: ``topic 'x'``, ``table "s"."t"``."""

    # -- driver: make sure the target exists

    @abstractmethod
    def prepare(self) -> None: ...

    # -- writing

    def deliver(self, letters: Sequence[DeadLetter], cur: psycopg.Cursor | None = None) -> None:
        """Write `letters` before returning; with `cur` (a Postgres transaction of the caller's) a table target
        writes inside it, so the letters are exactly as durable as the caller's rows."""
        if letters:
            self.write(letters, datetime.now(UTC), cur)

    @abstractmethod
    def write(self, letters: Sequence[DeadLetter], failed_at: datetime, cur: psycopg.Cursor | None) -> None: ...

    # -- travelling to executors as data-source options (strings; secrets under *password* keys)

    @abstractmethod
    def carried(self) -> tuple[dict[str, Any], dict[str, str]]:
        """What the options carry beyond the node: JSON fields without secrets, and the secrets by option key
        (each key containing ``password``, so Spark redacts its value)."""

    @classmethod
    @abstractmethod
    def arrived(cls, head: tuple[str, str, str], fields: dict[str, Any], secrets: Mapping[str, str]) -> Self:
        """The target again from `carried`'s two halves; `head` is (application_id, node, label)."""

    def to_options(self) -> dict[str, str]:
        fields, secrets = self.carried()
        kind = type(self)
        head = {"class": f"{kind.__module__}:{kind.__qualname__}", "application_id": self.application_id}
        out = {"dead_letter": json.dumps({**head, "node": self.node, "label": self.label, **fields})}
        for key, secret in secrets.items():
            assert "password" in key, key
            if secret:
                out[key] = secret
        return out

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> DeadLetterTarget | None:
        """The target `to_options` wrote. Its class is found by the module and name written with it, as pickle
        finds a class: an executor has not necessarily imported the destination's system, nor the plugin."""
        if not options.get("dead_letter"):
            return None
        fields = json.loads(options["dead_letter"])
        module, _, name = fields.pop("class").partition(":")
        kind = getattr(importlib.import_module(module), name, None)
        if not (isinstance(kind, type) and issubclass(kind, DeadLetterTarget)):
            raise StreamlingError(f"dead-letter options name {module}:{name}, not a dead-letter target")
        head = (fields.pop("application_id"), fields.pop("node"), fields.pop("label"))
        secrets = {k: v for k, v in options.items() if k.startswith("dead_letter_") and "password" in k}
        return kind.arrived(head, fields, secrets)
