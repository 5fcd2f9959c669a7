"""Benchmark: generator → HTTP handler → blackhole against a loopback echo server, in job mode.

    .venv/bin/python bench/http_handler_echo.py [--rows N] [--one-row-rows N] [--runs K] [--modes batched,one_row]

The echo server is uvicorn (httptools parser, uvloop) serving a bare ASGI app that answers every POST with its
body, in its own process on the same machine. Two modes: `batched` (payload v0, up to
`external_http_handler.trigger_max_count` = 2000 rows per request) and `one_row` (`one_row_per_request: true`).
Prints records/s (wall clock including process start, and the engine's run without Spark start-up), CPU seconds
per million rows of the engine's process tree and of the server, peak RSS, requests served; records JSON in
bench/results/.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import measure, record, streamling_cmd, summarize

PIPELINE = """
sources:
  gen: {{type: generator, rows: {rows}}}
transforms:
  echo:
    type: handler
    from: gen
    primary_key: id
    url: {url}
    one_row_per_request: {one_row}
sinks:
  sink: {{type: blackhole, from: echo}}
"""
FINISHED = re.compile(r"Finished in ([0-9.]+)s")
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")


async def echo_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """A bare ASGI app: answer a POST with its body, and count requests (GET /count)."""
    if scope["type"] != "http":
        return
    if scope["method"] == "GET":
        body = str(echo_app.served).encode()  # type: ignore[attr-defined]
    else:
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        echo_app.served += 1  # type: ignore[attr-defined]
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


echo_app.served = 0  # type: ignore[attr-defined]


def serve(port: int) -> None:
    import uvicorn

    uvicorn.run(
        echo_app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served(port: int) -> int:
    import httpx

    return int(httpx.get(f"http://127.0.0.1:{port}/count", timeout=10).text)


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            served(port)
            return proc
        except Exception:
            time.sleep(0.2)
    proc.kill()
    sys.exit("the echo server did not start")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=1_000_000, help="rows of the batched mode")
    args.add_argument("--one-row-rows", type=int, help="rows of the one_row mode (default: --rows)")
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--modes", default="batched,one_row")
    args.add_argument("--master", default="local[2]")
    args.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    opts = args.parse_args()
    if opts.serve:
        serve(opts.serve)
        return

    import httptools
    import uvicorn
    import uvloop

    port = free_port()
    server = start_server(port)
    server_ps = psutil.Process(server.pid)
    work = Path(tempfile.mkdtemp(prefix="streamling-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
    env.update(
        {
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__SPARK__MASTER": opts.master,
            "STREAMLING__SPARK__CHECKPOINT_ROOT": str(work / "ckpt"),
        }
    )
    results: dict = {}
    try:
        for mode in opts.modes.split(","):
            rows = opts.one_row_rows or opts.rows if mode == "one_row" else opts.rows
            pipeline = work / f"{mode}.yaml"
            text = PIPELINE.format(
                rows=rows, url=f"http://127.0.0.1:{port}/echo", one_row=str(mode == "one_row").lower()
            )
            pipeline.write_text(textwrap.dedent(text))
            runs = []
            for i in range(opts.warmup + opts.runs):
                requests_before = served(port)
                server_cpu_before = sum(server_ps.cpu_times()[:2])
                m = measure([*streamling_cmd(), str(pipeline)], env, work)
                if m.returncode != 0:
                    sys.exit(f"{mode} run failed ({m.returncode}):\n{m.stderr_tail}")
                run_sec = float(FINISHED.search(m.stderr_tail).group(1))
                written = int(WRITTEN.search(m.stderr_tail).group(1))
                if written != rows:
                    sys.exit(f"{mode}: {written} rows written, expected {rows}")
                server_cpu = sum(server_ps.cpu_times()[:2]) - server_cpu_before
                m.extra = {
                    "run_sec": run_sec,
                    "rows_written": written,
                    "requests": served(port) - requests_before,
                    "records_per_sec_wall": round(rows / m.wall_sec),
                    "records_per_sec_run": round(rows / run_sec),
                    "cpu_sec_per_million": round(m.cpu_sec / (rows / 1e6), 2),
                    "server_cpu_sec_per_million": round(server_cpu / (rows / 1e6), 2),
                }
                label = "warm-up" if i < opts.warmup else f"run {i - opts.warmup + 1}"
                print(
                    f"{mode} {label}: {m.wall_sec:.1f}s wall ({m.extra['records_per_sec_wall']:,} rec/s), "
                    f"{run_sec:.1f}s run ({m.extra['records_per_sec_run']:,} rec/s), {m.extra['requests']:,} requests, "
                    f"{m.extra['cpu_sec_per_million']} CPU-s/M (+ server {m.extra['server_cpu_sec_per_million']}), "
                    f"peak RSS {m.peak_rss_mb:,.0f} MB",
                    flush=True,
                )
                if i >= opts.warmup:
                    runs.append(m)
            results[mode] = {
                "rows": rows,
                "requests_per_run": runs[0].extra["requests"],
                "records_per_sec_wall": summarize([r.extra["records_per_sec_wall"] for r in runs]),
                "records_per_sec_run": summarize([r.extra["records_per_sec_run"] for r in runs]),
                "cpu_sec_per_million": summarize([r.extra["cpu_sec_per_million"] for r in runs]),
                "server_cpu_sec_per_million": summarize([r.extra["server_cpu_sec_per_million"] for r in runs]),
                "peak_rss_mb": summarize([r.peak_rss_mb for r in runs]),
                "runs": [r.recorded() for r in runs],
            }
    finally:
        server.terminate()
        server.wait(10)
    path = record(
        "http_handler_echo",
        {
            "master": opts.master,
            "server": (
                f"uvicorn {uvicorn.__version__} (httptools {httptools.__version__}, uvloop {uvloop.__version__}), "
                "bare ASGI echo app, one process on the same machine"
            ),
            "settings": "external_http_handler defaults: trigger_max_count 2000, buffer_size 25",
            "modes": results,
        },
    )
    for mode, result in results.items():
        print(
            f"{mode} median: {result['records_per_sec_wall']['median']:,.0f} rec/s wall, "
            f"{result['records_per_sec_run']['median']:,.0f} rec/s run"
        )
    print(f"-> {path}")


if __name__ == "__main__":
    main()
