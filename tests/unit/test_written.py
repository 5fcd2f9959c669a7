"""Counting a sink's rows by ``_gs_op`` (`Written`) and adding them up in the run summary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from streamling.operators import DriverSink, Epoch, Written, rows_of
from streamling.runtime.executor import PipelineRunner
from streamling.state.memory import InMemoryStateBackend

EPOCH = Epoch("s", 1, {}, {})


def test_counts_each_operation_and_nulls_or_unknown_values_as_inserts() -> None:
    ops = pa.array(["i", "u", "u", "d", None, "x", "d", "d"])
    assert Written.of_ops(ops) == Written(inserts=3, updates=2, deletes=3)
    assert Written.of_ops(ops).rows == 8


@pytest.mark.parametrize(
    "ops",
    [
        pa.chunked_array([pa.array(["i", "d"]), pa.array([], pa.string()), pa.array(["u", "u"])]),
        pa.array(["i", "d", "u", "u"], pa.large_string()),
        pa.DictionaryArray.from_arrays(pa.array([0, 2, 1, 1], pa.int8()), pa.array(["i", "u", "d"])),
    ],
    ids=["chunked", "large_string", "dictionary"],
)
def test_counts_every_arrow_shape_of_the_column(ops: Any) -> None:
    assert Written.of_ops(ops) == Written(inserts=1, updates=2, deletes=1)


def test_empty_and_missing_columns() -> None:
    assert Written.of_ops(pa.array([], pa.string())) == Written()
    assert Written.of(pa.table({"id": [1, 2, 3]})) == Written(inserts=3)
    batch = pa.RecordBatch.from_pydict({"id": [1, 2], "_gs_op": ["d", "u"]})
    assert Written.of(batch) == Written(updates=1, deletes=1)


def test_adds_up_and_reads_as_rows() -> None:
    total = Written(1, 2, 3) + Written(10, 20, 30)
    assert total == Written(11, 22, 33)
    assert total.as_dict() == {"inserts": 11, "updates": 22, "deletes": 33, "unchanged": 0}
    assert rows_of(total) == 66 and rows_of(7) == 7


def test_run_summary_counts_rows_always_and_operations_for_written(make_settings) -> None:
    plan = SimpleNamespace(operators={})  # the runner asks the plan for a sink's own stop limit: none here
    runner = PipelineRunner(plan=plan, settings=make_settings(), spark=None, state=InMemoryStateBackend("app"))  # type: ignore[arg-type]
    runner.count_sink_rows("pg", Written(5, 0, 0))
    runner.count_sink_rows("pg", Written(1, 3, 2))
    runner.count_sink_rows("pg", Written())
    runner.count_sink_rows("legacy", 4)
    runner.count_sink_rows("legacy", 6)
    assert runner.summary.sink_rows == {"pg": 11, "legacy": 10}
    assert runner.summary.sink_ops == {"pg": {"inserts": 6, "updates": 3, "deletes": 2, "unchanged": 0}}


class _Frame:
    """Stands in for a DataFrame: an DriverSink only calls toArrow()."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def toArrow(self) -> pa.Table:
        return self.table


class _Keep(DriverSink[Any]):
    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []

    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        self.batches.append(batch)


def test_arrow_sinks_report_operations_per_batch() -> None:
    first = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "_gs_op": ["i", "i", "u"]})
    second = pa.RecordBatch.from_pydict({"id": [1, 4], "_gs_op": ["d", None]})
    sink = _Keep()
    written = sink.stage(_Frame(pa.Table.from_batches([first, second])), EPOCH)()  # type: ignore[arg-type]
    assert written == Written(inserts=3, updates=1, deletes=1)
    assert len(sink.batches) == 2
    assert sink.write(_Frame(pa.Table.from_batches([first])), EPOCH) == 3  # type: ignore[arg-type]
