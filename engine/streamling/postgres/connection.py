"""Connecting to Postgres through per-process pools, and deciding which failures are worth retrying.

Every use of Postgres — a sink's write of one stream and epoch, a dynamic-table lookup, a dead-letter insert,
DDL on start, the state backend's commit — checks a connection out of a pool for one attempt (`connection`), so
no connection is ever shared by two threads: the committer threads of several sources write at the same time,
each in its own transaction. There is one pool per process and destination (connection settings and commit
mode), created on first use; Spark's Python workers are forked processes, so the process id is part of the key
and a pool never crosses a fork. A checked-out connection is verified first (a lost one is replaced), sessions run
in UTC, and waiting longer than ``pool_acquire_timeout_secs`` for one is a transient failure like a lost
connection.

Transient: the connection is gone or the server cannot take writes right now (restart, failover,
``default_transaction_read_only``, serialization conflicts), or no connection could be had in time. Everything
else — an undefined column, a numeric overflow, a value too long — is the data's or the schema's fault and
fails at once, since retrying would never succeed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from tenacity import RetryCallState, retry_if_exception

from streamling.config.model import PostgresConnectionSettings
from streamling.core.held import HELD
from streamling.core.retry import RetryPolicy, failure, log_first_failure, on_success
from streamling.errors import LeaseLostError, StreamlingError

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
BACKOFF_SEC = 0.2
MAX_BACKOFF_SEC = 10.0
POOL_MAX_SIZE = 16
"""Connections one process may hold per destination: the driver's committer threads (one per source) and the
threads that start queries or fill dynamic tables; a pool grows only as far as they use it at once."""
POOL_WORKERS = 2
"""Background threads per pool that open and replace connections."""


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


REFUSED_LOGIN = re.compile(
    r"password authentication failed|no pg_hba\.conf entry|role \".*\" does not exist|database \".*\" does not exist"
    r"|server does not support SSL|SSL is not enabled on the server|certificate verify failed"
)
"""The server (or TLS) turned the login itself down: wrong password or user, no such database, an SSL mode the server
does not offer. libpq reports these without a SQLSTATE, like a lost connection, but retrying never helps."""


def refused_login(text: str) -> bool:
    return REFUSED_LOGIN.search(text) is not None


SESSION_SPOILING_SQLSTATES = ("25006", "57P", "08")
"""A session opened while the database was read-only keeps `default_transaction_read_only` for its life (25006);
an administrator's shutdown or `pg_terminate_backend` (57P01-57P03) and a connection failure (08) leave nothing
worth keeping. Such a connection is closed rather than returned, so a retry gets a fresh session."""


def spoils_session(exc: BaseException) -> bool:
    """Whether the connection that raised `exc` must be discarded instead of reused."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = getattr(exc, "sqlstate", None) or ""
    if not state:
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    return state.startswith(SESSION_SPOILING_SQLSTATES)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.Error) and refused_login(str(exc)):
        return False
    if isinstance(exc, PoolTimeout):
        return True  # every connection busy, or none could be opened: wait and try again
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not getattr(exc, "sqlstate", None):
        return True  # no SQLSTATE: the connection itself failed
    state = getattr(exc, "sqlstate", None) or ""
    return state in TRANSIENT_SQLSTATES or state.startswith(TRANSIENT_SQLSTATE_CLASSES)


class _Pool(ConnectionPool):
    """A pool that remembers why its last attempt to connect failed, so that a timeout can say why."""

    last_connect_error: str | None = None


def _pool_key(settings: PostgresConnectionSettings, autocommit: bool) -> tuple[Any, ...]:
    """What a pool's connections depend on (the password included: another password is another pool)."""
    return (
        os.getpid(),
        tuple(sorted(settings.conninfo().items())),
        settings.statement_timeout_secs,
        settings.pool_acquire_timeout_secs,
        settings.pool_idle_timeout_secs,
        settings.pool_max_lifetime_secs,
        settings.max_connections,
        settings.retry_timeout_sec,
        autocommit,
    )


def pool(settings: PostgresConnectionSettings, *, autocommit: bool = True, where: str = "postgres") -> _Pool:
    """This process's pool for `settings` and commit mode, opened on first use (it connects only on demand).

    Before a pool is made, one connection is tried directly, so that a login the server turns down fails at once,
    naming `where`, rather than after the pool's acquire timeout (the pool connects in background threads). Closed
    once no run uses it (`core/held.py`)."""

    def open_() -> _Pool:
        _probe(settings, where)
        return _open_pool(settings, autocommit)

    return HELD.get("postgres pool", _pool_key(settings, autocommit), open_, lambda found: found.close())


def _probe(settings: PostgresConnectionSettings, where: str) -> None:
    try:
        psycopg.connect(**settings.conninfo()).close()
    except psycopg.Error as exc:
        if refused_login(str(exc)):
            raise StreamlingError.user(f"{where}: cannot connect: {reason(exc)}") from None
        raise StreamlingError.retry(f"{where}: cannot connect: {reason(exc)}") from None


def _open_pool(settings: PostgresConnectionSettings, autocommit: bool) -> _Pool:
    holder: list[_Pool] = []

    class Recording(psycopg.Connection):  # type: ignore[type-arg]
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Recording:  # type: ignore[override]
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.Error as exc:
                holder[0].last_connect_error = reason(exc)
                raise
            holder[0].last_connect_error = None
            return conn  # type: ignore[return-value]

    def configure(conn: psycopg.Connection) -> None:
        # Timestamps are rendered and parsed as UTC.
        conn.execute("SET TIME ZONE 'UTC'")
        if not conn.autocommit:
            conn.commit()

    kwargs: dict[str, Any] = {**settings.conninfo(), "autocommit": autocommit}
    if settings.statement_timeout_secs:
        kwargs["options"] = f"-c statement_timeout={round(settings.statement_timeout_secs * 1000)}"
    created = _Pool(
        kwargs=kwargs,
        connection_class=Recording,
        min_size=0,
        max_size=settings.max_connections or POOL_MAX_SIZE,
        open=True,
        configure=configure,
        check=ConnectionPool.check_connection,
        name=f"streamling-{settings.host}:{settings.port}/{settings.database}{'' if autocommit else '-tx'}",
        timeout=settings.pool_acquire_timeout_secs,
        # A background attempt to connect backs off (1 s, 2 s, 4 s, …) and gives up when the client that started
        # it stops waiting; that client's retry starts a fresh one, so a server back up is reached within seconds.
        reconnect_timeout=settings.pool_acquire_timeout_secs,
        # The original's pool_idle_timeout_secs / pool_max_lifetime_secs: idle sessions are given back to the
        # server, and old ones replaced so that a failover or a rebalanced server is reached in time.
        max_idle=settings.pool_idle_timeout_secs,
        max_lifetime=settings.pool_max_lifetime_secs,
        num_workers=POOL_WORKERS,
    )
    holder.append(created)
    return created


@contextmanager
def connection(
    settings: PostgresConnectionSettings, where: str, *, autocommit: bool = True
) -> Iterator[psycopg.Connection]:
    """A connection of this process's pool, for this thread alone until the block ends; then it goes back
    (rolled back if a transaction was left open, replaced if it broke or its session is spoiled: `spoils_session`),
    as with ``pool.connection()``. Not getting
    one within ``pool_acquire_timeout_secs`` (at most ``retry_timeout_sec``) raises a retriable error naming
    `where`."""
    source = pool(settings, autocommit=autocommit, where=where)
    timeout = min(settings.pool_acquire_timeout_secs, settings.retry_timeout_sec)
    try:
        conn = source.getconn(timeout=timeout)
    except PoolTimeout:
        last = source.last_connect_error
        if last and refused_login(last):
            raise StreamlingError.user(f"{where}: cannot connect: {last}") from None
        why = f"cannot connect: {last}" if last else f"no free connection within {timeout:g}s"
        raise StreamlingError.retry(f"{where}: {why}") from None
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        if spoils_session(exc):
            conn.close()  # the pool replaces a closed connection instead of handing it out again
        raise
    finally:
        source.putconn(conn)


def transact(settings: PostgresConnectionSettings, where: str, work: Callable[[psycopg.Cursor], T]) -> T:
    """`work(cursor)` in one transaction on a pooled connection; transient failures (the transaction rolled
    back, or its outcome unknown) run it again on another connection for up to ``retry_timeout_sec``, so
    `work` must be idempotent."""

    def attempt() -> T:
        with connection(settings, where) as conn, conn.transaction(), conn.cursor() as cur:
            return work(cur)

    return with_retries(attempt, where, settings.retry_timeout_sec)


def with_retries(
    attempt: Callable[[], T], where: str, timeout_sec: float, on_retry: Callable[[], None] | None = None
) -> T:
    """Run `attempt` until it succeeds, retrying transient failures with jittered exponential backoff
    for up to `timeout_sec`; other Postgres errors raise at once as user-facing errors naming `where`, anything
    else as it is. `on_retry` is
    told of each retry (a node's retry count). An outage is one WARNING when it starts and one when it ends;
    the attempts between are logged at debug level."""

    def once() -> T:
        try:
            return attempt()
        except psycopg.Error as exc:
            if not is_transient(exc):
                raise StreamlingError.user(f"{where}: {reason(exc)}") from None
            raise

    def text(state: RetryCallState) -> str:
        problem = failure(state)
        return problem.message.removeprefix(f"{where}: ") if isinstance(problem, StreamlingError) else reason(problem)

    def give_up(state: RetryCallState) -> NoReturn:
        raise StreamlingError.retry(f"{where}: still failing after {state.attempt_number} attempts: {text(state)}")

    def recovered(state: RetryCallState) -> None:
        if state.attempt_number > 1:
            log.warning(
                "%s: recovered after %d failed attempts in %.1fs",
                where,
                state.attempt_number - 1,
                state.seconds_since_start or 0.0,
            )

    policy = RetryPolicy(None, timeout_sec, BACKOFF_SEC, MAX_BACKOFF_SEC)
    retrying = policy.retrying(
        on_success(retry_if_exception(_retried), recovered),
        before_sleep=log_first_failure(
            log,
            lambda state: f"{where}: {text(state)}; retrying for up to {timeout_sec:g}s",
            lambda state: (
                f"{where}: {text(state)}; retrying in {state.upcoming_sleep:.1f}s (attempt {state.attempt_number})"
            ),
            (lambda _state: on_retry()) if on_retry is not None else None,
        ),
        give_up=give_up,
    )
    return retrying(once)


def _retried(exc: BaseException) -> bool:
    """Worth another attempt: a retriable error, or a transient Postgres one (`with_retries` turned the others into
    user errors); never a lost lease, which no retry can win back."""
    if isinstance(exc, LeaseLostError):
        return False
    if isinstance(exc, StreamlingError):
        return exc.retriable
    return isinstance(exc, psycopg.Error)
