"""The admin API: a small HTTP server in the driver, on ``admin_api_host:admin_api_port``.

It shows the pipeline's rows, so every path but the probes needs its token (``admin_api_token``, else generated
into ``~/.streamling/admin-<port>.token``; a browser opens ``/?token=…`` once and keeps it in a cookie), and
requests under another Host name or from another origin are refused (`core/guard.py`, as the engine's API).

- ``GET /health`` — liveness: 200 while no source is stalled past ``source_stall_timeout_sec`` (and the run did not
  fail), else 503 naming the stalled sources.
- ``GET /ready`` — readiness: 200 once the first epoch committed, or every source started and found nothing to
  read; 503 before that and while stopping.
- ``GET /api/topology`` — every node: kind, type, inputs, tags, its spec (secrets hidden), schema and counters.
- ``GET /api/positions`` — each source's committed position, epochs, commit time, backlog and commit lag.
- ``GET /api/live[?node=N]`` — the latest rows seen at every node (with ``live_data_inspect_enabled``).
- ``GET /api/live/stream[?node=N]`` — the same as Server-Sent Events: an ``event: rows`` whenever a node's rows
  change (a browser's EventSource or ``curl -N`` follows it; ``streamling inspect`` prints it).
- ``GET /metrics`` — the metrics in the Prometheus text format (``prometheus_metrics_enabled``).
- ``GET /`` — a page: the topology as a graph, rows/s and a sparkline per node, a node's live rows on a click.

Starlette on uvicorn, in a daemon thread; the socket is bound before the run starts, so a port in use fails the run
at once with a message naming it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from streamling.telemetry.run import RunTelemetry

log = logging.getLogger("streamling.admin")
STREAM_POLL_SEC = 0.25
STREAM_HEARTBEAT_SEC = 15.0
STARTUP_TIMEOUT_SEC = 10.0


def listen(host: str, port: int, failure: str) -> socket.socket:
    """A listening socket bound before uvicorn starts, so a taken port is a clear user error (`failure`: …)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StreamlingError.user(f"{failure}: {exc.strerror}") from None
    sock.listen(128)
    return sock


class AdminServer:
    def __init__(self, telemetry: RunTelemetry, host: str, port: int) -> None:
        self.telemetry = telemetry
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self.token_file: Path | None = None

    @property
    def url(self) -> str:
        return self.telemetry.settings.admin_api_url or f"http://{self.host}:{self.port}/"

    def start(self) -> None:
        import uvicorn

        from streamling.core.guard import Guard, host_names, token_for

        sock = listen(
            self.host,
            self.port,
            f"admin API: cannot listen on {self.host}:{self.port} (admin_api_host, admin_api_port)",
        )
        settings = self.telemetry.settings
        configured = settings.admin_api_token.get_secret_value() if settings.admin_api_token is not None else None
        try:
            token, self.token_file = token_for("admin", self.port, configured, None)
        except OSError as exc:
            sock.close()
            raise StreamlingError.user(f"admin API: cannot keep its token: {exc}") from None
        hosts = host_names(self.host, self.port, settings.admin_api_allowed_hosts)
        config = uvicorn.Config(
            Guard(self.app(), token, hosts, "the admin API"),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="streamling-admin", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_SEC
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise StreamlingError(
                f"admin API: did not start on {self.host}:{self.port} within {STARTUP_TIMEOUT_SEC:g}s"
            )
        where = f"its token is in {self.token_file}" if self.token_file else "its token is admin_api_token"
        log.info("Admin API on %s (%s; a browser opens it once as %s?token=…)", self.url, where, self.url)

    def stop(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)

    # -- the application --

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", self.page),
                Route("/health", self.health),
                Route("/ready", self.ready),
                Route("/api/topology", self.topology),
                Route("/api/positions", self.positions),
                Route("/api/live", self.live),
                Route("/api/live/stream", self.live_stream),
                Route("/metrics", self.prometheus),
            ]
        )

    async def page(self, request: Request) -> Response:
        html = resources.files("streamling.telemetry").joinpath("admin_page.html").read_text(encoding="utf-8")
        return HTMLResponse(html)

    async def health(self, request: Request) -> Response:
        stats = self.telemetry.stats
        stalled = stats.stalled(self.telemetry.settings.source_stall_timeout_sec)
        if stats.failure:
            return JSONResponse({"status": "failed", "failure": stats.failure}, status_code=503)
        if stalled:
            return JSONResponse({"status": "stalled", "stalled": stalled}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        stats = self.telemetry.stats
        if stats.ready():
            return JSONResponse({"status": "ready"})
        if stats.stopping:
            reason = "stopping"
        elif stats.running_since is None:
            reason = "starting (waiting for the pipeline's lease, initialising operators, starting queries)"
        else:
            reason = "no epoch committed yet"
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)

    async def topology(self, request: Request) -> Response:
        stats = self.telemetry.stats
        now = time.time()
        nodes = []
        for name, node in stats.nodes.items():
            info = node.info
            nodes.append(
                {
                    "name": name,
                    "kind": info.kind,
                    "operator_type": info.operator_type,
                    "inputs": list(info.inputs),
                    "tags": dict(info.tags),
                    "spec": info.spec,
                    "schema": info.schema,
                    "rows_total": node.rows_total,
                    "epochs": node.epochs,
                    "rows_per_sec": round(stats.rate(name, now), 3),
                    "sparkline": stats.sparkline(name, now),
                    "last_rows_at": node.last_rows_at,
                    "latency_ms": node.latency_ms,
                    "counters": dict(node.counters),
                    "health": self._node_health(name, now),
                }
            )
        return JSONResponse(
            {
                "pipeline": stats.pipeline,
                "application_id": self.telemetry.settings.application_id,
                "started_at": stats.started_at,
                "ready": stats.ready(),
                "live_inspection": self.telemetry.sample_every is not None,
                "nodes": nodes,
            }
        )

    def _node_health(self, name: str, now: float) -> str:
        """``failed``, ``stalled`` (a source, or a node fed by one), ``flowing`` (rows in the last minute) or
        ``idle``."""
        stats = self.telemetry.stats
        if stats.failure:
            return "failed"
        stalled = stats.stalled(self.telemetry.settings.source_stall_timeout_sec, now)
        if name in stalled or any(source in stalled for source in self._sources_of(name)):
            return "stalled"
        last = stats.nodes[name].last_rows_at
        return "flowing" if last is not None and now - last < 60 else "idle"

    def _sources_of(self, name: str) -> list[str]:
        plan = self.telemetry.plan
        return [source for source, below in plan.downstream.items() if name in below]

    async def positions(self, request: Request) -> Response:
        stats = self.telemetry.stats
        now_ms = time.time() * 1000
        out = {}
        for name, source in stats.sources.items():
            out[name] = {
                "position": source.position,
                "epochs": source.epochs,
                "committed_at": source.committed_at,
                "in_flight_since": source.in_flight_since,
                "backlog": source.backlog,
                "backlog_total": None if source.backlog is None else sum(source.backlog.values()),
                "commit_lag_ms": None if source.event_time_ms is None else max(0.0, now_ms - source.event_time_ms),
                "caught_up": source.caught_up,
            }
        return JSONResponse({"pipeline": stats.pipeline, "sources": out})

    def _live_off(self) -> Response | None:
        if self.telemetry.sample_every is None:
            return JSONResponse(
                {"error": "live inspection is off: set live_data_inspect_enabled: true"}, status_code=404
            )
        return None

    def _node_param(self, request: Request) -> tuple[list[str] | None, Response | None]:
        node = request.query_params.get("node")
        if node is None:
            return list(self.telemetry.stats.nodes), None
        if node not in self.telemetry.stats.nodes:
            known = ", ".join(self.telemetry.stats.nodes)
            return None, JSONResponse({"error": f"no node {node!r} (nodes: {known})"}, status_code=404)
        return [node], None

    def _live_doc(self, names: list[str]) -> dict[str, Any]:
        stats = self.telemetry.stats
        return {name: {"sampled_at": stats.nodes[name].sampled_at, "rows": stats.nodes[name].sample} for name in names}

    async def live(self, request: Request) -> Response:
        off = self._live_off()
        names, missing = self._node_param(request)
        if off is not None or missing is not None or names is None:
            return off or missing or Response(status_code=500)
        return JSONResponse({"nodes": self._live_doc(names)})

    async def live_stream(self, request: Request) -> Response:
        off = self._live_off()
        names, missing = self._node_param(request)
        if off is not None or missing is not None or names is None:
            return off or missing or Response(status_code=500)
        return StreamingResponse(
            self._events(request, names),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _events(self, request: Request, names: list[str]) -> AsyncIterator[str]:
        """An ``event: rows`` per node now, then one whenever its rows change; a comment line as heartbeat."""
        seen: dict[str, float | None] = {}
        beat = time.monotonic()
        while not self._closing:
            for name, doc in self._live_doc(names).items():
                if doc["sampled_at"] != seen.get(name, -1.0):
                    seen[name] = doc["sampled_at"]
                    yield f"event: rows\ndata: {json.dumps({'node': name, **doc}, default=str)}\n\n"
            if time.monotonic() - beat >= STREAM_HEARTBEAT_SEC:
                beat = time.monotonic()
                yield ": keep-alive\n\n"
            if await request.is_disconnected():
                return
            await asyncio.sleep(STREAM_POLL_SEC)

    async def prometheus(self, request: Request) -> Response:
        metrics = self.telemetry.metrics
        if metrics is None or metrics.registry is None:
            return JSONResponse(
                {"error": "the Prometheus endpoint is off: prometheus_metrics_enabled"}, status_code=404
            )
        from prometheus_client import CONTENT_TYPE_LATEST

        text = await asyncio.to_thread(metrics.prometheus_text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)
