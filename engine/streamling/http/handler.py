"""The HTTP handler transform (``type: handler``): each epoch's rows are POSTed to a service whose answers
replace them.

It runs on the executors: ``mapInArrow`` over each partition of the epoch's DataFrame, with the output schema
(the input's, changed by ``schema_override``) fixed at validation. Requests go out concurrently through the
worker's shared client (`streamling.http.client`); the answers are converted back to Arrow in input order.
Payload shapes and how output ops are chosen: `streamling.http.payloads`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, PositiveInt, field_validator

from streamling.config.units import Milliseconds
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.http.client import Endpoint, exchange
from streamling.http.options import HttpRequestOptions
from streamling.http.payloads import PayloadError, PayloadFormat, decode_response, to_record_batch
from streamling.plugin import Epoch, Operator, RunContext, Transform
from streamling.spec import TransformSpec, split_columns
from streamling.telemetry.tasks import NodeRecorder
from streamling.types import check_column_types, parse_type, spread, with_gs_op

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T

OUTPUT_BATCH_ROWS = 10_000
"""Answer rows converted to Arrow at once; bounds the worker's memory in one-row-per-request mode too."""


class HandlerSpec(TransformSpec, HttpRequestOptions):
    type: Literal["handler"]
    identity_labels: ClassVar[tuple[str, ...]] = ("url",)
    identity_tags = HttpRequestOptions.identity_tags  # before NodeSpec's: the URL redacted
    from_: str = Field(alias="from", min_length=1)
    primary_key: str | list[str]
    schema_override: dict[str, str | None] | None = None
    """``column: type`` changes a column's type or adds a nullable column; ``column: null`` drops it."""
    parallelism: PositiveInt | None = None
    """Spark tasks sending this node's requests per epoch: the input is hashed by the primary key into this many
    partitions first, so a key is never in flight twice at once."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait before they are sent: sources feeding this node close epochs at least this often."""

    @field_validator("from_")
    @classmethod
    def _one_input(cls, value: str) -> str:
        if len(split_columns(value)) != 1:
            raise ValueError("a handler reads exactly one node")
        return value.strip()

    @field_validator("schema_override")
    @classmethod
    def _types(cls, value: dict[str, str | None] | None) -> dict[str, str | None] | None:
        if value and GS_OP in value:
            raise ValueError(f"{GS_OP} cannot be overridden; the handler always sets it")
        check_column_types({column: text for column, text in (value or {}).items() if text is not None})
        return value


def output_schema(
    label: str, schema: T.StructType, override: Mapping[str, str | None] | None, keys: list[str]
) -> T.StructType:
    """The input schema with `override` applied (changed columns keep their place, added ones come last,
    before ``_gs_op``; dropped ones disappear). Answers come from outside, so every column may be NULL except
    the primary key, which each answer row must carry."""
    from pyspark.sql import types as T

    fields = {f.name: f for f in schema.fields if f.name != GS_OP}
    for column, type_text in (override or {}).items():
        if type_text is None:
            if column not in fields:
                raise StreamlingError.user(
                    f"{label}: schema_override drops '{column}', which is not in the input; "
                    f"available columns: {', '.join(fields)}"
                )
            del fields[column]
        else:
            fields[column] = T.StructField(column, parse_type(type_text), True)
    out = [T.StructField(f.name, f.dataType, f.name not in keys, f.metadata) for f in fields.values()]
    return with_gs_op(T.StructType(out))


@dataclass(frozen=True)
class HandlerPlan:
    """What each partition needs; pickled to the executors once per epoch."""

    endpoint: Endpoint
    payload: PayloadFormat
    arrow_schema: pa.Schema
    type_names: dict[str, str]


def handle_partition(batches: Iterator[pa.RecordBatch], plan: HandlerPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the answers to this partition's rows, in input order."""
    endpoint = plan.endpoint
    rows: list[dict[str, Any]] = []
    ops: list[str] = []
    for outgoing, answer in exchange(batches, endpoint, plan.payload):
        try:
            got, got_ops = decode_response(answer.body, plan.payload.version, outgoing.ops, endpoint.scrub)  # type: ignore[union-attr]
        except PayloadError as exc:
            raise StreamlingError.user(
                f"{endpoint.label}: the response of POST {endpoint.shown_url} is not usable: {exc}"
            ) from None
        rows += got
        ops += got_ops
        if len(rows) >= OUTPUT_BATCH_ROWS:
            yield _converted(rows, ops, plan)
            rows, ops = [], []
    if rows:
        yield _converted(rows, ops, plan)


def _converted(rows: list[dict[str, Any]], ops: list[str], plan: HandlerPlan) -> pa.RecordBatch:
    try:
        return to_record_batch(rows, ops, plan.arrow_schema, plan.type_names, plan.endpoint.scrub)
    except PayloadError as exc:
        endpoint = plan.endpoint
        raise StreamlingError.user(
            f"{endpoint.label}: the response of POST {endpoint.shown_url} does not fit the output schema: {exc}"
        ) from None


class HandlerTransform(Transform[HandlerSpec]):
    """Calls the service once per request's worth of rows; the output replaces the input rows."""

    spec_model: ClassVar[type[HandlerSpec]] = HandlerSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:

        super().__init__(*args, **kwargs)
        self._plan: HandlerPlan | None = None
        self._schema: T.StructType | None = None
        self._shared = False
        self._cached: dict[tuple[str, int], DataFrame] = {}
        self._lock = threading.Lock()
        self.recorder = NodeRecorder(self.name)

    @property
    def label(self) -> str:
        return f"handler transform '{self.name}'"

    def initialize(self, ctx: RunContext) -> None:
        """Requests report their latencies and retries from now on (the plan is built again with the recorder)."""
        self.recorder = ctx.recorder(self.name)
        self._plan = None

    def bind(self, operators: Mapping[str, Operator]) -> None:
        # Read by several nodes, the output is cached per epoch so that every request is sent once.
        readers = sum(1 for op in operators.values() if self.name in op.spec.input_names())
        self._shared = readers > 1

    def plan(self, input_schema: T.StructType) -> HandlerPlan:
        from pyspark.sql.pandas.types import to_arrow_schema

        if self._plan is None or self._schema is None:
            spec = self.spec
            schema = output_schema(self.label, input_schema, spec.schema_override, spec.primary_key_columns())
            endpoint = spec.endpoint(self.label, "HTTP handler", self.settings, recorder=self.recorder)
            payload = PayloadFormat(
                spec.payload_version, spec.rows_per_request(self.settings), spec.one_row_per_request
            )
            arrow_schema = to_arrow_schema(schema, timezone="UTC")
            names = {f.name: f.dataType.simpleString() for f in schema.fields}
            self._plan = HandlerPlan(endpoint, payload, arrow_schema, names)
            self._schema = schema
        return self._plan

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        (df,) = inputs.values()
        plan = self.plan(df.schema)
        assert self._schema is not None
        if epoch is not None:
            df = spread(df, self.spec.parallelism, self.spec.primary_key_columns())
        out = df.mapInArrow(lambda batches: handle_partition(batches, plan), self._schema)
        if epoch is not None and self._shared:
            out = out.persist()
            with self._lock:
                self._cached[(epoch.source, epoch.id)] = out
        return out

    def flush_epoch(self, epoch: Epoch) -> None:
        """Every sink has written the epoch: its cached output is no longer needed."""
        with self._lock:
            cached = self._cached.pop((epoch.source, epoch.id), None)
        if cached is not None:
            cached.unpersist()

    def terminate(self) -> None:
        with self._lock:
            cached, self._cached = list(self._cached.values()), {}
        for frame in cached:
            frame.unpersist()
