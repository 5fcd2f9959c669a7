"""Rules for per-node ``telemetry.labels``: they become metric dimensions, so they must stay valid
Prometheus label names and must not shadow the labels the runtime sets itself."""

from __future__ import annotations

import re
from typing import Any

from streamling.core.messages import quoted

MAX_LABELS = 20
MAX_VALUE_BYTES = 256
RESERVED = ("id", "topology_node_type", "operator_type", "service_instance_id")
KEY_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def label_errors(
    node: str,
    labels: dict[str, Any],
    identity: tuple[str, ...],
    what: str = "telemetry label",
    origin: str = "telemetry.labels",
) -> list[str]:
    """Each broken rule, naming `node` and the key; `what` and `origin` say whose labels they are (a plugin's
    identity labels follow the same rules as the YAML's)."""
    errors: list[str] = []
    if len(labels) > MAX_LABELS:
        errors.append(f"{node}: {origin} has {len(labels)} labels; at most {MAX_LABELS} are allowed")
    reserved = set(RESERVED) | set(identity)
    for key, value in labels.items():
        key = str(key)
        named = f"{node}: {what} {quoted(key)}"
        if key.startswith("__"):
            errors.append(f"{named} must not start with '__'")
        elif not KEY_PATTERN.match(key):
            errors.append(f"{named} must match {KEY_PATTERN.pattern}")
        elif key in reserved:
            errors.append(f"{named} is reserved")
        text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
            errors.append(f"{named} value is longer than {MAX_VALUE_BYTES} bytes")
        if any((ord(ch) < 32 and ch != "\t") or ord(ch) == 127 for ch in text):
            errors.append(f"{named} value contains a control character")
    return errors
