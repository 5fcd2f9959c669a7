"""random_source: pseudo-random rows, the same ones for the same seed, read on Spark's executors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pydantic import PositiveInt

from streamling.plugin import ArrowSource, Options

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("alphanumeric_field", pa.string()),
        ("num_field", pa.int64()),
        ("_gs_op", pa.string()),
    ]
)
CHUNK = 65_536
"""Rows per yielded batch: an epoch of any size is generated in bounded memory."""


class RandomSourceOptions(Options):
    max_rows: PositiveInt = 1000
    """Rows in total; the source is bounded, so job mode runs it to the end."""
    record_batch_size: PositiveInt = 1000
    """Rows per epoch."""
    seed: int = 0


class RandomSource(ArrowSource[RandomSourceOptions]):
    options_model = RandomSourceOptions
    bounded = True
    primary_key = ("alphanumeric_field",)

    def output_schema(self) -> pa.Schema:
        return SCHEMA

    def initial_position(self) -> int:
        return 0  # the position is the number of rows produced so far

    def latest_position(self, start: int) -> int:
        return min(start + self.options.record_batch_size, self.options.max_rows)

    def read(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        for lo in range(start, end, CHUNK):
            yield random_rows(self.options.seed, lo, min(lo + CHUNK, end))

    def finished(self, position: int) -> bool:
        return position >= self.options.max_rows

    def backlog(self, position: int | None) -> dict[str, int]:
        return {"rows": self.options.max_rows - (position or 0)}

    def rows_between(self, start: int, end: int) -> int:
        return end - start


def random_rows(seed: int, start: int, end: int) -> pa.RecordBatch:
    """Rows ``start`` to ``end - 1``: each row's values depend only on the seed and its id, so a range reads
    the same whatever the epochs around it (replays after a crash see the same rows)."""
    ids = np.arange(start, end, dtype=np.uint64)
    h = _mix((ids + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed % 2**64))
    h2 = _mix(h ^ np.uint64(0xD6E8FEB86659FD93))
    ops = np.array(["i"] * 6 + ["u"] * 3 + ["d"])[(h2 >> np.uint64(32)) % np.uint64(10)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids.astype(np.int64)),
            _base36(h),
            pa.array((h2 % np.uint64(1000)).astype(np.int64)),
            pa.array(ops),
        ],
        schema=SCHEMA,
    )


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on 64-bit integers (arrays wrap on overflow)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_DIGITS = np.frombuffer(b"0123456789abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


def _base36(values: np.ndarray) -> pa.Array:
    """13 base-36 characters per value; distinct values give distinct strings (36**13 > 2**64)."""
    codes = np.empty((len(values), 13), dtype=np.uint8)
    rest = values.copy()
    for k in range(12, -1, -1):
        codes[:, k] = _DIGITS[rest % np.uint64(36)]
        rest //= np.uint64(36)
    return pa.array(codes.view("S13").ravel()).cast(pa.string())
