"""The script transform: a JavaScript or TypeScript function called once per row, in a WebAssembly sandbox on
the executors.

The function gets the row as an object and returns an object (one row), ``null``/``undefined`` (the row is
dropped) or an array (any number of rows). Spark needs the output schema before any data moves, so it is either
the declared ``schema`` or the input's columns plus those the script adds, inferred at validation by running it on
sample rows (`streamling.script.inference`). Each Python worker keeps one sandbox per script and limits
(`streamling.script.sandbox.sandbox_for`) and hands it `batch_size` rows per call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, PositiveInt, field_validator, model_validator

from streamling.config.units import Milliseconds
from streamling.core.rows import GS_OP, json_default
from streamling.errors import StreamlingError
from streamling.plugin import Epoch, RunContext, Transform
from streamling.script import codec
from streamling.script.inference import Inferred, infer_columns
from streamling.script.sandbox import (
    LimitExceeded,
    Limits,
    SandboxError,
    ScriptSyntaxError,
    check_script,
    clean_stack,
    discard,
    sandbox_for,
)
from streamling.spec import TransformSpec, split_columns
from streamling.telemetry.tasks import OFF, NodeRecorder
from streamling.types import parse_type, spread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T

INPUT_ROW_CHARS = 300


class ScriptTransformSpec(TransformSpec):
    type: Literal["script"]
    identity_labels: ClassVar[tuple[str, ...]] = ("language",)
    language: Literal["javascript", "typescript"]
    script: str = Field(min_length=1)
    primary_key: str | list[str]
    schema_: dict[str, str] | None = Field(default=None, alias="schema")
    batch_size: PositiveInt | None = None
    time_limit_ms: Milliseconds | None = None
    memory_limit_mb: int | None = Field(default=None, ge=16)
    parallelism: PositiveInt | None = None
    """Spark tasks (sandboxes) running the script per epoch: the input is hashed by the primary key into this
    many partitions first."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait: sources feeding this transform close epochs at least this often."""

    @field_validator("from_")
    @classmethod
    def _one_input(cls, value: str | list[str] | None) -> str | list[str] | None:
        if len(split_columns(value)) > 1:
            raise ValueError("a script transform reads exactly one node")
        return value

    @field_validator("schema_")
    @classmethod
    def _types(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must declare at least one column (leave 'schema' out to keep the input's columns)")
        if GS_OP in value:
            raise ValueError(f"'{GS_OP}' is always the input row's; remove it from 'schema'")
        for type_text in value.values():
            try:
                parse_type(type_text)
            except StreamlingError as exc:
                raise ValueError(exc.message) from None
        return value

    @field_validator("time_limit_ms")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @model_validator(mode="after")
    def _parses(self) -> ScriptTransformSpec:
        """Syntax errors surface at validation, with the script's line, not in the first epoch."""
        from streamling.script.typescript import TypeScriptUnavailable

        try:
            check_script(self.javascript(), Limits(self.time_limit_ms or 10_000, self.memory_limit_mb or 256))
        except TypeScriptUnavailable as exc:
            raise ValueError(str(exc)) from None
        except ScriptSyntaxError as exc:
            raise ValueError(f"script does not parse: {exc}") from None
        except SandboxError as exc:  # a limit stopped the script's top level
            raise ValueError(f"script cannot be evaluated: {exc}") from None
        return self

    def javascript(self) -> str:
        """The script as JavaScript: TypeScript is transpiled here, on the driver, so executors never need Sucrase."""
        if self.language == "typescript":
            from streamling.script.typescript import transpile

            return transpile(self.script)
        return self.script


class ScriptTransform(Transform[ScriptTransformSpec]):
    spec_model: ClassVar[type[ScriptTransformSpec]] = ScriptTransformSpec

    @property
    def label(self) -> str:
        return f"script transform '{self.name}'"

    recorder: NodeRecorder = OFF

    def initialize(self, ctx: RunContext) -> None:
        self.recorder = ctx.recorder(self.name)

    @cached_property
    def limits(self) -> Limits:
        defaults = self.settings.script_transform
        return Limits(
            time_limit_ms=self.spec.time_limit_ms or defaults.time_limit_ms,
            memory_limit_mb=self.spec.memory_limit_mb or defaults.memory_limit_mb,
        )

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        from pyspark.sql import types as T

        (frame,) = inputs.values()
        schema = self.output_schema(frame.schema)
        timezone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        program = ScriptProgram(
            label=self.label,
            script=self.spec.javascript(),
            inputs=codec.columns_of(frame.schema),
            outputs=codec.outputs_of(T.StructType([f for f in schema.fields if f.name != GS_OP]), frame.schema),
            strict=self.spec.schema_ is None,
            limits=self.limits,
            batch_size=self.spec.batch_size or self.settings.script_transform.batch_size,
            arrow_schema=_arrow_schema(schema, timezone),
            recorder=self.recorder,
        )
        if epoch is not None:
            frame = spread(frame, self.spec.parallelism, self.spec.primary_key_columns())
        return frame.mapInArrow(program, schema)

    def output_schema(self, input_schema: T.StructType) -> T.StructType:
        """The declared columns (authoritative: the script is not consulted), else the input's plus those the
        script adds, inferred by running it on sample rows (`streamling.script.inference`); all nullable, since a
        script may leave any value out; ``_gs_op`` last. The inference runs once per input schema: at
        validation, and the epochs reuse it."""
        from pyspark.sql import types as T

        if self.spec.schema_ is not None:
            fields = [T.StructField(name, parse_type(text), True) for name, text in self.spec.schema_.items()]
        else:
            key = input_schema.json()
            inferred = self._inferred.get(key)
            if inferred is None:
                inferred = infer_columns(self.label, self.spec.javascript(), input_schema, self.limits)
                self._inferred[key] = inferred
            fields = inferred.fields
        return T.StructType([*fields, T.StructField(GS_OP, T.StringType(), False)])

    @cached_property
    def _inferred(self) -> dict[str, Inferred]:
        return {}

    def warnings(self) -> list[str]:
        """The inference's warning: the sample rows all dropped, so no added column could be seen."""
        return sorted({i.warning for i in self._inferred.values() if i.warning})


def _arrow_schema(schema: T.StructType, timezone: str) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone=timezone)


@dataclass(frozen=True)
class ScriptProgram:
    """Everything an executor needs to run the script over a partition; pickled into the ``mapInArrow`` task."""

    label: str
    script: str
    inputs: list[codec.Column]
    outputs: list[codec.Column]
    strict: bool
    limits: Limits
    batch_size: int
    arrow_schema: pa.Schema
    recorder: NodeRecorder = OFF
    """Where each sandbox call's time is reported (the node's per-batch latency)."""
    spec: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", codec.spec_of(self.inputs, self.outputs, self.strict))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in rebatch(batches, self.batch_size):
            began = time.monotonic()
            out = self.process(batch)
            self.recorder.latency((time.monotonic() - began) * 1000)
            if out.num_rows:
                yield out

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """One sandbox call for `batch`; user errors become `StreamlingError.user` naming the row and its input."""
        sandbox = sandbox_for(self.script, self.spec, self.limits)
        with sandbox.lock:
            try:
                reply = sandbox.run(codec.encode(batch, self.inputs))
            except LimitExceeded as exc:
                discard(sandbox)
                raise self._error(batch, exc.row, str(exc), stopped=True) from None
            except SandboxError as exc:
                discard(sandbox)
                raise self._error(batch, None, str(exc)) from None
        status = reply[0]
        if status == "ok":
            try:
                return codec.decode(reply, batch, self.outputs, self.arrow_schema)
            except codec.BadValue as exc:
                sources = codec.sources_of(reply)
                row = int(sources[exc.index]) if exc.index < len(sources) else None
                raise self._error(batch, row, f"column '{exc.column}': value {_show(exc.value)} {exc.reason}") from None
        row = int(reply[1])
        if status == "error":
            name, message, stack = reply[2], reply[3], clean_stack(reply[4])
            trace = f"; stack: {' / '.join(stack)}" if stack else ""
            raise self._error(batch, row if row >= 0 else None, f"{name}: {message}{trace}" if name else message)
        if status == "coerce":
            raise self._error(batch, row, f"column '{reply[2]}': value {reply[3]} {reply[4]}")
        if status == "keys":
            extra, names = reply[2], [c.name for c in self.outputs]
            raise self._error(
                batch,
                row,
                f"the script returned {', '.join(repr(k) for k in extra)}, which {'is' if len(extra) == 1 else 'are'} "
                f"not among the output columns ({', '.join(names)}); without 'schema' the output columns are the "
                "input's and those the script added on the sample rows at validation: declare every output column "
                "in 'schema'",
            )
        raise self._error(batch, row, f"the script {reply[2]}")

    def _error(self, batch: pa.RecordBatch, row: int | None, what: str, stopped: bool = False) -> StreamlingError:
        """``<label>: row R of N in the batch: <what>; input row: {...}`` on one line (it crosses from the executor
        as the text of a Python exception, where only the first line is recovered)."""
        if row is None:
            message = f"{self.label}: {what} (a batch of {batch.num_rows} rows)"
        else:
            text = json.dumps(batch.slice(row, 1).to_pylist()[0], ensure_ascii=False, default=json_default)
            if len(text) > INPUT_ROW_CHARS:
                text = text[: INPUT_ROW_CHARS - 1] + "…"
            where = f"row {row + 1} of {batch.num_rows} in the batch"
            if stopped:
                message = f"{self.label}: {what}; stopped at {where}; input row: {text}"
            else:
                message = f"{self.label}: {where}: {what}; input row: {text}"
        return StreamlingError.user(" ".join(message.split()))


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=json_default)
    return text if len(text) <= 120 else text[:117] + "..."


def rebatch(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """Batches of exactly `size` rows (the last may be shorter), whatever sizes Spark hands over."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not pending and batch.num_rows == size:
            yield batch
            continue
        pending.append(batch)
        rows += batch.num_rows
        while rows >= size:
            combined = pa.Table.from_batches(pending).combine_chunks()
            yield from (b for b in combined.slice(0, size).to_batches() if b.num_rows)
            rest = combined.slice(size)
            pending, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield from pa.Table.from_batches(pending).combine_chunks().to_batches()
