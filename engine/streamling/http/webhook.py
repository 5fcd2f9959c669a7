"""The webhook sink (``type: webhook``): POSTs each epoch's rows to a URL and ignores the answers.

Requests go out from the executors (``mapInArrow`` per partition, the worker's shared client, at most
`external_http_handler.buffer_size` in flight per task), all inside `stage`: the epoch's position is
committed only after every request succeeded or, with ``skip_on_error``, was given up and skipped. Request
options, payloads and retries are the handler's (`streamling.http`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pyarrow as pa
from pydantic import PositiveInt

from streamling.config.units import Milliseconds
from streamling.http.client import Endpoint, Skipped, exchange, log_skipped
from streamling.http.options import HttpRequestOptions
from streamling.http.payloads import PayloadFormat
from streamling.plugin import Epoch, RunContext, Sink, Written, rows_of
from streamling.spec import SinkSpec
from streamling.telemetry.tasks import NodeRecorder
from streamling.types import spread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("streamling.http")
COUNTS = (
    "inserts long, updates long, deletes long, skipped_rows long, skipped_requests long, requests long, "
    "first_skip string"
)


class WebhookSinkSpec(SinkSpec, HttpRequestOptions):
    type: Literal["webhook"]
    identity_labels: ClassVar[tuple[str, ...]] = ("url",)
    identity_tags = HttpRequestOptions.identity_tags  # before NodeSpec's: the URL redacted
    skip_on_error: bool = False
    """Log and skip a request that failed for good (a non-retriable status, or retries exhausted) instead of
    failing the pipeline."""
    parallelism: PositiveInt | None = None
    """Spark tasks sending the requests per epoch: rows are hashed by the primary key (round-robin without one)
    into this many partitions first, so a key is never delivered by two tasks at once."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait before they are sent: sources feeding this sink close epochs at least this often."""


@dataclass(frozen=True)
class WebhookPlan:
    endpoint: Endpoint
    payload: PayloadFormat


def deliver_partition(batches: Iterator[pa.RecordBatch], plan: WebhookPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: send this partition's rows; one row of counts (received rows by op, skips) and the
    first skip's reason, so the driver's log says why without a trip to the executors' logs."""
    inserts = updates = deletes = skipped_rows = skipped_requests = requests = 0
    first_skip: str | None = None
    for outgoing, answer in exchange(batches, plan.endpoint, plan.payload):
        requests += 1
        updates += outgoing.ops.count("u")
        deletes += outgoing.ops.count("d")
        inserts += outgoing.rows
        if isinstance(answer, Skipped):
            skipped_requests += 1
            skipped_rows += outgoing.rows
            first_skip = first_skip or answer.reason
            log_skipped(plan.endpoint, outgoing, answer)
    inserts -= updates + deletes
    counts = (inserts, updates, deletes, skipped_rows, skipped_requests, requests)
    names = ("inserts", "updates", "deletes", "skipped_rows", "skipped_requests", "requests")
    columns = {name: pa.array([value], pa.int64()) for name, value in zip(names, counts, strict=True)}
    yield pa.RecordBatch.from_pydict({**columns, "first_skip": pa.array([first_skip], pa.string())})


class WebhookSink(Sink[WebhookSinkSpec]):
    spec_model: ClassVar[type[WebhookSinkSpec]] = WebhookSinkSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plan: WebhookPlan | None = None
        self._lock = threading.Lock()
        self.skipped_rows = 0
        """Rows of requests skipped under ``skip_on_error`` during this run (they count as written too)."""
        self.skipped_requests = 0
        self.keys: list[str] = []
        """The primary key (own or upstream) that `parallelism` hashes by."""
        self.recorder = NodeRecorder(self.name)

    @property
    def label(self) -> str:
        return f"webhook sink '{self.name}'"

    def check(self, schema: Any, primary_key: list[str]) -> list[str]:
        self.keys = primary_key
        try:
            self._build_plan()
        except Exception as exc:  # a missing secret: the message names the node
            return [getattr(exc, "message", str(exc))]
        return []

    def _build_plan(self) -> WebhookPlan:
        if self._plan is None:
            spec = self.spec
            endpoint = spec.endpoint(
                self.label, "webhook", self.settings, skip_on_error=spec.skip_on_error, recorder=self.recorder
            )
            payload = PayloadFormat(
                spec.payload_version, spec.rows_per_request(self.settings), spec.one_row_per_request
            )
            self._plan = WebhookPlan(endpoint, payload)
        return self._plan

    def initialize(self, ctx: RunContext) -> None:
        self.recorder = ctx.recorder(self.name)
        self._plan = None  # built again, reporting its requests' latencies and retries
        plan = self._build_plan()
        log.info(
            "%s posts to %s (%s, payload_version %d)",
            self.label,
            plan.endpoint.shown_url,
            "one row per request"
            if plan.payload.one_row
            else f"up to {plan.payload.rows_per_request} rows per request",
            plan.payload.version,
        )

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Every request happens now, in the Spark tasks, so the epoch commits only after all of them."""
        plan = self._build_plan()
        df = spread(df, self.spec.parallelism, self.keys)
        counts = df.mapInArrow(lambda batches: deliver_partition(batches, plan), COUNTS).collect()
        written = sum((Written(c.inserts, c.updates, c.deletes) for c in counts), Written())
        skipped_rows = sum(c.skipped_rows for c in counts)
        skipped_requests = sum(c.skipped_requests for c in counts)
        if skipped_requests:
            self.recorder.count("rejected", skipped_rows)
            with self._lock:
                self.skipped_rows += skipped_rows
                self.skipped_requests += skipped_requests
            log.warning(
                "%s: epoch %d of %s: skipped %d of %d requests (%d of %d rows) after delivery failures; the first: %s",
                self.label,
                epoch.id,
                epoch.source,
                skipped_requests,
                sum(c.requests for c in counts),
                skipped_rows,
                written.rows,
                next(c.first_skip for c in counts if c.first_skip),
            )
        return lambda: written
