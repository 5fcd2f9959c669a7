"""The membership UDF: an Arrow UDF, so each call sees a whole batch of rows and asks the backend once
per batch of distinct values instead of once per row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Lookup(Protocol):
    """What a UDF closes over; pickled to the executors, so it must carry no open resources."""

    def contains(self, values: list[str]) -> set[str]:
        """The subset of `values` (distinct, non-null) that is in the table."""
        ...


def membership(values: pa.Array, lookup: Lookup) -> pa.Array:
    """One boolean per row: is the value in the table; for a list, is any element in it. NULL stays NULL."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        flat = _strings(pc.list_flatten(values))
        hits = _present(flat, lookup).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
        any_hit = np.bincount(parents[hits], minlength=len(values)) > 0
        return pa.array(any_hit, mask=values.is_null().to_numpy(zero_copy_only=False), type=pa.bool_())
    strings = _strings(values)
    return pc.if_else(strings.is_null(), pa.scalar(None, pa.bool_()), _present(strings, lookup))


def _strings(values: pa.Array) -> pa.Array:
    return values if pa.types.is_string(values.type) else pc.cast(values, pa.string())


def _present(strings: pa.Array, lookup: Lookup) -> pa.Array:
    """Membership per element (False for nulls), asking `lookup` once for the distinct values."""
    distinct = pc.unique(pc.drop_null(strings)).to_pylist()
    found = lookup.contains(distinct) if distinct else set()
    if not found:
        return pa.array(np.zeros(len(strings), dtype=bool))
    return pc.fill_null(pc.is_in(strings, value_set=pa.array(sorted(found), pa.string())), False)


def register(spark: SparkSession, name: str, lookup: Lookup) -> None:
    """Register `name(value)` → boolean in `spark`'s function registry, evaluated on the executors."""
    from pyspark.sql.functions import arrow_udf

    def check(values: pa.Array) -> pa.Array:
        return membership(values, lookup)

    spark.udf.register(name, arrow_udf(check, "boolean"))
