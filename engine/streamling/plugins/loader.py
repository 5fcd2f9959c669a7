"""Finding plugins and entering them in the registry: installed distributions' entry points (group
``streamling.plugins``, the built-ins among them) and ``STREAMLING__PLUGIN__PATH`` (a ``.py`` file, a package
directory, or a directory of them; several joined by the OS path separator).

A path plugin is imported under its own name (file stem or directory name), the name Spark's Python workers
import it by from the archive `streamling.spark.shipping` sends them; so two plugins cannot share a name.
Errors name what failed and where: the file and line of a syntax error, both origins of an id defined twice.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamling.plugin import Plugin, PluginError, Preprocessor, kind_of

if TYPE_CHECKING:
    from streamling.config.model import PluginSettings
    from streamling.plugins.registry import OperatorRegistry

GROUP = "streamling.plugins"
BUILTINS = "streamling.builtins.plugin:PLUGIN"


@dataclass(frozen=True)
class PathPlugin:
    """A plugin loaded from the file system: its import name and the file or package directory to ship."""

    name: str
    root: Path


_lock = threading.RLock()
_path_plugins: dict[str, PathPlugin] = {}
_installed_plugins: dict[str, PathPlugin] = {}


def path_plugins() -> list[PathPlugin]:
    """Every plugin loaded by path in this process, for shipping to Spark's Python workers."""
    with _lock:
        return list(_path_plugins.values())


def installed_plugins() -> list[PathPlugin]:
    """The top-level packages (or modules) of the installed plugins this process loaded, for shipping to a
    cluster's workers like the ``streamling`` package itself; the built-ins are part of that package."""
    with _lock:
        return list(_installed_plugins.values())


def _note_installed(ep: EntryPoint) -> None:
    top = ep.module.split(".")[0]
    if top == "streamling":
        return
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return
    origin = Path(spec.origin)
    root = origin.parent if spec.submodule_search_locations else origin
    with _lock:
        _installed_plugins[top] = PathPlugin(top, root)


def load_installed(registry: OperatorRegistry) -> None:
    """The entry points of group ``streamling.plugins``, the built-ins first; the built-ins are loaded directly
    when the package runs from a source tree whose entry points are not installed."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: (ep.value != BUILTINS, ep.name))
    if not any(ep.value == BUILTINS for ep in found):
        found.insert(0, EntryPoint(name="builtins", value=BUILTINS, group=GROUP))
    for ep in found:
        origin = _entry_point_origin(ep)
        try:
            plugin = ep.load()
        except PluginError as exc:
            raise PluginError(f"plugin {origin}: {exc.message}") from None
        except Exception as exc:
            raise PluginError(f"plugin {origin} failed to load: {_described(exc)}") from None
        register(registry, _as_plugin(plugin, origin), origin)
        _note_installed(ep)


def _entry_point_origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    owner = f" of distribution '{dist.name}'" if dist is not None else ""
    return f"entry point '{ep.name} = {ep.value}'{owner}"


def load_path(registry: OperatorRegistry, location: str) -> None:
    """Load every plugin `location` names (see the module docstring)."""
    for part in [p for p in location.split(os.pathsep) if p.strip()]:
        path = Path(part.strip()).expanduser()
        if not path.exists():
            raise PluginError(f"plugin path '{path}' does not exist (STREAMLING__PLUGIN__PATH)")
        for name, root in plugin_roots(path):
            _load_root(registry, name, root.resolve())


def plugin_roots(path: Path) -> list[tuple[str, Path]]:
    """The plugins one entry of the path names, as (import name, `.py` file or package folder); also what a
    packed environment copies (`spark/packed_env.py`)."""
    if path.is_file():
        if path.suffix != ".py":
            raise PluginError(f"plugin path '{path}' is neither a .py file nor a directory")
        return [(path.stem, path)]
    if (path / "__init__.py").is_file():
        return [(path.name, path)]
    roots = []
    for child in sorted(path.iterdir()):
        if child.name.startswith((".", "_")):
            continue
        if child.is_file() and child.suffix == ".py":
            roots.append((child.stem, child))
        elif child.is_dir() and (child / "__init__.py").is_file():
            roots.append((child.name, child))
    if not roots:
        raise PluginError(f"plugin path '{path}' holds no .py file and no package directory")
    return roots


def _load_root(registry: OperatorRegistry, name: str, root: Path) -> None:
    if not name.isidentifier():
        raise PluginError(f"plugin '{root}': '{name}' cannot be imported by that name (not a Python identifier)")
    with _lock:
        known = _path_plugins.get(name)
        if known is not None and known.root == root:
            return
        loaded = sys.modules.get(name)
        if known is not None or loaded is not None:
            where = str(known.root) if known else getattr(loaded, "__file__", None) or "the Python path"
            raise PluginError(f"plugin '{root}' is named '{name}', like the module already loaded from {where}")
        init = root / "__init__.py" if root.is_dir() else root
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(root)] if root.is_dir() else None
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            _forget(name)
            where = f"{exc.filename or init}, line {exc.lineno}"
            raise PluginError(f"plugin file {where}: syntax error: {exc.msg}") from None
        except PluginError as exc:
            _forget(name)
            raise PluginError(f"plugin '{init}': {exc.message}") from None
        except Exception as exc:
            _forget(name)
            raise PluginError(f"plugin '{init}' failed to load: {_described(exc, init)}") from None
        origin = f"'{init}'"
        plugin = getattr(module, "PLUGIN", None)
        if plugin is None:
            _forget(name)
            raise PluginError(f"plugin '{init}' defines no PLUGIN = streamling.plugin.Plugin(...)")
        _path_plugins[name] = PathPlugin(name, root)
    try:
        register(registry, _as_plugin(plugin, origin), origin)
    except PluginError:
        with _lock:
            _path_plugins.pop(name, None)
            _forget(name)
        raise


def _forget(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def _described(exc: BaseException, file: Path | None = None) -> str:
    """``Type: message``, at the deepest line of the plugin's own code when there is one."""
    frames = traceback.extract_tb(exc.__traceback__)
    if file is not None:
        base = file.parent if file.name == "__init__.py" else file
        own = [f for f in frames if f.filename == str(file) or f.filename.startswith(str(base) + os.sep)]
        if own:
            return f"{type(exc).__name__}: {exc} ({own[-1].filename}, line {own[-1].lineno})"
    return f"{type(exc).__name__}: {exc}"


def _as_plugin(value: Any, origin: str) -> Plugin:
    if isinstance(value, Plugin):
        return value
    nested = getattr(value, "PLUGIN", None)  # an entry point naming the module instead of its PLUGIN
    if isinstance(nested, Plugin):
        return nested
    raise PluginError(f"plugin {origin} is not a streamling.plugin.Plugin (got {type(value).__name__})")


def register(registry: OperatorRegistry, plugin: Plugin, origin: str) -> None:
    """Enter everything `plugin` defines in `registry`."""
    for name, classes in plugin.node_classes():
        plugin_id = plugin.id(name)
        for cls in classes:
            kind = kind_of(cls)
            if kind == "operator":
                spec = cls.spec_model
                registry.register(plugin_id, spec, cls, origin)
                continue
            from streamling.plugins.specs import node_spec

            spec = node_spec(plugin_id, kind, cls)
            registry.register(plugin_id, spec, PluginOperatorFactory(cls, plugin_id), origin)
    for function in plugin.functions:
        registry.add_function(function() if isinstance(function, type) else function, origin)
    for pre in plugin.preprocessors:
        registry.add_preprocessor(plugin.id(pre.name), pre, origin)


class PluginOperatorFactory:
    """Builds the Spark-level operator for an Arrow-level plugin class; the adapters (and with them pyspark)
    are imported only when a plan is built."""

    def __init__(self, cls: type, plugin_id: str) -> None:
        self.cls = cls
        self.plugin_id = plugin_id
        self.key = (cls, plugin_id)

    def __call__(self, name: str, spec: Any, settings: Any) -> Any:
        from streamling.plugins.adapters import adapter_for

        return adapter_for(self.cls, self.plugin_id)(name, spec, settings)


def configure(registry: OperatorRegistry, settings: PluginSettings) -> None:
    """Load what the ``plugin`` settings name: the plugin path, and check the preprocessor ids."""
    registry.ensure_loaded()
    if settings.path:
        load_path(registry, settings.path)


def preprocessors(registry: OperatorRegistry, settings: PluginSettings) -> list[tuple[str, Preprocessor]]:
    """The preprocessors ``plugin.preprocessor_ids`` turns on, in order, built with their options."""
    from pydantic import ValidationError

    out = []
    for plugin_id in settings.preprocessor_ids:
        cls = registry.preprocessor(plugin_id)
        if cls is None:
            known = ", ".join(registry.preprocessor_ids()) or "none"
            raise PluginError(
                f"setting plugin.preprocessor_ids: no preprocessor '{plugin_id}' is loaded (loaded: {known})"
            )
        raw = settings.preprocessor_options.get(plugin_id) or {}
        try:
            options = cls.options_model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}" for e in exc.errors())
            raise PluginError(f"setting plugin.preprocessor_options.{plugin_id}: {problems}") from None
        out.append((plugin_id, cls(options)))
    return out
