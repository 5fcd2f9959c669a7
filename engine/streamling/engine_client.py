"""Submitting pipelines to a warm engine (`streamling serve`): `EngineClient`, and ``streamling submit``.

``streamling submit PIPELINE [--engine URL] [--config NAME]`` behaves as ``streamling PIPELINE`` does — the same
settings (this shell's config file and ``STREAMLING__`` variables, relative paths taken from here), the run's log
lines on stderr, SIGTERM/SIGINT to finish the in-flight epoch and stop, the same exit codes — but the pipeline runs
in the engine. A second signal leaves at once; the run still drains on the engine.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from streamling.core.guard import read_token, token_path
from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from streamling.config.model import Settings
    from streamling.runtime.summary import RunSummary

DEFAULT_PORT = 18070
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
POLL_SEC = 0.2
PATH_SETTINGS = (
    "state_backend.sqlite.database_path",
    "clickhouse_source.path",
    "clickhouse_sink.path",
)
"""Settings that name files: a relative one means relative to the submitter's directory, not the engine's."""


class EngineClient:
    """The engine's HTTP API. Every failure to reach it is a retriable `StreamlingError`; a refused token is the
    user's. `token`: the engine's (`engine_token` finds it in the settings or the engine's token file)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.has_token = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)

    @classmethod
    def for_settings(cls, settings: Settings, url: str | None = None) -> EngineClient:
        """A client of the engine at `url` (else `engine_url`, else the default) with the token the settings give."""
        target = url or settings.engine_url or DEFAULT_URL
        return cls(target, engine_token(settings, target))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise StreamlingError.unavailable(f"the engine at {self.url} is unreachable: {exc}") from None
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.status_code >= 400:
            message = body.get("error") or f"HTTP {response.status_code}"
            if response.status_code >= 500:
                raise StreamlingError.unavailable(f"the engine at {self.url}: {message}")
            if response.status_code == 401:
                where = token_path("engine", urlsplit(self.url).port or DEFAULT_PORT)
                told = "refused the token given" if self.has_token else "needs a token"
                raise StreamlingError.user(
                    f"the engine at {self.url} {told}: set engine.token (STREAMLING__ENGINE__TOKEN) to its token, or "
                    f"run as the engine's user on its host (the engine keeps it in {where})"
                )
            raise StreamlingError.user(f"the engine at {self.url}: {message}")
        return body

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def submit(self, pipeline: str | Path, settings: Settings) -> dict[str, Any]:
        """Start `pipeline` (a path on the engine's host) with `settings`: file settings given relative are taken
        from this process's directory."""
        return self._call("POST", "/runs", json={"pipeline": str(pipeline), "settings": submitted_settings(settings)})

    def key_marks(
        self, settings: Settings, tables: list[tuple[str, str]], recorded: dict[str, str | None]
    ) -> list[dict[str, Any]]:
        """The ClickHouse tables' marks (`streamling.table_marks`, as ``KeyMark`` fields), read by the engine in
        its process (the one holding the embedded ClickHouse while its runs go on)."""
        body = {"settings": submitted_settings(settings), "tables": [list(t) for t in tables], "recorded": recorded}
        marks: list[dict[str, Any]] = self._call("POST", "/clickhouse/marks", json=body)["marks"]
        return marks

    def status(self, run_id: str, logs_from: int = 0) -> dict[str, Any]:
        return self._call("GET", f"/runs/{run_id}", params={"logs_from": logs_from})

    def stop(self, run_id: str) -> dict[str, Any]:
        return self._call("POST", f"/runs/{run_id}/stop")

    def follow(
        self,
        run_id: str,
        on_log: Callable[[str], None] = lambda _line: None,
        on_status: Callable[[dict[str, Any]], None] = lambda _view: None,
        stop: threading.Event | None = None,
    ) -> dict[str, Any]:
        """Poll the run until it is done, handing over its log lines and views; `stop` set asks it to stop (once).
        An engine that goes away meanwhile raises: the run's positions are in its state backend."""
        logs_from, stop_sent = 0, False
        while True:
            if stop is not None and stop.is_set() and not stop_sent:
                self.stop(run_id)
                stop_sent = True
            try:
                view = self.status(run_id, logs_from)
            except StreamlingError as exc:
                raise StreamlingError.unavailable(
                    f"{exc.message}; run {run_id} was in flight: its committed positions are in the state backend, "
                    "submit it again to resume"
                ) from None
            for line in view["logs"]:
                on_log(line)
            logs_from = view["next_log"]
            on_status(view)
            if view["done"]:
                return view
            (stop or threading.Event()).wait(POLL_SEC)


def run_on_engine(
    client: EngineClient,
    pipeline: str | Path,
    settings: Settings,
    stop: threading.Event | None = None,
    summary: RunSummary | None = None,
    on_log: Callable[[str], None] = lambda _line: None,
) -> RunSummary:
    """`run_pipeline`'s twin on a warm engine: the same arguments and result, `summary` filled as the engine's
    epochs commit, `stop` honoured, and the run's failure raised here as a `StreamlingError`."""
    from streamling.runtime.summary import RunSummary, SourceProgress

    summary = summary if summary is not None else RunSummary()

    def update(view: dict[str, Any]) -> None:
        reported = view["summary"]
        for name, progress in reported["sources"].items():
            mine = summary.sources.setdefault(name, SourceProgress())
            mine.epochs, mine.rows_in, mine.position = progress["epochs"], progress["rows_in"], progress["position"]
        summary.sink_rows.update(reported["sink_rows"])
        summary.sink_ops.update(reported["sink_ops"])
        summary.duration_sec = reported["duration_sec"]
        summary.stopped_by_signal = reported["stopped_by_signal"]

    run = client.submit(Path(pipeline).absolute(), settings)
    view = client.follow(run["id"], on_log=on_log, on_status=update, stop=stop)
    if view["error"]:
        if view["state"] == "invalid":
            raise StreamlingError.user(view["error"])
        raise StreamlingError(view["error"])
    return summary


def engine_token(settings: Settings, url: str) -> str | None:
    """The token for the engine at `url`: ``engine.token``, else the engine's token file on this host."""
    configured = settings.engine.token.get_secret_value() if settings.engine.token is not None else None
    return read_token("engine", url, configured, settings.engine.token_file)


def submitted_settings(settings: Settings) -> dict[str, Any]:
    """The settings document sent to the engine, with the file settings made absolute from here."""
    from streamling.config.layers import settings_document

    document = settings_document(settings)
    for dotted in PATH_SETTINGS:
        *sections, leaf = dotted.split(".")
        node = functools.reduce(lambda d, key: d[key], sections, document)
        if isinstance(node.get(leaf), str) and node[leaf] and not os.path.isabs(node[leaf]):
            node[leaf] = os.path.abspath(node[leaf])
    plugins = document["plugin"].get("path")
    if plugins:
        document["plugin"]["path"] = ":".join(os.path.abspath(p) for p in plugins.split(":") if p)
    return document


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamling submit", description="Run a pipeline on a warm engine.")
    p.add_argument("pipeline", nargs="?", help="pipeline YAML/JSON (default: STREAMLING__PIPELINE_DEFINITION_LOCATION)")
    p.add_argument("--engine", metavar="URL", help=f"the engine (default: engine_url, else {DEFAULT_URL})")
    p.add_argument("--config", metavar="NAME_OR_PATH", help="config file (default base name 'config')")
    return p


def main(argv: list[str]) -> int:
    from streamling.config import load_settings
    from streamling.config.layers import resolve_location

    args = parser().parse_args(argv)
    stop = threading.Event()
    signals = []

    def on_signal(_signum: int, _frame: Any) -> None:
        signals.append(_signum)
        if len(signals) > 1:
            print("Error: stopped waiting; the run finishes its epoch on the engine", file=sys.stderr)
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        settings = load_settings(args.config)
        location = resolve_location(args.pipeline, settings).absolute()
        with EngineClient.for_settings(settings, args.engine) as client:
            run_on_engine(client, location, settings, stop, on_log=_to_stderr)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2 if exc.user_facing and not exc.retriable else 1
    return 0
