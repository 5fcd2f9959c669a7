"""Pipeline node specifications: the YAML shapes, one pydantic model per operator type.

Built-in types reject unknown fields; plugin types take a free-form ``options`` map. Every spec says
which other nodes it reads (`input_names`), which is all the graph needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from streamling.core.identifiers import check_identifier


class EventTimeSpec(BaseModel):
    """The original's ``telemetry.event_time``: the column its event-time freshness metrics read (accepted for
    its pipelines, with a warning at start: see `event_time_warning`)."""

    model_config = ConfigDict(extra="forbid")
    column: str = Field(min_length=1)
    unit: Literal["seconds", "milliseconds", "microseconds"] | None = None
    """The unit of an integer column (a timestamp column carries its own)."""


class TelemetrySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    labels: dict[str, Any] = Field(default_factory=dict)
    event_time: EventTimeSpec | None = None


EVENT_TIME_MEANING = (
    "the original's event-time watermark and lag metrics are not exported; a source's commit_lag is the age of "
    "its newest committed record (a Kafka record's own timestamp with include_metadata: true)"
)


def event_time_warning(label: str, spec: NodeSpec) -> list[str]:
    """The start-up warning for a node's ``telemetry.event_time`` (any node type, built-in or plugin)."""
    event_time = spec.telemetry.event_time if spec.telemetry else None
    if event_time is None:
        return []
    return [ignored_field(label, "telemetry.event_time", event_time.model_dump(exclude_none=True), EVENT_TIME_MEANING)]


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: ClassVar[str] = "node"
    identity_labels: ClassVar[tuple[str, ...]] = ()
    """Label keys that identify the node in metrics (e.g. ``topic``); users may not override them."""
    side_output: ClassVar[bool] = False
    """The node's effect is outside the graph (a dynamic table): it needs no consumer, may have no
    input, and no node may read it with ``from``."""

    type: str
    telemetry: TelemetrySpec | None = None

    def input_names(self) -> list[str]:
        return []

    def after_names(self) -> list[str]:
        """Nodes that must be evaluated before this one in the same epoch although it does not read them
        (a SQL transform that looks values up in a dynamic table another node fills)."""
        return []

    def graph_errors(self, nodes: Mapping[str, NodeSpec]) -> list[str]:
        """Structural problems that involve other nodes' specs (`nodes`: every valid node by name)."""
        return []

    def labels(self) -> dict[str, Any]:
        return dict(self.telemetry.labels) if self.telemetry else {}

    def identity_tags(self) -> dict[str, str]:
        """The values of `identity_labels` on the node's metrics: by default the spec fields of those names (or
        aliases), e.g. a Kafka node's ``topic``."""
        fields = type(self).model_fields
        out: dict[str, str] = {}
        for key in self.identity_labels:
            name = next((n for n, f in fields.items() if key in (n, f.alias)), None)
            value = getattr(self, name) if name else None
            if value is not None:
                out[key] = str(value)
        return out


KAFKA_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class DeadLetterSpec(BaseModel):
    """Where a node's bad records go: a Kafka topic (``kafka_sink`` connection) or a Postgres table
    (``postgres_sink`` connection, ``schema.table`` or ``table`` in ``public``), exactly one of them."""

    model_config = ConfigDict(extra="forbid")
    topic: str | None = None
    table: str | None = None

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is not None and not KAFKA_TOPIC.fullmatch(value):
            raise ValueError("must be a Kafka topic name: 1 to 249 of the characters a-z A-Z 0-9 . _ -")
        return value

    @field_validator("table")
    @classmethod
    def _table(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = value.split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError("must be 'table' or 'schema.table'")
        for part in parts:
            check_identifier(part)
        return value

    @model_validator(mode="after")
    def _one_target(self) -> DeadLetterSpec:
        if (self.topic is None) == (self.table is None):
            raise ValueError("set exactly one of 'topic' (a Kafka topic) or 'table' (a Postgres table)")
        return self

    @property
    def kind(self) -> str:
        """The field set, which names the destination (`streamling.dead_letters.DeadLetterTarget.kind`)."""
        return "topic" if self.topic is not None else "table"

    @property
    def schema_and_table(self) -> tuple[str, str]:
        assert self.table is not None
        schema, _, table = self.table.rpartition(".")
        return schema or "public", table


class ErrorHandlingSpec(BaseModel):
    """``on_error`` of a node that detects bad records (the Kafka source, the Postgres sink): ``fail`` stops the
    pipeline before its position moves past the record; ``dead_letter`` routes the record to `dead_letter`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    on_error: Literal["fail", "dead_letter"] = "fail"
    dead_letter: DeadLetterSpec | None = None

    @model_validator(mode="after")
    def _dead_letter_matches(self) -> ErrorHandlingSpec:
        if self.on_error == "dead_letter" and self.dead_letter is None:
            raise ValueError("field 'dead_letter' ({topic: …} or {table: …}) is required with on_error: dead_letter")
        if self.on_error != "dead_letter" and self.dead_letter is not None:
            raise ValueError("field 'dead_letter' applies only with on_error: dead_letter")
        return self


def split_columns(value: str | list[str] | None) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` → ``["a", "b"]``."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else value
    return [p.strip() for p in parts if p and p.strip()]


class _Keyed(NodeSpec):
    primary_key: str | list[str] | None = None

    def primary_key_columns(self) -> list[str]:
        return split_columns(self.primary_key)


class SourceSpec(_Keyed):
    kind: ClassVar[str] = "source"

    @property
    def bounded(self) -> bool:
        """A bounded source reaches an end; job mode accepts only bounded sources."""
        return False


class TransformSpec(_Keyed):
    kind: ClassVar[str] = "transform"
    from_: str | list[str] | None = Field(default=None, alias="from")

    def input_names(self) -> list[str]:
        return split_columns(self.from_)


class SinkSpec(_Keyed):
    kind: ClassVar[str] = "sink"
    from_: str = Field(alias="from")

    def input_names(self) -> list[str]:
        return [self.from_.strip()]


def flush_interval(milliseconds: int | None) -> float | None:
    """A node's ``batch_flush_interval`` (stored in ms) as the seconds `flush_interval_sec` reports."""
    return milliseconds / 1000 if milliseconds else None


def ignored_field(label: str, field: str, value: object, meaning: str) -> str:
    """The start-up warning for a field accepted for compatibility that does nothing here
    (`Operator.warnings`)."""
    return f"{label}: {field} = {value!r} has no effect here: {meaning}"


def ignored_fields(label: str, spec: BaseModel, meanings: Mapping[str, str]) -> list[str]:
    """`ignored_field` for each field of `meanings` (field → what it maps to here) that `spec` sets."""
    return [
        ignored_field(label, field, getattr(spec, field), meaning)
        for field, meaning in meanings.items()
        if getattr(spec, field) is not None
    ]


class PluginOptions(BaseModel):
    """Shared shape of plugin-provided operators: identity comes from the type name itself."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value
