"""Rows by key in an Arrow table (each key's last row, each row's occurrence of its key) for the upserting sinks.

Hash-encoded keys and a stable NumPy sort rather than `Table.group_by`: the group-by lives in pyarrow's query
engine, whose import loads pyarrow's datasets and pandas (0.3 s), and a run's first write paid it before its first
row reached the table. Arrays are built over NumPy's memory: `pa.array` on a NumPy array asks pyarrow's pandas
shim whether it is categorical, and `Array.to_numpy` consults it too: either imports pandas as well.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def int64_array(values: np.ndarray) -> pa.Array:
    """`values` as an Arrow int64 array (no copy when they are contiguous int64 already)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def key_codes(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """One int64 per row, equal for rows whose `keys` are equal (a null equals a null), dense from 0."""
    codes: np.ndarray | None = None
    for key in keys:
        column, size = _encoded(table.column(key).combine_chunks())
        if codes is None:
            codes = column
        else:  # below len(rows) ** 2: no overflow; encoded again to stay dense
            codes, _ = _encoded(int64_array(codes * size + column))
    return codes if codes is not None else np.zeros(table.num_rows, dtype=np.int64)


def _encoded(values: pa.Array) -> tuple[np.ndarray, int]:
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    return int64_values(encoded.indices), len(encoded.dictionary)


def int64_values(array: pa.Array) -> np.ndarray:
    """A null-free integer array's values as NumPy int64 (read-only when no cast was needed); `to_numpy` would
    consult the pandas shim too."""
    if array.type != pa.int64():
        array = pc.cast(array, pa.int64())
    return np.frombuffer(array.buffers()[1], dtype=np.int64, count=len(array), offset=array.offset * 8)


def last_rows(codes: np.ndarray) -> np.ndarray:
    """The index of every key's last row, in input order."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    order, starts = _runs(codes)
    ends = np.append(starts[1:], True)
    return np.sort(order[ends])


def occurrences(codes: np.ndarray) -> np.ndarray:
    """Each row's occurrence of its key: 0 for the key's first row, 1 for its second, and so on."""
    order, starts = _runs(codes)
    positions = np.arange(len(codes))
    ranked = positions - np.maximum.accumulate(np.where(starts, positions, 0))
    rank = np.empty(len(codes), dtype=np.int64)
    rank[order] = ranked
    return rank


def _runs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by key, stably (input order within a key), and where each key's run starts."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.empty(len(codes), dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return order, starts
