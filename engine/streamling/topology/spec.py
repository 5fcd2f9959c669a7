"""Pipeline node specifications: the YAML shapes, one pydantic model per operator type.

Built-in types reject unknown fields; plugin types take a free-form ``options`` map. Every spec says
which other nodes it reads (`input_names`), which is all the graph needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator


class TelemetrySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    labels: dict[str, Any] = Field(default_factory=dict)


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


class PluginOptions(BaseModel):
    """Shared shape of plugin-provided operators: identity comes from the type name itself."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value
