"""Connecting to Postgres and deciding which failures are worth retrying.

Transient: the connection is gone or the server cannot take writes right now (restart, failover,
``default_transaction_read_only``, serialization conflicts). Everything else — an undefined column,
a numeric overflow, a value too long — is the data's or the schema's fault and fails at once, since
retrying would never succeed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from streamling.config.model import PostgresConnectionSettings
from streamling.errors import StreamlingError

log = logging.getLogger("streamling.postgres")
T = TypeVar("T")

TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57P", "58")
"""connection exceptions, insufficient resources, operator intervention (shutdown), system errors."""
TRANSIENT_SQLSTATES = {
    "25006",  # read_only_sql_transaction: the database was switched to read-only
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available
}
MAX_BACKOFF_SEC = 10.0


def reason(exc: BaseException) -> str:
    """The server's message without connection strings (which could carry a password)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag else None
    if primary:
        detail = getattr(diag, "message_detail", None)
        context = getattr(diag, "context", None)
        text = primary.strip()
        if detail:
            text += f" ({detail.strip()})"
        if context and "COPY" in context:
            text += f" [{context.strip().splitlines()[0]}]"
        return text
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not getattr(exc, "sqlstate", None):
        return True  # no SQLSTATE: the connection itself failed
    state = getattr(exc, "sqlstate", None) or ""
    return state in TRANSIENT_SQLSTATES or state.startswith(TRANSIENT_SQLSTATE_CLASSES)


def connect(settings: PostgresConnectionSettings, where: str, *, autocommit: bool = False) -> psycopg.Connection:
    try:
        return psycopg.connect(**settings.conninfo(), autocommit=autocommit)
    except psycopg.Error as exc:
        raise StreamlingError.retry(f"{where}: cannot connect: {reason(exc)}") from None


_CACHED: dict[tuple[str, bool], psycopg.Connection] = {}
_CACHED_LOCK = threading.Lock()


def _cache_key(settings: PostgresConnectionSettings, autocommit: bool) -> tuple[str, bool]:
    return settings.model_dump_json() + settings.password.get_secret_value(), autocommit


def cached_connection(
    settings: PostgresConnectionSettings, where: str, *, autocommit: bool = False
) -> psycopg.Connection:
    """One connection per process, destination and commit mode, reused across epochs: Spark's Python workers
    outlive a task, so executors keep theirs. Sessions run in UTC (timestamps are rendered and parsed as such)."""
    key = _cache_key(settings, autocommit)
    with _CACHED_LOCK:
        conn = _CACHED.get(key)
        if conn is None or conn.closed or conn.broken:
            conn = connect(settings, where, autocommit=autocommit)
            conn.execute("SET TIME ZONE 'UTC'")
            if not autocommit:
                conn.commit()
            _CACHED[key] = conn
        return conn


def drop_cached_connection(settings: PostgresConnectionSettings, *, autocommit: bool = False) -> None:
    """Forget (and close) a cached connection after a failure, so the next attempt connects afresh."""
    with _CACHED_LOCK:
        conn = _CACHED.pop(_cache_key(settings, autocommit), None)
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass


def with_retries(
    attempt: Callable[[], T], where: str, timeout_sec: float, on_retry: Callable[[], None] | None = None
) -> T:
    """Run `attempt` until it succeeds, retrying transient failures with jittered exponential backoff
    for up to `timeout_sec`; other failures raise at once as user-facing errors naming `where`."""
    deadline = time.monotonic() + timeout_sec
    delay = 0.2
    failures = 0
    while True:
        try:
            return attempt()
        except StreamlingError as exc:
            if not exc.retriable:
                raise
            problem: BaseException = exc
        except psycopg.Error as exc:
            if not is_transient(exc):
                raise StreamlingError.user(f"{where}: {reason(exc)}") from None
            problem = exc
        failures += 1
        text = problem.message.removeprefix(f"{where}: ") if isinstance(problem, StreamlingError) else reason(problem)
        if time.monotonic() + delay > deadline:
            raise StreamlingError.retry(f"{where}: still failing after {failures} attempts: {text}") from None
        log.warning("%s: %s; retrying in %.1fs (attempt %d)", where, text, delay, failures)
        if on_retry is not None:
            on_retry()
        time.sleep(delay * (0.75 + random.random() / 2))
        delay = min(delay * 2, MAX_BACKOFF_SEC)
