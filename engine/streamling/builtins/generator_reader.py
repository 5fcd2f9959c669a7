"""The generator's reading side (`builtins/generator.py` is its node): the rows of offsets ``[start, end)``, the same
for the same offsets, and the stream reader Spark's tasks run. Apart from the node, so that validating a pipeline
(the Dagster code location) imports no Spark; the engine's worker daemon imports this module before it forks."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructField, StructType

from streamling.core.pacing import Pacer
from streamling.core.rows import GS_OP
from streamling.types import parse_type, with_gs_op


def spark_schema(columns: Mapping[str, str]) -> StructType:
    """The generated columns as Spark's schema: ``id`` not nullable, ``_gs_op`` last."""
    fields = [StructField(name, parse_type(t), name != "id") for name, t in columns.items()]
    return with_gs_op(StructType(fields))


NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
MIN_ROWS_PER_PARTITION = 10_000


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-spread hash of each offset."""
    z = values + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _salt(seed: int, column: str) -> np.uint64:
    return np.uint64((seed * 1_000_003 + sum(ord(c) * 31**i for i, c in enumerate(column))) % 2**63)


def generate(config: Mapping[str, Any], start: int, end: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Rows for offsets ``[start, end)`` in batches of at most `batch_rows`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    columns: dict[str, str] = config["columns"]
    schema = to_arrow_schema(spark_schema(columns), timezone="UTC")
    key_space = config.get("key_space")
    delete_every = config.get("delete_every")
    start_us = int(config["start_time_us"])
    step_us = int(config["step_us"])
    seed = int(config.get("seed", 0))
    for lo in range(start, end, batch_rows):
        hi = min(end, lo + batch_rows)
        offsets = np.arange(lo, hi, dtype=np.uint64)
        keys = (offsets % np.uint64(key_space) if key_space else offsets) + np.uint64(1)
        arrays = []
        for field in schema:
            if field.name == GS_OP:
                arrays.append(_ops(offsets, key_space, delete_every))
                continue
            h = _mix(offsets ^ _salt(seed, field.name))
            arrays.append(_column(field, keys, offsets, h, start_us, step_us))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _ops(offsets: np.ndarray, key_space: int | None, delete_every: int | None) -> pa.Array:
    codes = np.zeros(len(offsets), dtype=np.int8)
    if key_space:
        codes[offsets >= np.uint64(key_space)] = 1
    if delete_every:
        codes[(offsets + np.uint64(1)) % np.uint64(delete_every) == 0] = 2
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(["i", "u", "d"])).cast(pa.string())


def _column(
    field: pa.Field, keys: np.ndarray, offsets: np.ndarray, h: np.ndarray, start_us: int, step_us: int
) -> pa.Array:
    t = field.type
    if pa.types.is_integer(t):
        if field.name == "id":
            return pa.array(keys.astype(np.int64)).cast(t)
        bound = {8: 100, 16: 10_000}.get(t.bit_width, 1_000_000)
        return pa.array((h % np.uint64(bound)).astype(np.int64)).cast(t)
    if pa.types.is_floating(t):
        unit = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
        return pa.array(np.round(unit * 2000.0, 2)).cast(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if field.name == "name":
            pool = pa.array(NAMES)
            return pool.take(pa.array((h % np.uint64(len(NAMES))).astype(np.int64))).cast(t)
        pool = pa.array([f"{field.name}_{i}" for i in range(1000)])
        return pool.take(pa.array((h % np.uint64(1000)).astype(np.int64))).cast(t)
    if pa.types.is_boolean(t):
        return pa.array((h & np.uint64(1)).astype(bool))
    if pa.types.is_timestamp(t):
        micros = np.int64(start_us) + offsets.astype(np.int64) * np.int64(step_us)
        return pa.array(micros, type=pa.int64()).cast(t)
    if pa.types.is_date(t):
        days = np.int32(start_us // 86_400_000_000) + (offsets % np.uint64(3650)).astype(np.int32)
        return pa.array(days, type=pa.int32()).cast(t)
    if pa.types.is_decimal(t):
        digits = min(t.precision - t.scale, 18)
        ints = (h % np.uint64(10**digits)).astype(np.int64) if digits > 0 else np.zeros(len(h), np.int64)
        wide = pa.decimal256(76, t.scale) if pa.types.is_decimal256(t) else pa.decimal128(38, t.scale)
        return pa.array(ints).cast(wide).cast(t)
    if pa.types.is_binary(t):
        raw = h.astype(">u8").tobytes()
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(h), [None, pa.py_buffer(raw)])
        return fixed.cast(pa.binary())
    raise TypeError(f"generator cannot produce column '{field.name}' of type {t}")


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


class GeneratorStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.config = json.loads(options["config"])
        self.start = int(options["start"])
        self.parallelism = max(1, int(options.get("parallelism", "1")))
        self.pacer = Pacer.from_options(dict(options))
        self.total = self.config.get("rows")
        self.rate = self.config.get("rows_per_second")
        self.batch_rows = int(self.config["batch_rows"])
        self.started = time.monotonic()
        self.replay_end = json.loads(options.get("replay_end") or "null")

    def initialOffset(self) -> dict:
        return {"offset": self.start}

    def _available(self) -> int:
        if self.rate is None:
            return self.total if self.total is not None else 2**62
        produced = self.start + math.floor(self.rate * (time.monotonic() - self.started))
        return produced if self.total is None else min(self.total, produced)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if self.replay_end is not None:  # the first epoch repeats one a sink already applied
            end, self.replay_end = self.replay_end, None
            return {"offset": int(end["offset"])}
        first = int(start["offset"])
        available = self._available()
        max_rows = getattr(limit, "max_rows", None)
        end = self.pacer.next_end(first, available, at_end=available == self.total, limit=max_rows)
        return {"offset": end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        count = max(1, min(self.parallelism, math.ceil((hi - lo) / MIN_ROWS_PER_PARTITION)))
        bounds = [lo + (hi - lo) * i // count for i in range(count + 1)]
        return [_Range(a, b) for a, b in itertools.pairwise(bounds) if b > a]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        yield from generate(self.config, partition.start, partition.end, self.batch_rows)

    def commit(self, end: dict) -> None:
        """Positions are committed by the runtime to the state backend, not here."""
