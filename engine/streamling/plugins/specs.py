"""The YAML shape of a plugin node: the fields every node of its section has (``type``, ``from``,
``primary_key``, ``telemetry``) plus ``options``, validated by the plugin's own `Options` model.

Options may also be given as top-level fields, as the original's examples do; they are moved into
``options`` before validation (a field given both ways is an error). Messages name the field as written:
`streamling.topology.pipeline` drops the ``options.`` prefix for a field given at the top level.

A built-in written on the Arrow level (no namespace: ``print``) dumps its options at the top level, as its own
spec did before it moved there and as its documentation writes it: what the control plane shows and digests of it
(asset metadata, the backfill sensor's definition digests, the admin API's node list) stays as it was.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    PositiveInt,
    SerializerFunctionWrapHandler,
    create_model,
    model_serializer,
    model_validator,
)

from streamling.config.units import Milliseconds
from streamling.spec import NodeSpec, SinkSpec, SourceSpec, TransformSpec

BASES: dict[str, type[NodeSpec]] = {
    "source": SourceSpec,
    "polled source": SourceSpec,
    "transform": TransformSpec,
    "side output": TransformSpec,
    "sink": SinkSpec,
}


class PluginNodeSpec(BaseModel):
    """Mixed into every plugin node's spec."""

    plugin_id: ClassVar[str] = ""
    plugin_class: ClassVar[type] = object
    options: Any = None

    @classmethod
    def shows_options(cls) -> bool:
        """Whether the node shows an ``options`` block (a namespaced plugin's; a built-in's only for the options
        it always kept nested): such a node identifies itself by its ``type`` in telemetry, as before."""
        return "." in cls.plugin_id or bool(getattr(cls.plugin_class, "nested_options", ()))

    @model_serializer(mode="wrap")
    def _flat_for_built_ins(self, handler: SerializerFunctionWrapHandler) -> Any:
        dumped = handler(self)
        if "." in type(self).plugin_id or not isinstance(dumped, dict) or not isinstance(dumped.get("options"), dict):
            return dumped
        nested = getattr(type(self).plugin_class, "nested_options", ())  # options its spec always kept nested
        out: dict[str, Any] = {}
        for key, value in dumped.items():  # the options where the block stood, in the node's field order as before
            if key == "options":
                out.update((name, v) for name, v in value.items() if name not in dumped and name not in nested)
            else:
                out[key] = value
        kept = {key: value for key, value in dumped["options"].items() if key in nested}
        return {**out, **({"options": kept} if kept else {})}

    @model_validator(mode="before")
    @classmethod
    def _gather_options(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        named = set()
        for name, info in cls.model_fields.items():
            named.add(name)
            if info.alias:
                named.add(info.alias)
        named.discard("options")
        given = data.get("options")
        if given is None:
            given = {}
        if not isinstance(given, dict):
            return data  # the options model reports the type
        options = dict(given)
        rest = {}
        for key, value in data.items():
            if key in named or key == "options":
                rest[key] = value
            elif key in options:
                raise ValueError(f"option '{key}' is given both at the top level and under 'options'")
            else:
                options[key] = value
        return {**rest, "options": options}

    @property
    def bounded(self) -> bool:
        return bool(getattr(self.plugin_class, "bounded", False))


BATCH_FIELDS: dict[str, Any] = {
    "batch_size": (PositiveInt | None, None),
    "batch_flush_interval": (Milliseconds | None, None),
}
"""Node fields of the original's plugin transforms and sinks (typed there, never handed to the plugin):
`batch_flush_interval` paces the sources feeding the node; `batch_size` is accepted with a warning
(`PluginNode.warnings`). A plugin whose own options name one of them keeps it as its option."""


def node_spec(plugin_id: str, kind: str, cls: type) -> type[NodeSpec]:
    """The spec model of plugin node `cls` registered as `plugin_id`."""
    base = BASES[kind]
    options_model = cls.options_model  # type: ignore[attr-defined]
    option_names = {n for n, f in options_model.model_fields.items()} | {
        f.alias for f in options_model.model_fields.values() if f.alias
    }
    batch = {k: v for k, v in BATCH_FIELDS.items() if k not in option_names} if kind in ("transform", "sink") else {}
    spec = create_model(  # type: ignore[call-overload]
        f"PluginSpec_{plugin_id.replace('.', '_')}",
        __base__=(PluginNodeSpec, base),
        type=(Literal[plugin_id], ...),
        # required, not defaulted: `_gather_options` always supplies it, and a default factory would be called
        # (and fail on required options) whenever the spec is dumped with exclude_defaults, as the control plane does
        options=(options_model, ...),
        **batch,
    )
    spec.plugin_id = plugin_id
    spec.plugin_class = cls
    spec.side_output = kind == "side output"
    return spec
