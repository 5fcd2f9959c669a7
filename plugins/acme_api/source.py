"""orders_source: pages of a partner's orders API, read by the driver after the committed cursor."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
from pydantic import PositiveFloat, PositiveInt

from streamling.plugin import ExternalObject, Options, PolledSource

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)


class OrdersOptions(Options):
    url: str
    """The API's base URL; the source asks ``GET <url>/orders?after=<cursor>&limit=<page_size>``."""
    page_size: PositiveInt = 100
    timeout_sec: PositiveFloat = 10.0


class OrdersSource(PolledSource[OrdersOptions]):
    """Each page is one epoch. Its ``next_cursor`` is the position the runtime commits to the state backend once
    every sink flushed the page, so a restarted run, even after a SIGKILL, asks for the page after the last
    committed one, and a page that was not committed is asked for again."""

    options_model = OrdersOptions
    poll_interval_sec = 0.5  # how long to wait after an empty page

    def open(self) -> None:
        self.client = httpx.Client(base_url=self.options.url, timeout=self.options.timeout_sec)

    def close(self) -> None:
        if hasattr(self, "client"):
            self.client.close()

    def output_schema(self) -> pa.Schema:
        return SCHEMA

    def poll(self, after: str | None) -> tuple[pa.Table, str] | None:
        params: dict[str, Any] = {"limit": self.options.page_size}
        if after is not None:
            params["after"] = after
        response = self.client.get("/orders", params=params)
        response.raise_for_status()  # an HTTP error fails the epoch; nothing is committed
        page = response.json()
        if not page["orders"]:
            return None
        rows = [
            {
                "id": order["id"],
                "customer": order["customer"],
                "amount": Decimal(order["amount"]),
                "updated_at": datetime.fromisoformat(order["updated_at"]),
            }
            for order in page["orders"]
        ]
        return pa.Table.from_pylist(rows, schema=SCHEMA), page["next_cursor"]

    def labels(self) -> dict[str, str]:
        return {"endpoint": self.options.url}

    def reads(self) -> list[ExternalObject]:
        return [ExternalObject("http", (urlsplit(self.options.url).netloc, "orders"))]
