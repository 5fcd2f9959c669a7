"""Spark-level operators for Arrow-level plugin classes (`streamling.plugin`): the plugin writes Arrow, the
runtime keeps epochs, commits and replays exactly as for the built-ins.

Why this module exists: the runtime drives one kind of node, the Spark-level `Operator` (it plans the Spark
queries, stages sinks, commits positions with state), so that built-ins and plugins share one planner and one
commit protocol. The Arrow level is the smaller contract most plugins need (`docs/writing-a-plugin.md`, "Two
tiers"); each adapter here is the Spark side of one Arrow-level kind, written once instead of by every plugin:
`ArrowSource` → a stream reader whose offsets wrap the plugin's positions, `PolledSource` → a driver-read source,
`ArrowTransform` → ``mapInArrow``, `ArrowSink` → a `DriverSink`, `SideOutput` → a pass-through transform. Around
them: the node's state staged per epoch (`NodeState`), the plugin's schema turned into Spark's and every batch
conformed to it, its labels checked like the YAML's, and every call into plugin code naming the plugin and the
node when it fails (``plugin 'acme.x' (node 'n'): …``), on the driver and inside Spark tasks alike. What runs on
the executors (a transform, a source's reads) rebuilds the plugin instance there from a `PluginRef`, once per
Python worker, by importing the plugin's module by name: installed, or shipped with the job
(`streamling.spark.shipping`).
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from streamling.core.labels import label_errors
from streamling.errors import StreamlingError, StreamlingNodeError
from streamling.operators import DriverSink, Epoch, Operator, RunContext, Source, Transform
from streamling.plugin import (
    ArrowSink,
    ArrowSource,
    ArrowTransform,
    Context,
    PolledSource,
    SideOutput,
)
from streamling.plugins.state import NodeState
from streamling.plugins.worker import PluginRef, arrow_schema_of, conform, plugin_errors, plugin_label, spark_schema_of
from streamling.spec import ignored_fields
from streamling.state import StateBackend

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.plugins")


class PluginNode(Operator[Any]):
    """What every adapter shares: the plugin instance, its state, its label, its lifecycle hooks."""

    plugin_class: ClassVar[type] = object
    plugin_id: ClassVar[str] = ""

    @property
    def label(self) -> str:
        return plugin_label(self.plugin_id, self.name, self.kind)

    @cached_property
    def node_state(self) -> NodeState:
        return NodeState(self.name, self.plugin_id)

    @cached_property
    def plugin(self) -> Any:
        """The plugin instance on the driver; its identity labels are asked (and checked) once, as it is built."""
        context = Context(self.name, self.plugin_id, self.settings.application_id, self.node_state, self.settings)
        with plugin_errors(self.label):
            plugin = self.plugin_class(self.spec.options, context)
            labels = plugin.labels()
        self._declared_labels = self._checked_labels(labels)
        return plugin

    def _checked_labels(self, labels: Any) -> dict[str, Any]:
        """The plugin's identity labels under the rules of YAML ``telemetry.labels`` (`core/labels.py`: they
        become metric dimensions too), else a user-facing error naming plugin, node and key."""
        if labels is None:
            return {}
        if not isinstance(labels, Mapping):
            raise StreamlingNodeError(
                f"{self.label}: labels() returned {type(labels).__name__}, not a mapping of label names to values",
                user_facing=True,
            )
        labels = dict(labels)
        identity = (*self.spec.identity_labels, "type")  # a plugin node identifies itself by its type too
        problems = label_errors(self.label, labels, identity, what="identity label", origin="labels()")
        if problems:
            raise StreamlingNodeError("; ".join(problems), user_facing=True)
        return labels

    def call(self, method: str, *args: Any, bucket: Any = None) -> Any:
        """Call the plugin's `method`, its state puts staged for `bucket`, its errors named."""
        with plugin_errors(self.label), self.node_state.staging_for(bucket):
            return getattr(self.plugin, method)(*args)

    def ref(self) -> PluginRef:
        cls = self.plugin_class
        from streamling.plugins.archives import local_archives

        return PluginRef(
            module=cls.__module__,
            qualname=cls.__qualname__,
            plugin_id=self.plugin_id,
            node=self.name,
            application_id=self.settings.application_id,
            options=pickle.dumps(self.spec.options),
            label=self.label,
            archives=local_archives(),
            log_level=self.settings.log_level,
            log_format=self.settings.log_format,
        )

    def labels(self) -> dict[str, Any]:
        """The node's telemetry labels: the YAML's, with the plugin's identity labels winning."""
        return {**self.spec.labels(), **self._plugin_labels()}

    def _plugin_labels(self) -> dict[str, Any]:
        self.plugin  # noqa: B018 - built once, with its labels checked
        return self._declared_labels

    def warnings(self) -> list[str]:
        """The plugin's own warnings, then one per YAML label the plugin overrides with another value, each naming
        the node. A plugin that cannot be built or whose labels break the rules has no warnings: analysis reports
        it as an error for its node."""
        yaml_labels = self.spec.labels()
        out = ignored_fields(
            self.label,
            self.spec,
            {
                "batch_size": "a plugin is handed each epoch's rows as the Arrow batches of the Spark tasks that "
                "compute them (an epoch holds up to record_batch_size rows)"
            }
            if "batch_size" in type(self.spec).model_fields
            else {},
        )
        try:
            plugin_labels = self._plugin_labels()
        except StreamlingError:
            return out
        out += [f"{self.label}: {warning}" for warning in self.call("warnings")]  # a failure here names the node
        for key, value in plugin_labels.items():
            if key in yaml_labels and str(yaml_labels[key]) != str(value):
                out.append(
                    f"{self.label}: telemetry label '{key}' is set to {yaml_labels[key]!r} in the pipeline and to "
                    f"{value!r} by the plugin; the plugin's value is used"
                )
        return out

    def initialize(self, ctx: RunContext) -> None:
        self.node_state.attach(ctx.state)
        self.call("open")

    def terminate(self) -> None:
        if "plugin" in self.__dict__:
            self.call("close")

    def state_entries(self, epoch: Epoch) -> dict[str, dict[str, Any]]:
        """The state this node staged for `epoch`, for the epoch's commit (`put_many` with the position)."""
        return self.node_state.entries(_bucket(epoch))


def _position_key(node: str) -> str:
    return f"{node}:position"


def _bucket(epoch: Epoch) -> tuple[str, int]:
    """Where a plugin's state puts during `epoch` are staged, to be committed with its position."""
    return (epoch.source, epoch.id)


class _PluginSource(PluginNode, Source[Any]):
    def schema(self) -> StructType:
        return spark_schema_of(self.call("output_schema"), self.label)

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        saved = state.get(_position_key(self.name))
        return {"position": saved.get("position")} if saved else None

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        return bool(self.plugin_class.bounded) and bool(self.call("finished", position.get("position")))

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        return self.call("backlog", (position or {}).get("position"))

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        return self.call("rows_between", start.get("position"), end.get("position"))

    def primary_key(self) -> list[str]:
        return super().primary_key() or list(getattr(self.plugin_class, "primary_key", ()))

    def reads(self) -> list[Any]:
        return list(self.call("reads"))

    def epoch_committed(self, epoch: Epoch) -> None:
        self.call("finalize", epoch)

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        """The position `end` and the state the plugin staged for the epoch that ends there."""
        entries = {_position_key(self.name): {"position": end.get("position"), "updated_at": now_ms}}
        return {**entries, **self.node_state.entries(*self._buckets_ending(end))}

    def _buckets_ending(self, end: Mapping[str, Any]) -> tuple[Any, ...]:
        """Where the state staged for the epoch ending at `end` waits, besides the next-commit bucket."""
        return ()


class PluginArrowSource(_PluginSource):
    """An `ArrowSource` as a Spark stream reader: positions travel as offsets ``{"position": …}``."""

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        return self.committed_position(state) or {"position": self.call("initial_position")}

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataSourceStreamReader:
        from streamling.plugins.source_reader import PluginStreamReader

        return PluginStreamReader(self.ref(), self.schema(), start.get("position"), replay_end)


class PluginPolledSource(_PluginSource):
    """A `PolledSource` read by the driver (`reads_on_driver`): each `poll` result is one epoch."""

    reads_on_driver: ClassVar[bool] = True

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        return self.committed_position(state) or {"position": None}

    def _buckets_ending(self, end: Mapping[str, Any]) -> tuple[Any, ...]:
        """`poll`'s puts wait under the position it returned (`next_epoch`)."""
        return (("poll", _text(end.get("position"))),)

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame | None, dict[str, Any]] | None:
        after = start.get("position")
        pending = ("poll", None, threading.get_ident())
        result = self.call("poll", after, bucket=pending)
        if result is None:
            self.node_state.move(pending, None)
            if self.plugin_class.bounded and self.call("finished", after):
                return None
            time.sleep(float(self.plugin_class.poll_interval_sec))
            return None, dict(start)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise StreamlingError.user(f"{self.label}: poll returned {type(result).__name__}, not (batch, position)")
        data, position = result
        self.node_state.move(pending, ("poll", _text(position)))
        if replay_end is not None and _text(position) != _text(replay_end.get("position")):
            log.warning(
                "%s: the replayed poll after %s ended at %s, not at %s as before the restart; sinks that applied "
                "that epoch apply these rows again",
                self.label,
                after,
                position,
                replay_end.get("position"),
            )
        struct = self.schema()
        batches = list(conform(data, arrow_schema_of(struct), self.label, "poll"))
        table = pa.Table.from_batches(batches, schema=arrow_schema_of(struct))
        return spark.createDataFrame(table, schema=struct), {"position": position}

    def flush_epoch(self, epoch: Epoch) -> None:
        self.call("flush", epoch, bucket=_bucket(epoch))


def _text(position: Any) -> str:
    return json.dumps(position, sort_keys=True, default=str)


class PluginTransform(PluginNode, Transform[Any]):
    """An `ArrowTransform` as ``mapInArrow`` with the declared output schema."""

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        if len(inputs) != 1:
            raise StreamlingError.user(
                f"{self.label}: a plugin transform reads exactly one node ('from'), got {len(inputs)}"
            )
        (frame,) = inputs.values()
        declared = self.call("output_schema", arrow_schema_of(frame.schema))
        struct = spark_schema_of(declared, self.label)
        return frame.mapInArrow(_TransformTask(self.ref(), arrow_schema_of(struct)), struct)


class _TransformTask:
    """The function ``mapInArrow`` ships: no operator, only what rebuilds the plugin on the worker."""

    def __init__(self, ref: PluginRef, expected: pa.Schema) -> None:
        self.ref = ref
        self.expected = expected

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plugin = self.ref.build()
        label = self.ref.label
        for batch in batches:
            with plugin_errors(label):
                result = plugin.transform(batch)
            yield from conform(result, self.expected, label, "transform")


class _EpochHooks(PluginNode):
    """A sink's or side output's hooks: `flush` before the epoch commits (its state puts go with the epoch),
    `finalize` after, and the objects it writes."""

    def flush_epoch(self, epoch: Epoch) -> None:
        self.call("flush", epoch, bucket=_bucket(epoch))

    def epoch_committed(self, epoch: Epoch) -> None:
        self.call("finalize", epoch)

    def writes(self) -> list[Any]:
        return list(self.call("writes"))


class PluginSink(_EpochHooks, DriverSink[Any]):
    """A `DriverSink`: the epoch's rows as batches on the committer thread, then flush, then finalize."""

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        self.plugin  # noqa: B018 - validation builds the plugin (constructor, labels), as for the other kinds
        return []

    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        self.call("write", batch, epoch, bucket=_bucket(epoch))


class PluginSideOutput(_EpochHooks, Transform[Any]):
    """A `SideOutput`: sees its input's batches during the epoch, flushed and finalized with it; its output
    (the input, unchanged) is read by no node."""

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        (frame,) = inputs.values()
        if epoch is None:
            self.plugin  # noqa: B018 - validation builds the plugin (constructor, labels)
            return frame
        for batch in frame.toArrow().to_batches():
            self.call("observe", batch, epoch, bucket=_bucket(epoch))
        return frame


ADAPTERS: dict[type, type[PluginNode]] = {
    ArrowSource: PluginArrowSource,
    PolledSource: PluginPolledSource,
    ArrowTransform: PluginTransform,
    ArrowSink: PluginSink,
    SideOutput: PluginSideOutput,
}


_adapters: dict[tuple[type, str], type[PluginNode]] = {}
"""One adapter class per plugin class and id, so every node of that id shares it (its `OPTIONAL_ANSWERS` decided
once)."""
_adapters_lock = threading.Lock()


OPTIONAL_ANSWERS = ("backlog", "rows_between")
"""What a source may tell: a plugin source that does not implement one keeps `Source`'s default in its adapter, so
the control plane, which tells by the override whether a source knows it, offers no lag checks (`backlog`) or row
reconciliation (`rows_between`) for it."""


def adapter_for(cls: type, plugin_id: str) -> Callable[..., PluginNode]:
    """The operator class for plugin class `cls` registered as `plugin_id`."""
    with _adapters_lock:
        found = _adapters.get((cls, plugin_id))
        if found is None:
            base = next(adapter for abc, adapter in ADAPTERS.items() if issubclass(cls, abc))
            attributes: dict[str, Any] = {"plugin_class": cls, "plugin_id": plugin_id}
            for method in OPTIONAL_ANSWERS if issubclass(base, _PluginSource) else ():
                if getattr(cls, method) in (getattr(ArrowSource, method), getattr(PolledSource, method)):
                    attributes[method] = getattr(Source, method)
            found = type(f"{base.__name__}[{plugin_id}]", (base,), attributes)
            _adapters[(cls, plugin_id)] = found
        return found
