"""What a plugin node needs wherever it runs, in a Spark worker as on the driver: the reference its instance is
rebuilt from (`PluginRef`), its schema in Arrow's and Spark's terms, its batches conformed to that schema, and its
errors named after the plugin and the node. Apart from the adapters (`plugins/adapters.py`), which plan the Spark
side on the driver, so the plugin sources' stream reader (`plugins/source_reader.py`) and the adapters both use it
and neither imports the other.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamling.core.held import HELD
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, StreamlingNodeError, first_line
from streamling.plugin import (
    Context,
)
from streamling.telemetry.logs import configure_worker_logging
from streamling.types import with_gs_op

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.plugins")


def plugin_label(plugin_id: str, node: str, kind: str) -> str:
    """How messages name a plugin's node: ``plugin 'acme.x' (node 'n')``. An id without a namespace is a built-in
    (only the built-ins have none), named as every built-in node is: ``print sink 'n'``."""
    if "." not in plugin_id:
        return f"{plugin_id} {kind} '{node}'"
    return f"plugin '{plugin_id}' (node '{node}')"


@contextmanager
def plugin_errors(label: str) -> Iterator[None]:
    """Anything escaping plugin code, as a user-facing error that names the plugin and the node."""
    try:
        yield
    except StreamlingNodeError:
        raise
    except StreamlingError as exc:
        raise StreamlingNodeError(f"{label}: {exc.message}", user_facing=True) from None
    except Exception as exc:
        raise StreamlingNodeError(f"{label}: {type(exc).__name__}: {first_line(exc)}", user_facing=True) from exc


@dataclass(frozen=True)
class PluginRef:
    """How a Spark worker rebuilds a node's plugin instance: its class by module and name, its options."""

    module: str
    qualname: str
    plugin_id: str
    node: str
    application_id: str
    options: bytes
    """The pickled options model (pickled by reference to its class, like the plugin class)."""
    label: str
    """How messages name the node (`plugin_label`)."""
    archives: tuple[str, ...] = ()
    """Where the driver's machine keeps the shipped plugin archives (`plugins/archives.py`)."""
    log_level: str = "info"
    log_format: str = "text"

    def build(self) -> Any:
        """The instance for this process (built once per process and reused by its later tasks while a run uses it:
        `core/held.py`)."""
        key = (self.module, self.qualname, self.plugin_id, self.node, self.options)
        return HELD.get("plugin instance", key, self._instance)

    def _instance(self) -> Any:
        configure_worker_logging(self.log_level, self.log_format)  # so the plugin's `log` lines show
        with plugin_errors(self.label):
            cls: Any = self._module()
            for part in self.qualname.split("."):
                cls = getattr(cls, part)
            context = Context(self.node, self.plugin_id, self.application_id)
            return cls(pickle.loads(self.options), context)

    def _module(self) -> Any:
        try:
            return import_module(self.module)
        except ModuleNotFoundError as exc:
            # Only the worker that plans a source's epochs (no task context) lacks the shipped archives; a task
            # has them through addPyFile, so there a missing module is an error, also on a one-machine cluster.
            from pyspark import TaskContext

            local = [a for a in self.archives if os.path.exists(a) and a not in sys.path]
            if exc.name != self.module.split(".")[0] or not local or TaskContext.get() is not None:
                raise
        sys.path.extend(local)
        importlib.invalidate_caches()
        return import_module(self.module)


def arrow_schema_of(struct: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")


def spark_schema_of(schema: pa.Schema, label: str) -> StructType:
    """A plugin's declared Arrow schema as Spark's, with ``_gs_op`` appended unless declared."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not isinstance(schema, pa.Schema):
        raise StreamlingError.user(f"{label}: output_schema returned {type(schema).__name__}, not a pyarrow.Schema")
    try:
        return with_gs_op(from_arrow_schema(schema))
    except Exception as exc:
        raise StreamlingError.user(f"{label}: output_schema: {first_line(exc)}") from None


def conform(data: pa.RecordBatch | pa.Table, expected: pa.Schema, label: str, what: str) -> Iterator[pa.RecordBatch]:
    """`data` as batches of exactly `expected` (columns selected and ordered by name, types cast,
    ``_gs_op`` added as ``'i'`` when the plugin did not produce it)."""
    if isinstance(data, pa.Table):
        batches = data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        batches = [data]
    else:
        raise StreamlingError.user(f"{label}: {what} returned {type(data).__name__}, not a pyarrow.RecordBatch")
    for batch in batches:
        names = batch.schema.names
        missing = [f.name for f in expected if f.name not in names and f.name != GS_OP]
        if missing:
            raise StreamlingError.user(f"{label}: {what} returned columns {names}, which lack the declared {missing}")
        columns = []
        for target in expected:
            if target.name not in names:
                columns.append(pa.array(["i"] * batch.num_rows, pa.string()))
                continue
            column = batch.column(target.name)
            if column.type != target.type:
                try:
                    column = column.cast(target.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise StreamlingError.user(
                        f"{label}: {what} returned column '{target.name}' as {column.type}, declared {target.type}: "
                        f"{first_line(exc)}"
                    ) from None
            columns.append(column)
        yield pa.RecordBatch.from_arrays(columns, schema=expected)
