"""``streamling inspect [--node N] [--once] [URL]``: follow a running pipeline's live rows from a terminal.

It reads the admin API's event stream (``/api/live/stream``) and prints, for each fresh sample of a node, a header
line and one JSON object per row, so the output can be read or piped (``| jq``). URL defaults to this machine's
admin port from the settings (``admin_api_port``, 3000 when unset); the token is ``admin_api_token``, else the
admin API's token file on this host.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any, TextIO

import httpx

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamling inspect", description="Follow a running pipeline's live rows.")
    p.add_argument("url", nargs="?", help="the pipeline's admin API (default http://127.0.0.1:<admin_api_port>)")
    p.add_argument("--node", help="only this node (default: every node)")
    p.add_argument("--once", action="store_true", help="print the rows kept now and exit")
    p.add_argument("--config", metavar="NAME_OR_PATH", help="config file to read admin_api_port from")
    return p


def events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs of a Server-Sent Events stream."""
    event, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def show(doc: dict[str, Any], out: TextIO) -> None:
    when = datetime.fromtimestamp(doc["sampled_at"]).strftime("%H:%M:%S") if doc.get("sampled_at") else "-"
    out.write(f"--- {doc['node']}: {len(doc['rows'])} rows, sampled {when}\n")
    for row in doc["rows"]:
        out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    out.flush()


def main(argv: list[str], out: TextIO = sys.stdout) -> int:
    args = parser().parse_args(argv)
    from streamling.config import load_settings
    from streamling.core.guard import read_token

    settings = load_settings(args.config)
    url = args.url or f"http://127.0.0.1:{settings.admin_api_port or 3000}"
    base = url.rstrip("/")
    configured = settings.admin_api_token.get_secret_value() if settings.admin_api_token is not None else None
    token = read_token("admin", base, configured)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {"node": args.node} if args.node else {}
    connected = False
    try:
        with httpx.Client(base_url=base, timeout=httpx.Timeout(10.0, read=None), headers=headers) as client:
            if args.once:
                answer = client.get("/api/live", params=params)
                if answer.status_code != 200:
                    return _refused(answer.json())
                for node, doc in answer.json()["nodes"].items():
                    show({"node": node, **doc}, out)
                return EXIT_OK
            with client.stream("GET", "/api/live/stream", params=params) as stream:
                if stream.status_code != 200:
                    stream.read()
                    return _refused(stream.json())
                connected = True
                for event, data in events(stream.iter_lines()):
                    if event == "rows":
                        show(json.loads(data), out)
    except httpx.TransportError as exc:
        if connected:  # the run ended and its admin API with it
            print(f"The stream from {base} ended", file=sys.stderr)
            return EXIT_OK
        print(f"Error: cannot reach the pipeline's admin API at {base}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _refused(answer: dict[str, Any]) -> int:
    print(f"Error: {answer.get('error', answer)}", file=sys.stderr)
    return EXIT_INVALID
