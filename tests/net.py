"""Network helpers for tests."""

from __future__ import annotations

import socket

ADMIN_TOKEN = "test-admin-token-0123456789"
"""The admin API token tests configure (``admin_api_token``), so they can call the admin API."""
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def free_port() -> int:
    """A loopback port nothing listens on (for a server the test starts, or to be refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_guarded(base: str, token: str, what: str, probe: str = "/health", data: str = "/runs") -> None:
    """Every refusal of `core/guard.py` against a live server at `base` (its `data` path shows data), and what it
    lets through: the probes without a token, the token as a bearer header, and once as ``?token=`` for a cookie."""
    from urllib.parse import urlsplit

    import httpx

    port = urlsplit(base).port
    good = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=10, follow_redirects=False) as client:
        assert client.get(probe).status_code in (200, 503)  # a probe answers without a token
        refused = client.get(data)
        assert refused.status_code == 401
        assert refused.json() == {"error": f"{what}: a token is required (Authorization: Bearer <token>)"}
        assert refused.headers["www-authenticate"] == 'Bearer realm="streamling"'
        wrong = client.get(data, headers={"Authorization": "Bearer not-the-token"})
        assert (wrong.status_code, wrong.json()) == (401, {"error": f"{what}: the token is not valid"})
        assert client.get(data, headers={"Authorization": token}).status_code == 401  # no scheme: no token
        # DNS rebinding: a name of the attacker's that resolves to 127.0.0.1 reaches the port, not the API
        rebound = client.get(data, headers={**good, "Host": f"evil.example:{port}"})
        assert (rebound.status_code, rebound.json()) == (
            421,
            {"error": f"{what} does not answer to Host 'evil.example:{port}'"},
        )
        # a web page of another origin, even with the token, and a simple text/plain POST (no CORS preflight)
        foreign = {"error": f"{what} refuses cross-origin requests"}
        page = client.get(data, headers={**good, "Origin": "http://evil.example"})
        assert (page.status_code, page.json()) == (403, foreign)
        post = client.post(data, headers={"Origin": "http://evil.example", "Content-Type": "text/plain"}, content="{}")
        assert (post.status_code, post.json()) == (403, foreign)
        fetch = client.get(data, headers={**good, "Sec-Fetch-Site": "cross-site"})
        assert (fetch.status_code, fetch.json()) == (403, foreign)
        assert client.get(data, headers={**good, "Origin": f"http://127.0.0.1:{port}"}).status_code == 200
        assert client.get(data, headers={**good, "Host": f"localhost:{port}"}).status_code == 200
        assert client.get(data, headers=good).status_code == 200
        opened = client.get(f"{data}?token={token}")  # a browser's first visit: a cookie, and the token leaves the URL
        assert opened.status_code == 303 and opened.headers["location"] == data
        assert "HttpOnly" in opened.headers["set-cookie"] and "SameSite=Strict" in opened.headers["set-cookie"]
        assert client.get(data).status_code == 200  # the client keeps the cookie, as a browser does
        client.cookies.clear()
        assert client.get(f"{data}?token=wrong").status_code == 401
