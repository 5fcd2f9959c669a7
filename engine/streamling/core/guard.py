"""Who may use an HTTP API of the engine: the warm engine's (`streamling serve`), which starts runs with chosen
settings (``plugin.path`` imports code), and a run's admin API, which shows its rows.

Three rules, for every path but the probes (``/health``, ``/ready``: no data, and Kubernetes calls them by IP):

- **A token.** ``Authorization: Bearer <token>``; a browser opening the admin page passes it once as ``?token=…``
  and keeps it in a cookie for that origin (HttpOnly, SameSite=Strict). The token is a setting, or generated at the
  first start into a file only its owner may read (`token_for`), where `streamling submit`, `streamling inspect`
  and the Dagster resource on the same host find it (`read_token`).
- **A Host header naming this server**: the address it listens on (and ``localhost`` on loopback, this machine's
  names on a wildcard address) or a configured name. A web page cannot then reach the API through a DNS name of
  its own that resolves to 127.0.0.1 (DNS rebinding).
- **No cross-origin browser request**: a request whose ``Origin`` is not the server's own, or that a browser marks
  ``Sec-Fetch-Site: cross-site``/``same-site``, is refused, whatever it carries. A ``text/plain`` POST needs no CORS
  preflight, so the token alone would be the only lock on it.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

log = logging.getLogger("streamling.serve")

PROBES = frozenset({"/health", "/ready"})
COOKIE = "streamling_token"
HOME_ENV = "STREAMLING_HOME"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def home() -> Path:
    """Where the engine keeps its tokens: ``$STREAMLING_HOME``, else ``~/.streamling``."""
    return Path(os.environ.get(HOME_ENV) or "~/.streamling").expanduser()


def token_path(kind: str, port: int, configured: str | None = None) -> Path:
    """The token file of the `kind` API (``engine``, ``admin``) listening on `port`."""
    return Path(configured).expanduser() if configured else home() / f"{kind}-{port}.token"


def token_for(
    kind: str, port: int, configured_token: str | None, configured_file: str | None
) -> tuple[str, Path | None]:
    """The server's token: the configured one, else the one in its file, created (owner-only) when missing.
    Returns the token and the file it lives in (None when configured directly)."""
    if configured_token:
        return configured_token, None
    path = token_path(kind, port, configured_file)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, 0o600)
            log.warning("%s could be read by others (mode %o); it is now readable by its owner only", path, mode)
        token = path.read_text().strip()
        if token:
            return token, path
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token, path


def read_token(kind: str, url: str, configured_token: str | None, configured_file: str | None = None) -> str | None:
    """A client's token for the server at `url`: the configured one, else what the server's token file on this host
    holds (a server on another host is reached with a configured token)."""
    if configured_token:
        return configured_token
    port = urlsplit(url).port
    if port is None:
        return None
    try:
        return token_path(kind, port, configured_file).read_text().strip() or None
    except OSError:
        return None


def host_names(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """Every ``Host`` header value the server answers to: its names with and without the port."""
    names = set()
    wildcard = host in ("", "0.0.0.0", "::")
    if wildcard or _loopback(host):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    if wildcard:
        hostname = socket.gethostname()
        names |= {hostname, socket.getfqdn()}
        try:
            names |= set(socket.gethostbyname_ex(hostname)[2])
        except OSError:
            pass
    elif host:
        names.add(f"[{host}]" if ":" in host else host)
    names |= {name.strip().lower() for name in extra if name.strip()}
    out = set()
    for name in names:
        name = name.lower()
        if name.rsplit(":", 1)[-1].isdigit() and not name.endswith("]"):
            out.add(name)  # configured with its port
            continue
        out |= {name, f"{name}:{port}"}
    return frozenset(out)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Guard:
    """ASGI middleware enforcing the three rules in front of `app`."""

    def __init__(self, app: ASGIApp, token: str, hosts: frozenset[str], what: str, probes: frozenset[str] = PROBES):
        self.app = app
        self.token = token
        self.hosts = hosts
        self.origins = frozenset(f"{scheme}://{h}" for h in hosts for scheme in ("http", "https"))
        self.what = what
        self.probes = probes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.probes:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "").strip().lower()
        if host not in self.hosts:
            await _refuse(send, 421, f"{self.what} does not answer to Host '{_shown(host)}'")
            return
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site", "")
        if (origin is not None and origin.lower() not in self.origins) or site in ("cross-site", "same-site"):
            await _refuse(send, 403, f"{self.what} refuses cross-origin requests")
            return
        given = _bearer(headers.get("authorization", "")) or _cookie(headers.get("cookie", ""))
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if given is None and "token" in query and scope["method"] == "GET":
            if not self._valid(query["token"]):
                await _refuse(send, 401, f"{self.what}: the token is not valid")
                return
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            await _redirect_with_cookie(send, scope["path"] + (f"?{rest}" if rest else ""), query["token"])
            return
        if given is None:
            await _refuse(send, 401, f"{self.what}: a token is required (Authorization: Bearer <token>)")
            return
        if not self._valid(given):
            await _refuse(send, 401, f"{self.what}: the token is not valid")
            return
        await self.app(scope, receive, send)

    def _valid(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _cookie(value: str) -> str | None:
    for part in value.split(";"):
        name, _, token = part.strip().partition("=")
        if name == COOKIE and token:
            return token
    return None


def _shown(host: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in host)[:100]


async def _refuse(send: Send, status: int, message: str) -> None:
    import json

    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="streamling"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect_with_cookie(send: Send, location: str, token: str) -> None:
    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    headers = [(b"location", location.encode()), (b"set-cookie", cookie.encode()), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
