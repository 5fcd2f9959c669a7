"""A stand-in for the partner's orders API on loopback: ``python plugins/acme_api/demo_server.py --orders 500``.

``GET /orders?after=<cursor>&limit=<n>`` answers ``{"orders": [...], "next_cursor": "..."}`` with the orders after
the cursor (opaque to clients); an empty list when there are none yet. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def order(number: int) -> dict:
    return {
        "id": number,
        "customer": f"customer-{number % 7}",
        "amount": f"{(number * 37) % 10_000 / 100:.2f}",
        "updated_at": (EPOCH + timedelta(minutes=number)).isoformat(),
    }


class OrdersApi(ThreadingHTTPServer):
    """Orders 1..`orders`; `cursors` records the ``after`` of every request, in order (None: no cursor)."""

    daemon_threads = True

    def __init__(self, orders: int, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.orders = orders
        self.cursors: list[str | None] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> OrdersApi:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def page(self, after: str | None, limit: int) -> dict:
        last = int(after.removeprefix("o-")) if after else 0
        numbers = range(last + 1, min(last + limit, self.orders) + 1)
        return {"orders": [order(n) for n in numbers], "next_cursor": f"o-{numbers[-1] if numbers else last}"}


class _Handler(BaseHTTPRequestHandler):
    server: OrdersApi

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        after = query.get("after", [None])[0]
        if url.path != "/orders" or (after is not None and not after.startswith("o-")):
            self.send_error(404 if url.path != "/orders" else 400)
            return
        self.server.cursors.append(after)
        body = json.dumps(self.server.page(after, int(query.get("limit", ["100"])[0]))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    api = OrdersApi(args.orders, args.port)
    print(f"orders API with {args.orders} orders on {api.url}/orders", flush=True)
    api.serve_forever()
