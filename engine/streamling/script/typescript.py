"""TypeScript → JavaScript with Sucrase, evaluated inside a QuickJS sandbox like user scripts.

Sucrase only removes types (interfaces and type aliases become blank lines), so the JavaScript keeps the
TypeScript's line numbers and errors point at the user's lines. It needs no network at run time: ``./dev setup``
bundles it once from npm into one file, ``<venv>/share/streamling/sucrase.js`` (``$STREAMLING_SUCRASE_BUNDLE``
overrides the path); no third-party code lives in the repository. Only the driver transpiles: executors receive
the JavaScript.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path

from streamling.script.sandbox import Limits, Sandbox, SandboxError, ScriptSyntaxError

BUNDLE_ENV = "STREAMLING_SUCRASE_BUNDLE"
_LIMITS = Limits(time_limit_ms=30_000, memory_limit_mb=512)
_LOCATION = re.compile(r"\s*\((\d+):(\d+)\)$")
_LOCK = threading.Lock()
_sandbox: Sandbox | None = None


class TypeScriptUnavailable(Exception):
    """The Sucrase bundle is missing."""


def bundle_path() -> Path:
    """Where the Sucrase bundle is expected: ``$STREAMLING_SUCRASE_BUNDLE`` or ``<sys.prefix>/share/streamling``."""
    configured = os.environ.get(BUNDLE_ENV)
    return Path(configured) if configured else Path(sys.prefix) / "share" / "streamling" / "sucrase.js"


def _compiler() -> Sandbox:
    global _sandbox
    if _sandbox is None or _sandbox.broken:
        path = bundle_path()
        if not path.is_file():
            raise TypeScriptUnavailable(
                f"language 'typescript' needs the Sucrase bundle at {path}, which does not exist; run `./dev setup` "
                f"(it bundles Sucrase from npm) or point {BUNDLE_ENV} at a bundle"
            )
        sandbox = Sandbox(_LIMITS)
        sandbox.load_library(path.read_text(encoding="utf-8"))
        _sandbox = sandbox
    return _sandbox


@lru_cache(maxsize=64)
def transpile(source: str) -> str:
    """The JavaScript of a TypeScript script, line for line; `ScriptSyntaxError` (with the line and column) when
    the TypeScript does not parse."""
    with _LOCK:
        compiler = _compiler()
        try:
            reply = compiler.call(
                "(function(){ try { return ['ok', sucrase.transform(globalThis.__streamling_ts, "
                "{transforms: ['typescript'], disableESTransforms: true}).code]; } catch (e) { "
                "return ['error', String(e && e.name), String(e && e.message)]; } })()",
                {"__streamling_ts": source},
            )
        except SandboxError as exc:
            raise ScriptSyntaxError(f"transpiling TypeScript failed: {exc}") from None
    if reply[0] == "ok":
        return str(reply[1])
    name, message = reply[1], reply[2]
    where = _LOCATION.search(message)
    if where:
        message = message[: where.start()] + f" at line {where.group(1)}, column {where.group(2)}"
    raise ScriptSyntaxError(f"{name}: {message}")
