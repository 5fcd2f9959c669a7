"""The JavaScript sandbox: QuickJS compiled to WebAssembly (quickjs-rs on wasmtime), one per script.

Why this shape:

- Nothing of the host is reachable from a script: QuickJS gets no host functions, no module loader and a
  WASI context without files, environment or stdio, so ``require``, ``fetch``, ``process`` and files do not
  exist inside it.
- Limits are enforced below the JavaScript engine. quickjs-rs's own ``memory_limit`` is not enforced (measured),
  so the wasmtime store caps the linear memory instead; an allocation past the cap fails inside QuickJS as
  "out of memory". The time limit is quickjs-rs's per-``eval`` deadline, polled by QuickJS's interrupt
  handler (loops and the regex engine poll it). A direct call through a JS function handle ignores that
  deadline (measured), so every call into the sandbox is an ``eval`` of a global call.
- The host crosses in once per batch: `Sandbox.run` hands over one payload and gets one reply.
- A sandbox whose limit tripped is discarded, never reused: its heap may be half-updated.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import stat
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

PREFIX = "globalThis.__streamling_user = ("
"""The user's script is evaluated as ``PREFIX + script + SUFFIX``: on the same lines, so positions keep the
script's own line numbers."""
SUFFIX = "\n);0"
_POSITION = re.compile(r"eval_script:(\d+):(\d+)")
_FRAME_NAME = re.compile(r"^\s*at (\S+)")


@dataclass(frozen=True)
class Limits:
    time_limit_ms: int
    memory_limit_mb: int


class SandboxError(Exception):
    """A problem inside the sandbox; the transform adds the node, the row and the input."""


class ScriptSyntaxError(SandboxError):
    """The script does not parse, or is not a single function expression."""


class LimitExceeded(SandboxError):
    """The time or memory limit stopped the script. `row` is the 0-based row it was on, when known."""

    def __init__(self, message: str, what: str, row: int | None) -> None:
        super().__init__(message)
        self.what = what
        self.row = row


@cache
def runner_source() -> str:
    return resources.files("streamling.script").joinpath("runner.js").read_text(encoding="utf-8")


def user_code(script: str) -> str:
    """The script as the expression the sandbox evaluates; a trailing ``;`` is allowed."""
    return PREFIX + script.rstrip().rstrip(";").rstrip() + SUFFIX


def clean_stack(stack: str) -> list[str]:
    """The user's frames of a QuickJS stack, ``at process (script:3)``; the runner's frames are cut. Columns are
    left out: QuickJS's are unreliable past the first line (measured), its line numbers are exact."""
    frames = []
    for line in stack.splitlines():
        line = line.strip()
        if not line:
            continue
        name = _FRAME_NAME.match(line)
        if name and name.group(1).startswith("streamling"):
            break
        frames.append(_POSITION.sub(lambda m: f"script:{m.group(1)}", line))
    return frames


def _position(stack: str | None, script: str) -> str:
    match = _POSITION.search(stack or "")
    if not match:
        return ""
    lines = script.rstrip().rstrip(";").rstrip().count("\n") + 1
    line = int(match.group(1))
    return " at the end of the script" if line > lines else f" at line {line}"


_COMPILED = threading.Lock()
_compiled = False


def _precompiled() -> None:
    """Give quickjs-rs its QuickJS module from a per-user cache of wasmtime's compiled code.

    Compiling QuickJS's WebAssembly takes ~0.8 CPU-s, once per process: every Spark Python worker that runs a
    script pays it on its first batch. The compiled module is kept in a directory only this user can write
    (``$XDG_CACHE_HOME/streamling`` or ``~/.cache/streamling``, else a private directory under the temp dir),
    keyed by the WebAssembly's hash, the wasmtime version and the machine, so later workers load it in ~1 ms.
    Loading compiled code trusts the file, hence the ownership and permission checks; any problem just means
    compiling as quickjs-rs would. Relies on quickjs-rs 0.2.6 internals (its shared-artifact table)."""
    global _compiled
    with _COMPILED:
        if _compiled:
            return
        _compiled = True
        try:
            import wasmtime
            from quickjs_rs import _engine, _wasmtime

            wasm = _engine._read_guest_wasm()
            digest = hashlib.sha256(wasm).digest()
            version = importlib.metadata.version("wasmtime")
            key = hashlib.sha256(digest + f"{version}/{platform.machine()}".encode()).hexdigest()[:24]
            folder = _cache_dir()
            path = folder / f"quickjs-{key}.cwasm" if folder else None
            engine = _wasmtime.shared_wasmtime_engine()
            module = None
            if path is not None and _private(path):
                try:
                    module = wasmtime.Module.deserialize_file(engine, str(path))
                except Exception:
                    module = None
            if module is None:
                module = wasmtime.Module(engine, wasm)
                if path is not None:
                    fd, temp = tempfile.mkstemp(dir=folder, prefix=".quickjs-")
                    with os.fdopen(fd, "wb") as out:
                        out.write(module.serialize())
                    os.replace(temp, path)
            with _wasmtime._SHARED_ARTIFACTS_LOCK:
                _wasmtime._SHARED_ARTIFACTS.setdefault(
                    "quickjs",
                    _wasmtime.SharedWasmArtifact(module, _engine._build_shared_linker(engine), digest),
                )
        except Exception:  # never worse than quickjs-rs on its own: it compiles on first use
            return


def _cache_dir() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (Path(base) / "streamling", Path(tempfile.gettempdir()) / f"streamling-{os.getuid()}"):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if _private(folder) and os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    return None


def _private(path: Path) -> bool:
    """Owned by this user and writable by nobody else (a missing file is not private: nothing to load)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class Sandbox:
    """One QuickJS instance with `limits`, holding the runner and (after `load`) one user function."""

    def __init__(self, limits: Limits) -> None:
        import quickjs_rs
        import wasmtime

        _precompiled()
        self.limits = limits
        self.lock = threading.Lock()
        self._runtime = quickjs_rs.Runtime(memory_limit=None)
        self._context = self._runtime.new_context(timeout=limits.time_limit_ms / 1000)
        instance = self._context._engine_ctx._inst
        instance.store.set_limits(memory_size=limits.memory_limit_mb * 2**20)
        instance.store.set_wasi(wasmtime.WasiConfig())  # no stdio either: scripts print nowhere
        self._memory = instance.mem
        self._store = instance.store
        self.broken = False
        self._eval(runner_source(), None)

    @property
    def memory_bytes(self) -> int:
        """The linear memory the sandbox holds now (it never shrinks)."""
        return self._memory.data_len(self._store)

    def load(self, script: str) -> None:
        """Evaluate `script` (JavaScript) as the user function; `ScriptSyntaxError` if it does not parse or is
        not a function."""
        import quickjs_rs

        try:
            self._eval(user_code(script), None)
        except quickjs_rs.JSError as exc:
            if exc.name == "SyntaxError":
                raise ScriptSyntaxError(f"SyntaxError: {exc.message}{_position(exc.stack, script)}") from None
            raise ScriptSyntaxError(
                f"evaluating the script failed: {exc.name}: {exc.message}"
                + "".join(f", {frame}" for frame in clean_stack(exc.stack or ""))
            ) from None
        kind = self._eval("typeof globalThis.__streamling_user", None)
        if kind != "function":
            what = kind if kind == "undefined" else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
            raise ScriptSyntaxError(f"the script must be a single function expression, but it evaluates to {what}")

    def load_library(self, code: str) -> None:
        """Evaluate trusted code (the Sucrase bundle) at the top level."""
        self._eval(code + "\n;0", None)

    def call(self, expression: str, values: dict[str, Any]) -> Any:
        """Set `values` as globals, then evaluate `expression` (a global call: the deadline applies)."""
        for name, value in values.items():
            self._context.globals[name] = value
        return self._eval(expression, None)

    def setup(self, spec: dict[str, Any]) -> None:
        """Generate the row builders for `spec` (input and output columns)."""
        self._context.globals["__streamling_spec"] = json.dumps(spec)
        self._eval("__streamling_setup(globalThis.__streamling_spec, globalThis.__streamling_user)", None)

    def run(self, payload: dict[str, Any]) -> list[Any]:
        """One batch in, one reply out (see runner.js); `LimitExceeded` when a limit stops it."""
        self._context.globals["__streamling_in"] = payload
        reply = self._eval("__streamling_batch(globalThis.__streamling_in)", payload.get("n"))
        if reply[0] == "memory":  # the runner caught QuickJS's out-of-memory error on a row
            self.broken = True
            raise self._out_of_memory(payload.get("n"), reply[1])
        return reply

    def probe(self, spec: dict[str, Any], payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Each row of `payload` through the loaded function, described rather than coerced (runner.js's
        ``__streamling_probe``): per row ``{"objects": [[[key, kind], ...], ...]}``, ``{"error": [name, message,
        stack]}`` or ``{"shape": message}``. Used at validation to infer the columns a script adds."""
        self._context.globals["__streamling_spec"] = json.dumps(spec)
        self._context.globals["__streamling_in"] = payload
        reply = self._eval("__streamling_probe(globalThis.__streamling_spec, globalThis.__streamling_in)", payload["n"])
        return json.loads(reply)

    def _eval(self, code: str, rows: int | None) -> Any:
        import quickjs_rs

        if self.broken:
            raise SandboxError("the sandbox was stopped by a limit and cannot be reused")
        try:
            return self._context.eval(code)
        except quickjs_rs.TimeoutError:
            self.broken = True
            raise LimitExceeded(
                f"the script ran longer than its time limit of {self.limits.time_limit_ms} ms"
                + (f" for a batch of {rows} rows" if rows is not None else ""),
                "time",
                self._current_row(),
            ) from None
        except quickjs_rs.MemoryLimitError:
            self.broken = True
            raise self._out_of_memory(rows) from None
        except quickjs_rs.JSError as exc:
            if exc.name == "InternalError" and "out of memory" in exc.message:
                self.broken = True
                raise self._out_of_memory(rows) from None
            raise
        except quickjs_rs.QuickJSError:
            raise
        except Exception as exc:  # a wasm trap: the guest died, typically allocating past the cap
            self.broken = True
            if self.memory_bytes >= self.limits.memory_limit_mb * 2**20 * 0.9:
                raise self._out_of_memory(rows) from None
            raise SandboxError(f"the sandbox failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}") from exc

    def _out_of_memory(self, rows: int | None, row: int | None = None) -> LimitExceeded:
        return LimitExceeded(
            f"the script ran out of memory: it needs more than its memory limit of {self.limits.memory_limit_mb} MB"
            + (f" for a batch of {rows} rows" if rows is not None else ""),
            "memory",
            self._current_row() if row is None else row,
        )

    def _current_row(self) -> int | None:
        """The row the runner was on when a limit stopped it (the sandbox is still readable after an interrupt)."""
        try:
            row = self._context.eval("__streamling_current()")
        except Exception:
            return None
        return row if isinstance(row, int) and row >= 0 else None

    def close(self) -> None:
        try:
            self._context.close()
            self._runtime.close()
        except Exception:  # closing must never mask the error that led here
            pass


def check_script(script: str, limits: Limits | None = None) -> None:
    """Parse `script` in a fresh sandbox: `ScriptSyntaxError` when it does not parse or is not a function."""
    sandbox = Sandbox(limits or Limits(time_limit_ms=10_000, memory_limit_mb=256))
    try:
        sandbox.load(script)
    finally:
        sandbox.close()


_CACHE: OrderedDict[tuple[str, str, Limits], Sandbox] = OrderedDict()
_CACHE_LOCK = threading.Lock()
CACHE_SIZE = 8
"""Sandboxes kept per Python worker; each holds its linear memory (up to its limit) until evicted."""


def sandbox_for(script: str, spec: dict[str, Any], limits: Limits) -> Sandbox:
    """The process's sandbox for this script, schema and limits, created on first use and reused across
    batches and tasks (Spark reuses Python workers)."""
    key = (script, json.dumps(spec, sort_keys=True), limits)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None and not found.broken:
            _CACHE.move_to_end(key)
            return found
    sandbox = Sandbox(limits)
    try:
        sandbox.load(script)
        sandbox.setup(spec)
    except BaseException:
        sandbox.close()
        raise
    with _CACHE_LOCK:
        old = _CACHE.pop(key, None)
        _CACHE[key] = sandbox
        while len(_CACHE) > CACHE_SIZE:
            _, evicted = _CACHE.popitem(last=False)
            evicted.close()
    if old is not None:
        old.close()
    return sandbox


def discard(sandbox: Sandbox) -> None:
    """Drop a sandbox from the cache (after a limit stopped it) and free it."""
    with _CACHE_LOCK:
        for key, value in list(_CACHE.items()):
            if value is sandbox:
                del _CACHE[key]
    sandbox.close()
