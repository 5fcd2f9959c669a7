"""The operator registry: one table from (kind, type name) to spec model and operator, plus the plugins' SQL
functions and preprocessors.

Everything arrives through the same door (`streamling.plugins.loader`): the built-ins are the entry point
``builtins`` of the group ``streamling.plugins``, like any installed plugin; ``STREAMLING__PLUGIN__PATH`` adds
plugins by file. So the topology loader has one lookup path, an unknown type fails with the same message
whatever its origin, and two definitions of one id are reported with both origins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from streamling.operators import Operator
    from streamling.plugin import Preprocessor, SqlFunction
    from streamling.spec import NodeSpec

KINDS = ("source", "transform", "sink")


@dataclass(frozen=True)
class OperatorType:
    kind: str
    type_name: str
    spec: type[NodeSpec]
    operator: Callable[..., Operator]
    """Builds the node's operator: ``operator(name, spec, settings)`` (a class, or a plugin's adapter factory)."""
    origin: str = "built-in"
    """Where it was defined, for messages: a plugin file, or an entry point and its distribution."""


@dataclass(frozen=True)
class Registered:
    """A plugin's SQL function or preprocessor, with where it came from."""

    value: Any
    origin: str


class OperatorRegistry:
    def __init__(self) -> None:
        self._types: dict[tuple[str, str], OperatorType] = {}
        self._functions: dict[str, Registered] = {}
        self._preprocessors: dict[str, Registered] = {}
        self._lock = threading.RLock()
        self._loading = False
        self._loaded = False

    def register(
        self, type_name: str, spec: type[NodeSpec], operator: Callable[..., Operator], origin: str | None = None
    ) -> None:
        kind = spec.kind
        if kind not in KINDS:
            raise StreamlingError(f"cannot register '{type_name}': spec kind '{kind}' is not one of {KINDS}")
        self.add(OperatorType(kind, type_name, spec, operator, origin or _origin_of(operator)))

    def add(self, optype: OperatorType) -> None:
        with self._lock:
            key = (optype.kind, optype.type_name)
            existing = self._types.get(key)
            if existing is not None and not _same(existing, optype):
                raise _twice(f"{optype.kind} type '{optype.type_name}'", existing.origin, optype.origin)
            if existing is None:
                self._types[key] = optype

    def add_function(self, function: SqlFunction, origin: str) -> None:
        with self._lock:
            existing = self._functions.get(function.name)
            if existing is not None and type(existing.value) is not type(function):
                raise _twice(f"SQL function '{function.name}'", existing.origin, origin)
            if existing is None:
                self._functions[function.name] = Registered(function, origin)

    def add_preprocessor(self, plugin_id: str, cls: type[Preprocessor], origin: str) -> None:
        with self._lock:
            existing = self._preprocessors.get(plugin_id)
            if existing is not None and existing.value is not cls:
                raise _twice(f"preprocessor '{plugin_id}'", existing.origin, origin)
            if existing is None:
                self._preprocessors[plugin_id] = Registered(cls, origin)

    def lookup(self, kind: str, type_name: str) -> OperatorType | None:
        self.ensure_loaded()
        return self._types.get((kind, type_name))

    def types(self, kind: str) -> list[str]:
        self.ensure_loaded()
        return sorted(name for k, name in self._types if k == kind)

    def functions(self) -> dict[str, SqlFunction]:
        self.ensure_loaded()
        return {name: entry.value for name, entry in self._functions.items()}

    def preprocessor(self, plugin_id: str) -> type[Preprocessor] | None:
        self.ensure_loaded()
        entry = self._preprocessors.get(plugin_id)
        return entry.value if entry else None

    def preprocessor_ids(self) -> list[str]:
        self.ensure_loaded()
        return sorted(self._preprocessors)

    def ensure_loaded(self) -> None:
        """Load the installed plugins (the built-ins among them) once; a broken one raises `PluginError`."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._loading:  # a plugin module looking itself up while it loads
                return
            self._loading = True
            try:
                from streamling.plugins.loader import load_installed

                load_installed(self)
                self._loaded = True
            finally:
                self._loading = False


def _same(a: OperatorType, b: OperatorType) -> bool:
    """The same definition arriving twice (an entry point and a decorator, say) is not a conflict."""
    return a.operator is b.operator or getattr(a.operator, "key", 0) == getattr(b.operator, "key", 1)


def _twice(what: str, first: str, second: str) -> StreamlingError:
    from streamling.plugin import PluginError

    return PluginError(f"{what} is defined twice: by {first} and by {second}")


def _origin_of(obj: object) -> str:
    module = getattr(obj, "__module__", None) or "?"
    return f"module '{module}'"


REGISTRY = OperatorRegistry()

OpT = TypeVar("OpT", bound="type[Operator]")


def operator(type_name: str, spec: type[NodeSpec]) -> Callable[[OpT], OpT]:
    """Class decorator for operators defined inside this process (tests, embedding applications):
    ``@operator("test.collect", CollectSpec)`` registers the class under that type at import and records
    `spec` as its ``spec_model``. Plugins list their classes in ``PLUGIN`` instead (`streamling.plugin`)."""

    def decorate(cls: OpT) -> OpT:
        cls.spec_model = spec  # type: ignore[attr-defined]
        REGISTRY.register(type_name, spec, cls)
        return cls

    return decorate
