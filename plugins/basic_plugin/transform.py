"""filter_transform: keeps the rows of one operation (``_gs_op``), on Spark's executors."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from streamling.plugin import ArrowTransform, Options


class FilterOptions(Options):
    gs_op: Literal["i", "u", "d"] = Field(alias="_gs_op")
    """The operation to keep: i (insert), u (update) or d (delete)."""


class FilterTransform(ArrowTransform[FilterOptions]):
    options_model = FilterOptions

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return input_schema  # same columns, fewer rows

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        ops = pc.fill_null(batch.column("_gs_op"), "i")  # a row without an operation is an insert
        return batch.filter(pc.equal(ops, self.options.gs_op))
