"""ClickHouse clients: HTTP(S) to a server, or the in-process engine (chdb) for embedded use.

chdb keeps one data directory per process, so every embedded client of a process shares one
connection to it, and asking for a second path is an error rather than a silent switch. The embedded
engine lives in the driver process; Spark's executors never open it. In a warm engine (`streamling serve`)
every run shares it, so any number of pipelines read and write the embedded tables side by side.

A data directory is open in one process at a time: the process holds an exclusive lock on ``<path>.lock`` (and
says who it is in ``<path>.owner.json``) until it exits or calls `release_embedded`, so a run in another process
is told which one holds it (pid, command, run) instead of chdb's ``Error initializing EmbeddedServer: .
(BAD_ARGUMENTS)`` — at once, or after waiting up to `embedded_wait_sec` for it (a Dagster run of another pipeline
waits while a backfill's bounded phase uses the data path, then goes on).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, unquote, urlsplit

from tenacity import RetryCallState, retry_if_exception_type

from streamling.config.model import ClickHouseConnectionSettings
from streamling.core.retry import RetryPolicy, log_first_failure, on_success
from streamling.errors import StreamlingError, first_line

_EMBEDDED: dict[str, Any] = {}
_LOCK = threading.RLock()
_HELD: list[int] = []
"""The descriptors holding this process's data path locks: closed by `release_embedded`, else at exit."""
log = logging.getLogger(__name__)
LOCK_POLL_SEC = 0.5
"""The longest wait between two attempts to take an embedded data path another process holds."""


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
            client = _embedded(settings.path, settings.embedded_wait_sec)
        if settings.database != "default":
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote(settings.database)}")
        return client
    except StreamlingError:
        raise
    except Exception as exc:
        raise StreamlingError.retry(
            f"{where}: cannot connect to {describe(settings)}: {redact(first_line(exc), settings)}"
        ) from None


@contextlib.contextmanager
def transient_client(settings: ClickHouseConnectionSettings, where: str) -> Iterator[Any]:
    """A client for one look-up, closed afterwards, for a process that runs no pipelines (the Dagster code-location
    server's sensors).

    A server (`url`) is reached with `get_client`. The embedded engine is opened here rather than through this
    process's shared client: chdb lets only one process hold a data directory, and keeping it open in a long-lived
    process would lock every run it launches out of it."""
    if settings.url:
        client = get_client(settings, where)
    else:
        import clickhouse_connect

        path = Path(settings.path).resolve()
        if not path.is_dir():
            raise StreamlingError.user(f"{where}: no embedded ClickHouse data at {path}")
        try:
            client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
        except Exception as exc:
            problem = redact(first_line(exc), settings)
            raise StreamlingError.retry(f"{where}: cannot open {describe(settings)}: {problem}") from None
    try:
        yield client
    finally:
        client.close()


def _embedded(path: str, wait_sec: float = 0.0) -> Any:
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
        _hold(Path(resolved), wait_sec)
        client = clickhouse_connect.get_client(dsn=f"chdb://{resolved}")
        _EMBEDDED[resolved] = client
        return client


def release_embedded() -> bool:
    """Close this process's embedded engine and drop its data path lock, so another process can open it; True when
    one was open. For a process that is done with it while it goes on (a Dagster backfill-then-stream once its
    bounded phase ended), never for one whose runs share it (`streamling serve`): a later `get_client` opens it
    again."""
    with _LOCK:
        had = bool(_EMBEDDED)
        for client in _EMBEDDED.values():
            with contextlib.suppress(Exception):  # already closed, or chdb gone: the lock still goes
                client.close()
        _EMBEDDED.clear()
        while _HELD:
            os.close(_HELD.pop())
        return had


def _hold(path: Path, wait_sec: float = 0.0) -> None:
    """Take `path`'s lock (until exit or `release_embedded`), waiting up to `wait_sec` while another process has
    it; else raise naming that process."""
    lock, owner = path.with_name(path.name + ".lock"), path.with_name(path.name + ".owner.json")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)

    def waiting(_state: RetryCallState) -> str:
        return (
            f"the embedded ClickHouse data path {path} is open in another process ({_holder(owner)}); "
            f"waiting up to {wait_sec:.0f} s for it"
        )

    def free(state: RetryCallState) -> None:
        if state.attempt_number > 1:
            log.info(f"the embedded ClickHouse data path {path} is free after {state.seconds_since_start or 0.0:.1f} s")

    def give_up(state: RetryCallState) -> NoReturn:
        os.close(fd)
        after = f"; waited {state.seconds_since_start or 0.0:.0f} s for it" if wait_sec else ""
        raise StreamlingError.retry(
            f"the embedded ClickHouse data path {path} is open in another process ({_holder(owner)}){after}; "
            "chdb opens a data path in one process at a time: run this pipeline in that process (streamling "
            "submit to its engine), stop it, or use a ClickHouse server (clickhouse_source.url, "
            "clickhouse_sink.url)"
        ) from None

    policy = RetryPolicy(None, wait_sec, LOCK_POLL_SEC, LOCK_POLL_SEC)
    policy.retrying(
        on_success(retry_if_exception_type(BlockingIOError), free),
        before_sleep=log_first_failure(log, waiting),
        give_up=give_up,
    )(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(fd)
    from streamling.core.scope import RUN_SCOPE

    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(["streamling" if a.endswith("/streamling") else a for a in sys.argv])[:300],
        "run": RUN_SCOPE.get(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with contextlib.suppress(OSError):  # only a description
        owner.write_text(json.dumps(me))


def _holder(owner: Path) -> str:
    try:
        who = json.loads(owner.read_text())
    except (OSError, ValueError):
        return "its owner is unknown"
    run = f", run {who['run']}" if who.get("run") else ""
    return f"pid {who.get('pid')} on {who.get('host')}: {who.get('command')}{run}, since {who.get('since')}"
