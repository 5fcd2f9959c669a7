"""Sending requests from Spark's Python workers: one event loop and one keep-alive client per process.

Spark calls a partition function synchronously, so the worker process gets one background thread that
owns an asyncio loop and an `httpx.AsyncClient`; both are created on first use and reused by every batch and
every task the (reused) worker runs. `exchange` submits a partition's requests to that loop — at most
`Endpoint.buffer_size` in flight — and hands the answers back in input order, so outputs line up with inputs.

Failures: transport errors, timeouts, 408, 429 and 5xx are retried (`streamling.core.retry`), sleeping
outside the concurrency limit so other requests go on. Any other status fails the task with
``<what> POST <url>: non-retriable HTTP <status> - <body excerpt>``; exhausted retries fail it with a
retriable-class error naming the node and the URL. With `Endpoint.skip_on_error` (webhooks) both are logged
and the request is skipped instead. Secrets never reach a message: URLs are shown redacted and secret values
are scrubbed from anything a server sends back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import pyarrow as pa
from tenacity import RetryCallState, retry_if_exception_type

from streamling.core.redaction import REDACTED, redact_url
from streamling.core.retry import RetryPolicy, failure, is_retriable, retry_after, wait_retry_after
from streamling.errors import StreamlingError
from streamling.http.payloads import Outgoing, PayloadFormat, excerpt
from streamling.telemetry.tasks import OFF, NodeRecorder

if TYPE_CHECKING:  # imported where a request is made: `import httpx` also loads its command line and rich
    import httpx  # (~90 ms), which a driver whose pipeline has no HTTP node has no use for

log = logging.getLogger("streamling.http")
IN_FLIGHT_PER_SLOT = 4
"""Requests submitted ahead per concurrency slot, so the slots stay busy while answers are consumed in order."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how a node sends its requests; built on the driver, pickled to the executors. Its repr
    shows no header values (the secret is one of them)."""

    label: str
    """The node, as errors name it: ``handler transform 'enrich'``."""
    what: str
    """How a failed request is introduced: ``HTTP handler`` or ``webhook``."""
    url: str = field(repr=False)
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)
    timeout_sec: float
    buffer_size: int
    retry: RetryPolicy
    skip_on_error: bool = False
    operator_timeout_sec: float | None = None
    """The most one task may spend on a partition's requests, from its first request to its last answer."""
    recorder: NodeRecorder = OFF
    """Where each attempt's request/response time and each retry are reported."""

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    def scrub(self, text: str) -> str:
        """`text` with the raw URL and every secret value replaced."""
        if self.url in text:
            text = text.replace(self.url, self.shown_url)
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text


@dataclass(frozen=True)
class Delivered:
    body: bytes


@dataclass(frozen=True)
class Skipped:
    reason: str


class _Session:
    """The process's loop thread and client."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="streamling-http", daemon=True)
        self.thread.start()
        self.client: httpx.AsyncClient = asyncio.run_coroutine_threadsafe(self._client(), self.loop).result()

    @staticmethod
    async def _client() -> httpx.AsyncClient:
        import httpx

        # Concurrency is bounded per task by a semaphore, so the pool itself is not; idle connections stay
        # open for the next batch.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30.0)
        return httpx.AsyncClient(limits=limits, follow_redirects=False)

    def submit(self, endpoint: Endpoint, body: bytes, limiter: asyncio.Semaphore) -> Future[Delivered | Skipped]:
        return asyncio.run_coroutine_threadsafe(_post(self.client, endpoint, body, limiter), self.loop)


_SESSION: _Session | None = None
_SESSION_LOCK = threading.Lock()


def session() -> _Session:
    """This process's session, created on first use (again in a forked child: threads do not survive fork)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None or _SESSION.pid != os.getpid():
            _SESSION = _Session()
        return _SESSION


class _Retriable(Exception):
    """An attempt that failed in a way worth another: `failure` says how; `retry_after_sec` is the server's
    ``Retry-After``, which replaces the backoff (`core.retry.wait_retry_after`)."""

    def __init__(self, failure: str, retry_after_sec: float | None = None) -> None:
        super().__init__(failure)
        self.failure = failure
        self.retry_after_sec = retry_after_sec


async def _post(
    client: httpx.AsyncClient, endpoint: Endpoint, body: bytes, limiter: asyncio.Semaphore
) -> Delivered | Skipped:
    import httpx

    policy = endpoint.retry
    headers = dict(endpoint.headers)

    async def attempt() -> Delivered | Skipped:
        async with limiter:
            sent = time.monotonic()
            try:
                async with asyncio.timeout(endpoint.timeout_sec):
                    response = await client.post(endpoint.url, content=body, headers=headers)
            except (httpx.TransportError, TimeoutError) as exc:
                endpoint.recorder.latency((time.monotonic() - sent) * 1000)
                raise _Retriable(_transport_failure(exc, endpoint)) from None
            endpoint.recorder.latency((time.monotonic() - sent) * 1000)
        status = response.status_code
        if 200 <= status < 300:
            return Delivered(response.content)
        text = excerpt(response.content, scrub=endpoint.scrub)
        if not is_retriable(status):
            message = f"{endpoint.what} POST {endpoint.shown_url}: non-retriable HTTP {status} - {text}"
            return _failed(endpoint, StreamlingError.user(message))
        raise _Retriable(f"HTTP {status} - {text}", retry_after(response.headers.get("retry-after")))

    def retrying(state: RetryCallState) -> None:
        reason = cast(_Retriable, failure(state)).failure
        log.debug(
            "%s: POST %s failed (%s); retrying in %.2fs",
            endpoint.label,
            endpoint.shown_url,
            reason,
            state.upcoming_sleep,
        )
        endpoint.recorder.count("retries")

    def give_up(state: RetryCallState) -> Skipped:
        attempts = state.attempt_number
        message = (
            f"{endpoint.label}: {endpoint.what} POST {endpoint.shown_url}: retries exhausted after {attempts} "
            f"attempt{'s' if attempts > 1 else ''} in {state.seconds_since_start or 0.0:.1f}s; last failure: "
            f"{cast(_Retriable, failure(state)).failure}"
        )
        return _failed(endpoint, StreamlingError.retry(message))

    started = time.monotonic()
    try:  # most requests succeed at once: tenacity's loop (~20 µs a request) only once one has failed
        return await attempt()
    except _Retriable as failed:
        first: _Retriable | None = failed

    async def again() -> Delivered | Skipped:
        """The loop's first attempt is the one made above: its failure, raised again; then new attempts."""
        nonlocal first
        if first is not None:
            failed, first = first, None
            raise failed
        return await attempt()

    post = policy.async_retrying(
        retry_if_exception_type(_Retriable),
        wait=wait_retry_after(policy.wait()),
        before_sleep=retrying,
        give_up=give_up,
        started=started,
    )
    return await post(again)


def _transport_failure(exc: BaseException, endpoint: Endpoint) -> str:
    import httpx

    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"timed out after {endpoint.timeout_sec:g}s ({type(exc).__name__})"
    detail = " ".join(str(exc).split())
    return endpoint.scrub(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


def _failed(endpoint: Endpoint, error: StreamlingError) -> Skipped:
    if endpoint.skip_on_error:
        return Skipped(error.message)
    raise error


def exchange(
    batches: Iterator[pa.RecordBatch], endpoint: Endpoint, payload: PayloadFormat
) -> Iterator[tuple[Outgoing, Delivered | Skipped]]:
    """Send every row of a partition; yield each request with its answer, in input order. A failure that is
    not skipped raises here, and the requests still pending are cancelled."""
    http = session()
    limiter = asyncio.Semaphore(endpoint.buffer_size)
    window: deque[tuple[Outgoing, Future[Delivered | Skipped]]] = deque()
    ahead = endpoint.buffer_size * IN_FLIGHT_PER_SLOT
    deadline: list[float] = []  # set at the first request

    def answer(future: Future[Delivered | Skipped]) -> Delivered | Skipped:
        if endpoint.operator_timeout_sec is None:
            return future.result()
        try:
            return future.result(timeout=max(0.0, deadline[0] - time.monotonic()))
        except FutureTimeout:
            future.cancel()
            raise StreamlingError.retry(
                f"{endpoint.label}: the requests of one Spark task took longer than "
                f"external_http_handler.operator_timeout_sec ({endpoint.operator_timeout_sec:g}s); "
                f"{len(window) + 1} were still unanswered ({endpoint.what} POST {endpoint.shown_url})"
            ) from None

    try:
        for outgoing in payload.requests(batches):
            if not deadline and endpoint.operator_timeout_sec is not None:
                deadline.append(time.monotonic() + endpoint.operator_timeout_sec)
            window.append((outgoing, http.submit(endpoint, outgoing.body, limiter)))
            while len(window) > ahead:
                first, future = window.popleft()
                yield first, answer(future)
        while window:
            first, future = window.popleft()
            yield first, answer(future)
    finally:
        for _, future in window:
            future.cancel()


def log_skipped(endpoint: Endpoint, outgoing: Outgoing, skipped: Skipped) -> None:
    log.warning("%s: skipped a request of %d rows: %s", endpoint.label, outgoing.rows, skipped.reason)
