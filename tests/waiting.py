"""Polling for a condition instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout: float = 60.0,
    what: str = "condition",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """The first truthy answer of `condition()`, asked every 0.1 s; after `timeout` seconds an AssertionError naming
    `what`. An exception of an `ignore` type (a server not listening yet) counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except ignore:
            result = None  # type: ignore[assignment]
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
