"""ClickHouse clients: HTTP(S) to a server, or the in-process engine (chdb) for embedded use.

chdb keeps one data directory per process, so every embedded client of a process shares one
connection to it, and asking for a second path is an error rather than a silent switch. The embedded
engine lives in the driver process; Spark's executors never open it.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from streamling.config.model import ClickHouseConnectionSettings
from streamling.errors import StreamlingError, first_line

_EMBEDDED: dict[str, Any] = {}
_LOCK = threading.RLock()


def quote(identifier: str) -> str:
    """A ClickHouse identifier in backquotes."""
    return "`" + identifier.replace("\\", "\\\\").replace("`", "\\`") + "`"


def qualified(database: str, table: str) -> str:
    return f"{quote(database)}.{quote(table)}"


def describe(settings: ClickHouseConnectionSettings) -> str:
    """Where a client points, without credentials: the url without user, password and query."""
    if settings.url:
        parts = urlsplit(settings.url)
        if not parts.netloc:  # not scheme://host: keep it, minus anything before an @
            return settings.url.rsplit("@", 1)[-1].split("?", 1)[0]
        return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
    return f"embedded ClickHouse at {settings.path}"


def redact(text: str, settings: ClickHouseConnectionSettings) -> str:
    """`text` (a driver's message) without the password setting, nor credentials or a password inside the url."""
    secrets = [settings.password.get_secret_value()]
    if settings.url:
        parts = urlsplit(settings.url)
        secrets += [parts.password or "", unquote(parts.password or "")]
        secrets += [v for k, v in parse_qsl(parts.query) if "pass" in k.lower()]
    text = re.sub(r"//[^/@\s]+@", "//", text)
    for secret in filter(None, secrets):
        text = text.replace(secret, "***")
    return text


def get_client(settings: ClickHouseConnectionSettings, where: str, *, compress: str | bool = False) -> Any:
    """A client for `settings`; the configured database exists afterwards."""
    import clickhouse_connect

    try:
        if settings.url:
            client = clickhouse_connect.get_client(
                dsn=settings.url,
                username=settings.user,
                password=settings.password.get_secret_value(),
                database=settings.database,
                connect_timeout=settings.connect_timeout_sec,
                compress=compress,
            )
        else:
            client = _embedded(settings.path)
        if settings.database != "default":
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote(settings.database)}")
        return client
    except StreamlingError:
        raise
    except Exception as exc:
        raise StreamlingError.retry(
            f"{where}: cannot connect to {describe(settings)}: {redact(first_line(exc), settings)}"
        ) from None


def _embedded(path: str) -> Any:
    import clickhouse_connect

    resolved = str(Path(path).resolve())
    with _LOCK:
        if resolved in _EMBEDDED:
            return _EMBEDDED[resolved]
        if _EMBEDDED:
            (other,) = _EMBEDDED
            raise StreamlingError.user(
                f"the embedded ClickHouse engine is already open at {other}; chdb allows one data path per "
                f"process, so '{path}' cannot be used as well (point clickhouse_source.path and "
                "clickhouse_sink.path at the same directory, or use a server url)"
            )
        Path(resolved).mkdir(parents=True, exist_ok=True)
        client = clickhouse_connect.get_client(dsn=f"chdb://{resolved}")
        _EMBEDDED[resolved] = client
        return client
