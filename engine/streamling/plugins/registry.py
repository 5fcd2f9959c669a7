"""The operator registry: one table from (kind, type name) to spec model and operator class.

Built-ins register here exactly as plugins do, so the topology loader has one lookup path and an
unknown type fails with the same message whatever its origin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from streamling.operators import Operator
    from streamling.topology.spec import NodeSpec

KINDS = ("source", "transform", "sink")


@dataclass(frozen=True)
class OperatorType:
    kind: str
    type_name: str
    spec: type[NodeSpec]
    operator: type[Operator]


class OperatorRegistry:
    def __init__(self) -> None:
        self._types: dict[tuple[str, str], OperatorType] = {}

    def register(self, type_name: str, spec: type[NodeSpec], operator: type[Operator]) -> None:
        kind = spec.kind
        if kind not in KINDS:
            raise StreamlingError(f"cannot register '{type_name}': spec kind '{kind}' is not one of {KINDS}")
        key = (kind, type_name)
        existing = self._types.get(key)
        if existing is not None and existing.operator is not operator:
            raise StreamlingError(f"{kind} type '{type_name}' is registered twice")
        self._types[key] = OperatorType(kind, type_name, spec, operator)

    def lookup(self, kind: str, type_name: str) -> OperatorType | None:
        _load_builtins()
        return self._types.get((kind, type_name))

    def types(self, kind: str) -> list[str]:
        _load_builtins()
        return sorted(name for k, name in self._types if k == kind)


REGISTRY = OperatorRegistry()

OpT = TypeVar("OpT", bound="type[Operator]")


def operator(type_name: str, spec: type[NodeSpec]) -> Callable[[OpT], OpT]:
    """Class decorator: ``@operator("print", PrintSinkSpec)`` registers the class under that type."""

    def decorate(cls: OpT) -> OpT:
        REGISTRY.register(type_name, spec, cls)
        return cls

    return decorate


_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from streamling.plugins import builtins  # noqa: F401  (imports register the built-in types)
