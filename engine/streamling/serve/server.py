"""``streamling serve``: a warm engine that runs pipelines side by side: submitted ones, and those of a directory.

One driver keeps its JVM, SparkContext and Spark's Python workers up between pipelines, so a submitted pipeline
starts in about a second instead of a cold start's several (bench scenario 3), and fifty pipelines cost one JVM
(bench scenario 6). Its HTTP API (JSON, loopback by default; every path but the probes needs the engine's token,
and requests under another Host name or from another origin are refused: `core/guard.py`):

- ``POST /runs`` ``{"pipeline": path, "settings": {…}}``: start a run (201, its view). The pipeline file is read
  on the engine's host; the settings document is the run's whole settings, secrets included (`settings_document`).
- ``GET /runs/{id}?logs_from=N``: its state (queued, starting, running, succeeded, stopped, failed, invalid), exit
  code, error, restarts, each source's position and lag, its summary, and its log lines from line N on.
- ``POST /runs/{id}/stop``: finish and commit the in-flight epoch, then end (as SIGTERM does to a CLI run).
- ``GET /runs``: every run (without logs), and with ``--pipelines`` each file of the directory.
- ``POST /clickhouse/marks`` ``{"settings": {…}, "tables": [[database, table], …], "recorded": {…}}``: each table's
  largest first sort-key value against the recorded ones (`streamling.clickhouse.marks`), read in this process:
  while its runs hold the embedded ClickHouse data path, no other process can (the Dagster backfill sensor asks).
- ``GET /health``: 200 while the engine takes runs. ``GET /ready``: 200 only when every pipeline is running (none
  queued or starting; with ``--pipelines``, every file valid and its run running).

SIGTERM or SIGINT stops every run that way, then the engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from streamling.clickhouse.marks import KeyMark, key_marks
from streamling.config.model import SparkSettings
from streamling.core.guard import Guard, host_names, token_for
from streamling.core.held import HELD
from streamling.errors import StreamlingError
from streamling.serve.directory import PipelineDirectory
from streamling.serve.runs import LIVE_STATES, Run, RunLogHandler, Runs, Submission
from streamling.telemetry.admin import listen

log = logging.getLogger("streamling.serve")

DEFAULT_PORT = 18070
STARTUP_TIMEOUT_SEC = 30.0


def app(runs: Runs, directory: PipelineDirectory | None = None) -> Starlette:
    def found(request: Request) -> Run:
        run = runs.get(request.path_params["run_id"])
        if run is None:
            raise LookupError(request.path_params["run_id"])
        return run

    async def submit(request: Request) -> JSONResponse:
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            return JSONResponse({"error": "the body must be JSON (Content-Type: application/json)"}, status_code=415)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be JSON"}, status_code=400)
        try:
            run = runs.submit(Submission.parse(body))
        except StreamlingError as exc:
            return JSONResponse({"error": exc.message}, status_code=400 if not runs.closed else 503)
        return JSONResponse(run.view(), status_code=201)

    async def marks(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be JSON"}, status_code=400)
        try:
            found = await run_in_threadpool(key_marks_of, body)
        except StreamlingError as exc:
            return JSONResponse({"error": exc.message}, status_code=400 if exc.user_facing else 503)
        return JSONResponse({"marks": [dataclasses.asdict(mark) for mark in found]})

    async def status(request: Request) -> JSONResponse:
        try:
            logs_from = int(request.query_params.get("logs_from", "0"))
            return JSONResponse(found(request).view(logs_from))
        except LookupError as exc:
            return JSONResponse({"error": f"no run {exc}"}, status_code=404)
        except ValueError:
            return JSONResponse({"error": "logs_from must be an integer"}, status_code=400)

    async def stop(request: Request) -> JSONResponse:
        try:
            run = found(request)
        except LookupError as exc:
            return JSONResponse({"error": f"no run {exc}"}, status_code=404)
        run.stop.set()
        return JSONResponse(run.view(run.log_count), status_code=202)

    async def listing(_: Request) -> JSONResponse:
        body: dict[str, Any] = {"runs": [r.brief() for r in runs.all()]}
        if directory is not None:
            body["pipelines"] = directory.view()
        return JSONResponse(body)

    async def health(_: Request) -> JSONResponse:
        running = sum(not r.done.is_set() for r in runs.all())
        return JSONResponse(
            {"status": "stopping" if runs.closed else "ok", "runs": running, "held": HELD.count()},
            status_code=503 if runs.closed else 200,
        )

    async def ready(_: Request) -> JSONResponse:
        live = [r for r in runs.all() if r.state in LIVE_STATES]
        waiting = sorted(r.id for r in live if r.state != "running")
        pipelines = directory.view() if directory is not None else {}
        not_running = sorted(name for name, p in pipelines.items() if p["state"] != "running")
        ok = not runs.closed and not waiting and not not_running
        body = {"ready": ok, "running": len(live) - len(waiting), "waiting": waiting, "not_running": not_running}
        return JSONResponse(body, status_code=200 if ok else 503)

    return Starlette(
        routes=[
            Route("/runs", submit, methods=["POST"]),
            Route("/runs", listing, methods=["GET"]),
            Route("/runs/{run_id}", status, methods=["GET"]),
            Route("/runs/{run_id}/stop", stop, methods=["POST"]),
            Route("/clickhouse/marks", marks, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
        ]
    )


def key_marks_of(body: object) -> list[KeyMark]:
    """`POST /clickhouse/marks`: the submitted settings' `clickhouse_source`, through this process's client (for
    the embedded engine, the one its runs share)."""
    from streamling.clickhouse.client import get_client
    from streamling.config.layers import settings_from_document

    if not isinstance(body, dict) or not isinstance(body.get("settings"), dict):
        raise StreamlingError.user("the body needs 'settings': the caller's settings document")
    tables = body.get("tables")
    recorded = body.get("recorded") or {}
    valid = isinstance(tables, list) and all(
        isinstance(t, list) and len(t) == 2 and all(isinstance(part, str) for part in t) for t in tables
    )
    if not valid or not isinstance(recorded, dict):
        raise StreamlingError.user("the body needs 'tables': [[database, table], ...], and 'recorded': {...}")
    settings = settings_from_document(body["settings"])
    client = get_client(settings.clickhouse_source, "clickhouse_source")
    return key_marks(client, [(d, t) for d, t in tables], recorded, "clickhouse_source")


def serve(
    runs: Runs,
    sock: socket.socket,
    stopping: threading.Event,
    token: str,
    allowed_hosts: list[str],
    directory: PipelineDirectory | None = None,
    token_where: str = "",
    signals: list[str] | None = None,
) -> None:
    """Answer on `sock` until `stopping` is set; then stop every run (each drains) and the HTTP server. `signals`
    holds the names of the signals that set it, logged here rather than in their handler (see `main`)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    guarded = Guard(app(runs, directory), token, host_names(host, port, allowed_hosts), "the engine")
    config = uvicorn.Config(guarded, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # the main thread owns signals
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="streamling-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_SEC
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        raise StreamlingError(f"streamling serve: the HTTP server did not start within {STARTUP_TIMEOUT_SEC:g}s")
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    log.info("Engine ready on %s/ (streamling submit --engine %s PIPELINE; %s)", url, url, token_where)
    try:
        if directory is not None:
            directory.start(stopping)
        while not stopping.wait(0.5):
            runs.evict()
    finally:
        if signals:
            log.info("Received %s", signals[0])
        log.info("Stopping: every run finishes its in-flight epoch")
        runs.stop_all()
        server.should_exit = True
        thread.join(10)


def engine_spark(spark: SparkSettings, task_slots_per_core: int) -> SparkSettings:
    """The engine's Spark settings: ``local[*]`` becomes ``local[cores * task_slots_per_core]`` (an epoch's task
    mostly waits on I/O, so a slot per core leaves many pipelines queueing while the cores idle); a master that
    names its slots, or a cluster's, is kept."""
    if spark.master.replace(" ", "") != "local[*]":
        return spark
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return spark.model_copy(update={"master": f"local[{cores * task_slots_per_core}]"})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="streamling serve", description="Keep a Spark engine warm and run the pipelines submitted to it."
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    p.add_argument("--config", metavar="NAME_OR_PATH", help="the engine's config file: its spark.*, engine.*, logging")
    p.add_argument(
        "--pipelines",
        metavar="DIR",
        help="run every pipeline file in DIR, and follow its changes (default: engine.pipelines_dir)",
    )
    return p


def main(argv: list[str]) -> int:
    from streamling.config import load_settings
    from streamling.spark.session import build_session
    from streamling.telemetry.logs import configure_logging

    args = parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        sock = listen(args.host, args.port, f"streamling serve: cannot listen on {args.host}:{args.port}")
        engine = settings.engine
        configured = engine.token.get_secret_value() if engine.token is not None else None
        token, token_file = token_for("engine", sock.getsockname()[1], configured, engine.token_file)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"Error: streamling serve: cannot keep its token: {exc}", file=sys.stderr)
        return 2
    folder = args.pipelines or engine.pipelines_dir
    if folder and not Path(folder).is_dir():
        print(f"Error: streamling serve: the pipelines directory {folder} does not exist", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    stopping = threading.Event()
    signals: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        # No logging here: the handler runs on the main thread between any two of its bytecodes, maybe while it
        # holds the runs' lock (`Runs.evict`), and a run's thread logging at that moment holds the run log
        # handler's lock while it waits for the runs' lock: an engine stuck on SIGTERM (seen in a test run).
        signals.append(signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    spark_settings = engine_spark(settings.spark, engine.task_slots_per_core)
    log.info("Starting Spark (%s)", spark_settings.master)
    spark = build_session(spark_settings, long_lived=True)
    runs = Runs(spark, engine.max_starting_runs, engine.run_retention_sec)
    handler = RunLogHandler(runs)
    engine_logger = logging.getLogger("streamling")
    handler.setFormatter(engine_logger.handlers[0].formatter if engine_logger.handlers else None)
    engine_logger.addHandler(handler)
    directory = PipelineDirectory(Path(folder), runs, settings, spark, engine.pipelines_poll_sec) if folder else None
    where = f"its token is in {token_file}" if token_file is not None else "its token is engine.token"
    try:
        serve(runs, sock, stopping, token, engine.allowed_hosts, directory, where, signals)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0
