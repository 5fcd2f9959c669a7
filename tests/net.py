"""Network helpers for tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on (for a server the test starts, or to be refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
