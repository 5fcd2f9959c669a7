"""The public API for Streamling plugins: the one module a plugin imports.

A plugin is a module or package that exposes ``PLUGIN = Plugin(namespace=..., operators={...}, ...)``. It is
found through ``STREAMLING__PLUGIN__PATH`` (a ``.py`` file, a package directory, or a directory of them) or as
an installed distribution's entry point in the group ``streamling.plugins`` whose value is that ``PLUGIN``.
Pipelines name its operators ``<namespace>.<name>``: ``type: acme.orders_source``.

Two tiers of operator classes live here (`docs/writing-a-plugin.md`, "Two tiers"):

- **the Arrow level**, for most plugins: the classes below. A node gets and gives ``pyarrow`` record batches;
  the runtime plans the Spark side (the reading tasks, ``mapInArrow``, collecting a sink's epoch to the driver)
  and owns epochs, commits, replays and delivery. The adapters in `streamling.plugins.adapters` turn each class
  into a Spark-level operator. The built-in print sink (`streamling.builtins.print_sink`) is written here.
- **the Spark level**, for what needs planning control: `Operator`, `Source`, `Transform`, `Sink`, `DriverSink`.
  A node gets DataFrames and Spark's stream-reader contract, so it decides partitioning, pushdown, what runs on
  the executors and what is collected. The other built-ins are written there.

The Arrow-level classes, and the other things a plugin may define:

- `ArrowSource`: read on the executors by Spark tasks, planned on the driver. Say where reading starts
  (`initial_position`), how far data is available (`latest_position`) and how to read a range
  (`read(start, end)`). Positions are JSON values; the committed one lives in the state backend.
- `PolledSource`: read by the driver, one batch after another (`poll(after)`), e.g. a partner API.
- `ArrowTransform`: a record batch in, a record batch out, on the executors (``mapInArrow``).
- `ArrowSink`: an epoch's record batches on the driver (`write`), `flush` before the epoch commits,
  `finalize` after.
- `SideOutput`: sees a node's batches without changing them (`observe`), flushed and finalized with the
  epoch; a pipeline node (``from:`` the node it observes) that nothing reads.
- `Preprocessor`: rewrites the pipeline definition (a dict) before it is parsed; turned on by the settings
  ``plugin.preprocessor_ids`` (options in ``plugin.preprocessor_options.<id>``).
- `SqlFunction`: a vectorised scalar function usable in every ``sql`` transform and checked by ``--validate``.

Each node class declares its options as a pydantic model (`Options`); a node's ``options:`` map (or, as in
the original's examples, its other top-level fields) is validated against it, and ``--validate`` reports bad
options per node and field. Constructors and `output_schema` must not do I/O: validation builds the classes
to learn schemas. Open connections in `open` (driver, only when a run starts), release them in `close`.

Importing this module imports neither pyspark nor psycopg. The Spark-level operator interface — the one the
built-in operators on that tier are written against, importing it only from here (`Operator`, `Source`,
`Transform`, `Sink`, `DriverSink`, `Epoch`, `AppliedEpoch`, `Written`, `rows_of`, `RunContext`, `ExternalObject`)
— is re-exported on first use.
"""

from __future__ import annotations

import inspect
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from streamling.errors import StreamlingError

if TYPE_CHECKING:
    import pyarrow as pa

    from streamling.operators import (
        AppliedEpoch,
        DriverSink,
        Epoch,
        ExternalObject,
        Operator,
        RunContext,
        Sink,
        Source,
        Transform,
        Written,
        rows_of,
    )

__all__ = [
    "AppliedEpoch",
    "ArrowSink",
    "ArrowSource",
    "ArrowTransform",
    "Context",
    "DriverSink",
    "Epoch",
    "ExternalObject",
    "Operator",
    "Options",
    "Plugin",
    "PluginError",
    "PolledSource",
    "Position",
    "Preprocessor",
    "RunContext",
    "SideOutput",
    "Sink",
    "Source",
    "SqlFunction",
    "State",
    "Transform",
    "Written",
    "rows_of",
]

Position = Any
"""A source position: any JSON value (a number, a string, a list or an object)."""

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Namespaces, operator names and SQL function names."""


class PluginError(StreamlingError):
    """A plugin that cannot be loaded or used: what is wrong, naming the plugin, class and method."""

    def __init__(self, message: str) -> None:
        super().__init__(message, user_facing=True)


class Options(BaseModel):
    """Base of a plugin node's options. Unknown fields are errors, so a typo is reported by ``--validate``.
    Values arrive from YAML; pydantic's lax mode turns ``"50"`` into ``50`` for an ``int`` field."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class State(ABC):
    """A node's own small state in the pipeline's state backend (a cursor, a token), namespaced by node.

    `put` stages a value; it is written in the same state-backend transaction as the source position of the
    epoch during which it was staged, so state and positions never disagree after a crash. `get` sees staged
    values first, then committed ones. Values are JSON values. Available on the driver only (sources' `open`
    and `poll`, sinks, side outputs), not inside `ArrowSource.read` or `ArrowTransform.transform`."""

    @abstractmethod
    def get(self, key: str, default: Any = None) -> Any: ...

    @abstractmethod
    def put(self, key: str, value: Any) -> None: ...


@dataclass(frozen=True)
class Context:
    """Where a plugin instance runs: its node, its plugin id, the application and (driver only) its state and the
    run's settings."""

    node: str
    plugin_id: str
    application_id: str = "local_app_v1"
    state: State | None = None
    settings: Any = None
    """The run's settings (`streamling.config.Settings`, read-only) on the driver, None on the executors: for an
    option whose default is a setting, as the built-in print sink's ``sample_every`` defaults to
    ``print_sink.sample_every``."""

    def require_state(self) -> State:
        if self.state is None:
            raise PluginError(
                f"plugin '{self.plugin_id}' (node '{self.node}'): state is available on the driver only "
                "(open, poll, write, observe, flush, finalize), not on the executors"
            )
        return self.state


OptionsT = TypeVar("OptionsT", bound=Options)


class _Node(ABC, Generic[OptionsT]):
    """What every plugin node class has: its options model, its options, its context and its hooks."""

    options_model: ClassVar[type[Options]] = Options
    """The pydantic model of this node's options; set it to your `Options` subclass."""

    def __init__(self, options: OptionsT, context: Context) -> None:
        self.options = options
        self.context = context

    @property
    def node(self) -> str:
        return self.context.node

    @property
    def state(self) -> State:
        return self.context.require_state()

    @property
    def log(self) -> logging.Logger:
        """This node's logger (``streamling.plugins.<id>``): its lines go wherever the runtime's do, in the same
        text or JSON format, on the driver and in Spark's workers."""
        return logging.getLogger(f"streamling.plugins.{self.context.plugin_id}")

    def warnings(self) -> list[str]:
        """What validation reports and a run logs once at start, never per epoch: an option accepted that changes
        nothing here, say. The runtime puts the node's name in front of each. Like the constructor, no I/O."""
        return []

    def labels(self) -> Mapping[str, str]:
        """Identity labels for telemetry (e.g. ``{"endpoint": ...}``). A YAML ``telemetry.labels`` entry with the
        same key is overridden, with one warning naming both values."""
        return {}

    def open(self) -> None:
        """On the driver, once before data flows; never called by ``--validate``. Open connections here."""

    def close(self) -> None:
        """On the driver at shutdown, also after a failed run (not when this node's own `open` raised)."""


class ArrowSource(_Node[OptionsT]):
    """A streaming source read on the executors by Spark tasks.

    An epoch is the range from the committed position to what `latest_position` returned; the runtime commits
    its end to the state backend after every sink flushed, and replays exactly that range after a crash
    before the commit (so `read` must return the same rows for the same range). `initial_position`,
    `latest_position`, `partitions` and `finalize` run on the driver; `read` in Spark's Python workers."""

    bounded: ClassVar[bool] = False
    """True when the source reaches an end (`finished`); job mode accepts only bounded sources."""
    primary_key: ClassVar[tuple[str, ...]] = ()
    """The columns that identify a row, used when the node's YAML sets no ``primary_key`` (upserts downstream)."""

    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """The schema of every batch `read` yields (``_gs_op`` is added as ``'i'`` when it is not declared)."""

    @abstractmethod
    def initial_position(self) -> Position:
        """Where the first run starts (later runs start at the committed position)."""

    @abstractmethod
    def latest_position(self, start: Position) -> Position:
        """How far data is available after `start`: the next epoch's end. Returning `start` means no data yet.
        Keep epochs to a sensible size: the whole range is one epoch."""

    @abstractmethod
    def read(self, start: Position, end: Position) -> Iterator[pa.RecordBatch]:
        """The rows of [start, end), the same ones every time the range is read."""

    def partitions(self, start: Position, end: Position) -> Sequence[tuple[Position, Position]]:
        """Split [start, end) into ranges read in parallel by separate tasks; one range by default."""
        return [(start, end)]

    def finished(self, position: Position) -> bool:
        """For a `bounded` source: nothing comes after `position`."""
        return False

    def backlog(self, position: Position | None) -> dict[str, int] | None:
        """Records available after `position` (None: before the first commit), for lag monitoring; None when
        unknown."""
        return None

    def rows_between(self, start: Position, end: Position) -> int | None:
        """How many rows the range [start, end) holds, when positions tell (run summaries, progress, live
        sampling); None when unknown (the runtime then counts the rows as Spark reads them, for the run summary).
        Asked once per epoch, when it begins."""
        return None

    def reads(self) -> list[ExternalObject]:
        """The external objects this source reads (its Dagster assets); none: the asset is the node."""
        return []

    def finalize(self, epoch: Epoch) -> None:
        """On the driver, after `epoch`'s end was committed (e.g. acknowledge upstream)."""


class PolledSource(_Node[OptionsT]):
    """A source the driver reads itself, one batch after another: `poll(after)` returns the rows after a
    position and the position after them, or None when there is nothing new. Each batch is one epoch; its
    position is committed after every sink flushed, together with the node's staged `state`."""

    bounded: ClassVar[bool] = False
    primary_key: ClassVar[tuple[str, ...]] = ()
    """The columns that identify a row, used when the node's YAML sets no ``primary_key`` (upserts downstream)."""
    poll_interval_sec: ClassVar[float] = 1.0
    """How long to wait after a `poll` that returned None before polling again."""

    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """The schema of every batch `poll` returns (``_gs_op`` is added as ``'i'`` when it is not declared)."""

    @abstractmethod
    def poll(self, after: Position | None) -> tuple[pa.RecordBatch | pa.Table, Position] | None:
        """The next rows after `after` (None: from the beginning) and the position that follows them; None
        when there is nothing new now. Given the same `after`, return the same rows (a replay after a crash)."""

    def finished(self, position: Position | None) -> bool:
        """For a `bounded` source: nothing comes after `position`."""
        return False

    def backlog(self, position: Position | None) -> dict[str, int] | None:
        return None

    def rows_between(self, start: Position | None, end: Position) -> int | None:
        """How many rows the positions from `start` to `end` cover, when they tell; None when unknown."""
        return None

    def reads(self) -> list[ExternalObject]:
        return []

    def flush(self, epoch: Epoch) -> None:
        """Before `epoch` commits."""

    def finalize(self, epoch: Epoch) -> None:
        """After `epoch` committed."""


class ArrowTransform(_Node[OptionsT]):
    """Record batches in, record batches out, on the executors (Spark ``mapInArrow``). Stateless per batch."""

    @abstractmethod
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema of what `transform` returns for inputs of `input_schema` (which carries ``_gs_op``);
        ``_gs_op`` is added as ``'i'`` when the output does not declare it."""

    @abstractmethod
    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | pa.Table:
        """Map one input batch; may return fewer or more rows, never other columns than declared."""


class ArrowSink(_Node[OptionsT]):
    """A destination that receives an epoch's rows as record batches on the driver, in partition order."""

    @abstractmethod
    def write(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        """Write (or buffer) one batch of `epoch`."""

    def flush(self, epoch: Epoch) -> None:
        """Make everything written for `epoch` durable; the epoch commits only after this returns."""

    def finalize(self, epoch: Epoch) -> None:
        """After `epoch` committed its source position."""

    def writes(self) -> list[ExternalObject]:
        """The external objects this sink writes (its Dagster assets); none: the asset is the node."""
        return []


class SideOutput(_Node[OptionsT]):
    """Observes the batches of the node it reads (``from:``) without changing them, in step with the epoch."""

    @abstractmethod
    def observe(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        """One batch of `epoch` (on the driver)."""

    def flush(self, epoch: Epoch) -> None:
        """Before `epoch` commits."""

    def finalize(self, epoch: Epoch) -> None:
        """After `epoch` committed."""

    def writes(self) -> list[ExternalObject]:
        return []


class Preprocessor(ABC, Generic[OptionsT]):
    """Rewrites a pipeline definition (the parsed YAML mapping) before it is validated."""

    name: ClassVar[str]
    """The id's second half: ``<namespace>.<name>``."""
    options_model: ClassVar[type[Options]] = Options

    def __init__(self, options: OptionsT) -> None:
        self.options = options

    @abstractmethod
    def process(self, definition: dict[str, Any]) -> dict[str, Any]:
        """The definition to use instead (may be `definition`, changed in place)."""


class SqlFunction(ABC):
    """A vectorised scalar SQL function: whole Arrow arrays in, one array out, on the executors.

    Types are the pipeline YAML's column types (``"bigint"``, ``"string"``, ``"decimal(10,2)"``) or Arrow
    types; ``"any"`` takes any type as it comes. Arguments are cast to the declared types; a call with another
    count of arguments, or with an argument that cannot be cast, is reported by ``--validate`` naming the node
    and the function. The last ``len(arguments) - min_arguments`` arguments may be left out (the function
    then gets fewer arrays); with `variadic`, the last declared argument may repeat any number of times."""

    name: ClassVar[str]
    """How SQL calls it (no namespace: SQL function names cannot hold a dot); SQL names are case-insensitive."""
    arguments: ClassVar[Sequence[str | pa.DataType]] = ()
    returns: ClassVar[str | pa.DataType]
    deterministic: ClassVar[bool] = True
    aliases: ClassVar[Sequence[str]] = ()
    """Other names SQL may call it by."""
    min_arguments: ClassVar[int | None] = None
    """The fewest arguments a call may pass (default: all of `arguments`)."""
    variadic: ClassVar[bool] = False

    @classmethod
    def arity(cls) -> tuple[int, int | None]:
        """(fewest, most) arguments a call may pass; most is None when `variadic`."""
        most = len(cls.arguments)
        least = most if cls.min_arguments is None else cls.min_arguments
        return least, None if cls.variadic else most

    @classmethod
    def argument_types(cls, count: int) -> list[str | pa.DataType]:
        """The declared type of each of `count` arguments."""
        declared = list(cls.arguments)
        if count > len(declared) and cls.variadic and declared:
            declared += [declared[-1]] * (count - len(declared))
        return declared[:count]

    @abstractmethod
    def __call__(self, *args: pa.Array) -> pa.Array:
        """One value per row; the result's length must be the arguments' length."""


_KINDS: dict[str, type] = {
    "source": ArrowSource,
    "polled source": PolledSource,
    "transform": ArrowTransform,
    "sink": ArrowSink,
    "side output": SideOutput,
}


@dataclass(frozen=True)
class Plugin:
    """What a plugin module exposes as ``PLUGIN``. Checked when it is built, so a class missing a required
    method fails when the plugin loads, naming the class and the method.

    `operators` maps an operator name to its class (an Arrow-level class above, or a Spark-level `Operator`
    subclass with a ``spec_model``); a name used by both a source and a sink maps to a list of both.
    `side_outputs` maps names to `SideOutput` classes (they may also be listed in `operators`). `functions`
    lists `SqlFunction` classes or instances, `preprocessors` `Preprocessor` classes. `namespace` prefixes
    every id; only the built-ins have none, and their Arrow-level nodes are named in messages as every built-in
    node is (``print sink 'out'``), not as a plugin's (``plugin 'acme.x' (node 'out')``)."""

    namespace: str | None
    operators: Mapping[str, type | Sequence[type]] = field(default_factory=dict)
    functions: Sequence[type[SqlFunction] | SqlFunction] = ()
    preprocessors: Sequence[type[Preprocessor]] = ()
    side_outputs: Mapping[str, type[SideOutput]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.namespace is not None and not NAME.fullmatch(str(self.namespace)):
            raise PluginError(f"plugin namespace {self.namespace!r} must match {NAME.pattern}")
        for name, classes in self.node_classes():
            if not NAME.fullmatch(str(name)):
                raise PluginError(f"plugin operator name {name!r} ({self.id(str(name))}) must match {NAME.pattern}")
            for cls in classes:
                _check_node_class(self.id(name), cls)
        for name, cls in self.side_outputs.items():
            if not (isinstance(cls, type) and issubclass(cls, SideOutput)):
                raise PluginError(f"side output '{self.id(name)}': {_named(cls)} is not a SideOutput subclass")
        for function in self.functions:
            _check_function(function)
        for pre in self.preprocessors:
            if not (isinstance(pre, type) and issubclass(pre, Preprocessor)):
                raise PluginError(f"preprocessor {_named(pre)} is not a Preprocessor subclass")
            _check_name(pre, "preprocessor")
            _check_concrete(pre)

    def id(self, name: str) -> str:
        return f"{self.namespace}.{name}" if self.namespace else name

    def node_classes(self) -> list[tuple[str, list[type]]]:
        """Every node name with its classes (`operators` and `side_outputs` together)."""
        out = []
        for name, value in [*self.operators.items(), *self.side_outputs.items()]:
            classes = list(value) if isinstance(value, list | tuple) else [value]
            out.append((name, classes))
        return out


def kind_of(cls: type) -> str:
    """``source``, ``polled source``, ``transform``, ``sink`` or ``side output`` for an Arrow-level class;
    ``operator`` for a Spark-level one."""
    for kind, base in _KINDS.items():
        if isinstance(cls, type) and issubclass(cls, base):
            return kind
    return "operator"


def _named(obj: object) -> str:
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    return repr(obj)


def _check_concrete(cls: type) -> None:
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise PluginError(
            f"plugin class {_named(cls)} does not implement the required method{plural} {', '.join(missing)}"
        )


def _check_node_class(plugin_id: str, cls: object) -> None:
    if not isinstance(cls, type):
        raise PluginError(f"operator '{plugin_id}': {cls!r} is not a class")
    if kind_of(cls) == "operator":
        operator_base = import_module("streamling.operators").Operator
        if not issubclass(cls, operator_base):
            raise PluginError(
                f"operator '{plugin_id}': {_named(cls)} is neither an ArrowSource, PolledSource, ArrowTransform, "
                "ArrowSink or SideOutput nor an Operator"
            )
        if getattr(cls, "spec_model", None) is None:
            raise PluginError(f"operator '{plugin_id}': {_named(cls)} has no spec_model (its YAML's pydantic model)")
        return
    _check_concrete(cls)
    model = getattr(cls, "options_model", None)
    if not (isinstance(model, type) and issubclass(model, Options)):
        raise PluginError(f"operator '{plugin_id}': {_named(cls)}.options_model must be an Options subclass")


def _check_name(cls: object, what: str) -> None:
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise PluginError(f"{what} {_named(cls)} needs a class attribute 'name' matching {NAME.pattern}, got {name!r}")


def _check_function(function: object) -> None:
    cls = function if isinstance(function, type) else type(function)
    if not issubclass(cls, SqlFunction):
        raise PluginError(f"SQL function {_named(function)} is not a SqlFunction")
    _check_name(cls, "SQL function")
    _check_concrete(cls)
    if not hasattr(cls, "returns"):
        raise PluginError(f"SQL function {_named(cls)} needs a class attribute 'returns' (its result type)")
    params = [
        p
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if isinstance(function, type) and params:
        raise PluginError(f"SQL function {_named(cls)} is listed as a class but its constructor needs arguments")


_LAZY = {
    "AppliedEpoch": "streamling.operators",
    "DriverSink": "streamling.operators",
    "Epoch": "streamling.operators",
    "ExternalObject": "streamling.operators",
    "Operator": "streamling.operators",
    "RunContext": "streamling.operators",
    "Sink": "streamling.operators",
    "Source": "streamling.operators",
    "Transform": "streamling.operators",
    "Written": "streamling.operators",
    "rows_of": "streamling.operators",
}


def __getattr__(name: str) -> Any:
    """The Spark-level operator interface, imported on first use: an Arrow-level plugin's Python workers, which
    import this module, never need it (~9 ms and the telemetry recorders)."""
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'streamling.plugin' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
