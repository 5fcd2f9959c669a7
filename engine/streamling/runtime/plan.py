"""The executable plan: one operator per node, every node's schema, and per-epoch evaluation.

`analyze` runs the real Spark analyser over empty DataFrames of the sources' schemas, so
``--validate`` checks SQL, schemas and primary keys exactly as a run would, moving no data.
`evaluate` applies the same transforms to one source's micro-batch; inputs that belong to other
sources are empty in that epoch, which is exact for the stateless operations SQL transforms allow.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from streamling.config import Settings
from streamling.errors import InvalidPipelineError, StreamlingError
from streamling.operators import Epoch, Operator, Sink, Source, Transform
from streamling.spec import event_time_warning
from streamling.topology.pipeline import Node, Pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from streamling.telemetry.observe import EpochTap


class Plan:
    def __init__(self, pipeline: Pipeline, settings: Settings) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.operators: dict[str, Operator] = {
            name: node.optype.operator(name, node.spec, settings) for name, node in pipeline.nodes.items()
        }
        self.schemas: dict[str, StructType] = {}
        self.key_warnings: list[str] = []
        # Per-epoch evaluation walks these; the graph does not change during a run.
        self.downstream = {n.name: pipeline.downstream(n.name) for n in pipeline.sources}
        for node in pipeline.sources:
            self._pace_for_sinks(node)
        for op in self.operators.values():
            op.bind(self.operators)

    def _pace_for_sinks(self, node: Node) -> None:
        """A sink's (or a batching transform's) `batch_flush_interval` shortens the epoch interval of the sources
        feeding it; so does a source's own (the Kafka source's: how long its records may wait to be handed on)."""
        wanted = [
            interval
            for name in [node.name, *self.downstream[node.name]]
            if (interval := getattr(self.operators[name], "flush_interval_sec", None)) is not None
        ]
        if wanted and min(wanted) < self.settings.checkpoint_interval_sec:
            paced = self.settings.model_copy(update={"checkpoint_interval_sec": min(wanted)})
            self.operators[node.name] = node.optype.operator(node.name, node.spec, paced)

    def source(self, name: str) -> Source:
        op = self.operators[name]
        assert isinstance(op, Source)
        return op

    def sinks_of(self, source: str) -> list[str]:
        return [n for n in self.downstream[source] if self.pipeline.nodes[n].kind == "sink"]

    def primary_key_of(self, name: str) -> list[str]:
        """A node's own primary key, else the nearest upstream one (first input first)."""
        own = self.operators[name].primary_key()
        if own:
            return own
        for parent in self.pipeline.inputs.get(name, []):
            inherited = self.primary_key_of(parent)
            if inherited:
                return inherited
        return []

    def key_problems(self) -> list[str]:
        """Sources without a primary key, and sinks with none of their own or upstream: errors with
        `enforce_primary_keys`, else warnings (`key_warnings`)."""
        enforce = self.settings.enforce_primary_keys
        problems = []
        for node in [*self.pipeline.sources, *self.pipeline.sinks]:
            if self.primary_key_of(node.name):
                continue
            where = "" if node.kind == "source" else " of its own or upstream"
            if enforce:
                problems.append(
                    f"{node.label} has no primary key{where}, which enforce_primary_keys requires; set primary_key"
                )
            else:
                problems.append(
                    f"{node.label} has no primary key{where}; upserts and deletes downstream cannot be keyed "
                    "(set primary_key, or enforce_primary_keys: true to make this an error)"
                )
        return problems

    def renewed(self, spark: SparkSession) -> Plan:
        """A plan of fresh operators for the same pipeline and settings, analysed again: what a restart runs, so that
        nothing an operator held from the failed attempt (staged state, open clients) carries over."""
        plan = Plan(self.pipeline, self.settings)
        plan.prefetch()
        errors = plan.analyze(spark)
        if errors:
            message = f"pipeline '{self.pipeline.name}' is no longer valid: {'; '.join(errors)}"
            raise InvalidPipelineError(message, errors)
        return plan

    def prefetch(self) -> None:
        """Every operator's Spark-free lookups (`Operator.prefetch`), in the pipeline's order."""
        for name in self.pipeline.topological_order():
            self.operators[name].prefetch()

    def analyze(self, spark: SparkSession) -> list[str]:
        """Compute every node's schema; returns user-facing errors (empty when the plan is sound).

        A retriable error (a service that stayed unreachable) is raised instead: it says nothing about the
        pipeline, so it must not turn into a validation error. Missing primary keys that are only warnings go to
        `key_warnings`."""
        errors: list[str] = []
        self.key_warnings = []
        if self.settings.enforce_primary_keys:
            errors += self.key_problems()
        else:
            self.key_warnings = self.key_problems()
        for name in self.pipeline.topological_order():
            node = self.pipeline.nodes[name]
            parents = self.pipeline.inputs.get(name, [])
            if any(p not in self.schemas for p in parents):
                continue  # an upstream node already failed; its error says why
            try:
                schema = self._schema_of(spark, node, parents)
            except StreamlingError as exc:
                if exc.retriable:
                    raise
                named = exc.user_facing or f"{node.kind} '{node.name}'" in exc.message.split(": ", 1)[0]
                errors.append(exc.message if named else f"{node.label}: {exc.message}")
                continue
            if schema is not None:
                self.schemas[name] = schema
            keyed = schema if schema is not None else self.schemas[parents[0]]
            try:
                error = _primary_key_error(node.name, self.operators[name].primary_key(), keyed)
            except StreamlingError as exc:
                error = exc.message
            if error:
                errors.append(error)
        return errors

    @property
    def warnings(self) -> list[str]:
        """The settings' and the operators' warnings (see `Operator.warnings`), once the plan is analysed."""
        out = self.settings.startup_warnings()
        for name in self.pipeline.topological_order():
            op = self.operators[name]
            out += event_time_warning(op.label, op.spec) + op.warnings()
        return out

    def _schema_of(self, spark: SparkSession, node: Node, parents: list[str]) -> StructType | None:
        op = self.operators[node.name]
        if isinstance(op, Source):
            return op.refine(empty_frame(spark, op.schema())).schema
        if isinstance(op, Transform):
            inputs = {p: empty_frame(spark, self.schemas[p]) for p in parents}
            return op.apply(spark, inputs, None).schema
        if isinstance(op, Sink):
            problems = op.check(self.schemas[parents[0]], self.primary_key_of(node.name))
            if problems:
                raise StreamlingError.user("; ".join(problems))
        return None

    def evaluate(
        self, spark: SparkSession, source: str, batch: DataFrame, epoch: Epoch, tap: EpochTap | None = None
    ) -> dict[str, DataFrame]:
        """The DataFrame each sink downstream of `source` receives for `epoch`. With a `tap`, each node's
        DataFrame is observed as it is built (a side output, whose own output no sink reads, counts its input)."""
        observe = tap.observe if tap is not None else lambda _name, frame: frame
        frames: dict[str, DataFrame] = {source: observe(source, self.source(source).refine(batch))}
        outputs: dict[str, DataFrame] = {}
        for name in self.downstream[source]:
            op = self.operators[name]
            parents = self.pipeline.inputs[name]
            inputs = {p: frames[p] if p in frames else empty_frame(spark, self.schemas[p]) for p in parents}
            if isinstance(op, Transform):
                if op.spec.side_output:
                    inputs = {p: observe(name, frame) for p, frame in inputs.items()}
                    frames[name] = op.apply(spark, inputs, epoch)
                else:
                    frames[name] = observe(name, op.apply(spark, inputs, epoch))
            else:
                outputs[name] = inputs[parents[0]]
        return outputs


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """The same local relation as ``spark.createDataFrame([], schema)``, built by the JVM's own method:
    PySpark's imports pandas first (~0.2 s of a driver's start, where nothing else of the run needs pandas)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    jspark = spark._jsparkSession
    rows = spark.sparkContext._jvm.java.util.ArrayList()  # type: ignore[union-attr]
    return ClassicDataFrame(jspark.createDataFrame(rows, jspark.parseDataType(schema.json())), spark)


def _primary_key_error(name: str, wanted: list[str], schema: StructType) -> str | None:
    available = schema.fieldNames()
    missing = [c for c in wanted if c not in available]
    if not missing:
        return None
    return (
        f"Primary key validation failed for node '{name}': columns {json.dumps(missing)} not found in "
        f"schema. Available columns: {json.dumps(available)}"
    )
