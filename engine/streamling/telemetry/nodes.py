"""What the telemetry knows about each node without running it: its tags, inputs and public spec.

The tags are the metric dimensions of every series the node emits: the standard ``id``, ``topology_node_type``
and ``operator_type``, the identity tag(s) of its kind (``topic``, ``table``, ``url``, ``language``, ``type``) and
its ``telemetry.labels`` (a plugin's own identity labels winning). Global tags are added by the exporter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamling.core.redaction import REDACTED, redact_url, shown_headers

if TYPE_CHECKING:
    from streamling.runtime.plan import Plan

SECRET_KEY = re.compile(r"pass(word|wd)?$|secret$|token|credential|api_?key|private", re.IGNORECASE)
"""Spec fields whose values are never shown (``secret_name`` names a secret and is shown)."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    kind: str
    """``source``, ``transform`` or ``sink``."""
    operator_type: str
    inputs: tuple[str, ...]
    tags: Mapping[str, str]
    spec: Mapping[str, Any] = field(default_factory=dict)
    """The node's YAML as the admin API shows it: secrets and URL credentials hidden."""
    schema: Mapping[str, Any] | None = None
    """The node's output schema (Spark's JSON form); a sink's is its input's."""


def tag_text(value: Any) -> str:
    """A label value as the metrics carry it (booleans as the YAML writes them)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def node_tags(name: str, kind: str, operator: Any, keys: tuple[str, ...]) -> dict[str, str]:
    spec = operator.spec
    tags = {"id": name, "topology_node_type": kind, "operator_type": spec.type}
    identity = spec.identity_tags()
    for key in keys:
        value = identity.get(key, spec.type if key == "type" else None)
        if value is not None:
            tags[key] = value
    tags.update({str(k): tag_text(v) for k, v in operator.labels().items()})
    return tags


def node_infos(plan: Plan) -> dict[str, NodeInfo]:
    """Every node of `plan`, in topological order."""
    pipeline = plan.pipeline
    out: dict[str, NodeInfo] = {}
    for name in pipeline.topological_order():
        node = pipeline.nodes[name]
        operator = plan.operators[name]
        inputs = tuple(pipeline.inputs.get(name, []))
        schema = plan.schemas.get(name) or (plan.schemas.get(inputs[0]) if inputs else None)
        out[name] = NodeInfo(
            name,
            node.kind,
            node.spec.type,
            inputs,
            node_tags(name, node.kind, operator, node.identity_keys),
            public_spec(node.spec.model_dump(mode="json", by_alias=True, exclude_none=True)),
            schema.jsonValue() if schema is not None else None,
        )
    return out


def public_spec(value: Any, key: str = "") -> Any:
    """`value` with secrets replaced by ``***``: secret-named fields, sensitive header values, URL credentials and
    query values."""
    if isinstance(value, Mapping):
        if key == "headers":
            return shown_headers({str(k): str(v) for k, v in value.items()})
        return {
            str(k): REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "") else public_spec(v, str(k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [public_spec(v, key) for v in value]
    if isinstance(value, str) and key in ("url", "endpoint", "brokers", "schema_registry_url"):
        return redact_url(value) if "://" in value else value
    return value
