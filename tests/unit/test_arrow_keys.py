"""Rows by key without pyarrow's query engine (`streamling.arrow_keys`): the same answers as a plain-Python reading
of the rows, for one or several keys of the types a primary key takes, nulls included; and a sink's write
preparation in a new process loads neither pandas nor pyarrow's datasets."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys
import textwrap

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamling.arrow_keys import int64_array, int64_values, key_codes, last_rows, occurrences
from streamling.postgres.writer import merge_rounds

KEY_VALUES = {
    "i": (pa.int64(), st.integers(-3, 3)),
    "s": (pa.string(), st.sampled_from(["", "a", "b", "é"])),
    "d": (pa.decimal128(9, 2), st.sampled_from([decimal.Decimal("1.10"), decimal.Decimal("-2.00")])),
    "t": (
        pa.timestamp("us", "UTC"),
        st.sampled_from([dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(1970, 1, 1, tzinfo=dt.UTC)]),
    ),
    "b": (pa.bool_(), st.booleans()),
}


@st.composite
def keyed_tables(draw: st.DrawFn) -> tuple[pa.Table, tuple[str, ...]]:
    keys = tuple(draw(st.lists(st.sampled_from(sorted(KEY_VALUES)), min_size=1, max_size=3, unique=True)))
    rows = draw(st.integers(0, 40))
    columns = {}
    for key in keys:
        arrow, values = KEY_VALUES[key]
        columns[key] = pa.array(draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), arrow)
    columns["row"] = pa.array(range(rows), pa.int64())
    table = pa.table(columns)
    split = draw(st.integers(0, rows))  # several chunks, as Spark's batches arrive
    return pa.concat_tables([table.slice(0, split), table.slice(split)]), keys


def _reference(table: pa.Table, keys: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Each row's occurrence of its key, and every key's last row, read row by row."""
    seen: dict[tuple, int] = {}
    last: dict[tuple, int] = {}
    ranks = []
    for index, row in enumerate(table.select(list(keys)).to_pylist()):
        key = tuple(row[k] for k in keys)
        ranks.append(seen.get(key, 0))
        seen[key] = ranks[-1] + 1
        last[key] = index
    return ranks, sorted(last.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_tables())
def test_occurrences_and_last_rows_match_a_row_by_row_reading(case: tuple[pa.Table, tuple[str, ...]]) -> None:
    table, keys = case
    ranks, last = _reference(table, keys)
    codes = key_codes(table, keys)
    assert occurrences(codes).tolist() == ranks
    assert last_rows(codes).tolist() == last
    rounds = merge_rounds(table, keys, deduplicate=False)
    expected_rounds = [[i for i, r in enumerate(ranks) if r == n] for n in range(max(ranks, default=-1) + 1)]
    assert [r.column("row").to_pylist() for r in rounds] == expected_rounds
    deduplicated = merge_rounds(table, keys, deduplicate=True)
    assert [r.column("row").to_pylist() for r in deduplicated] == ([last] if table.num_rows else [])


def test_int64_arrays_round_trip_over_numpy_memory() -> None:
    array = pa.array([5, -1, 7], pa.int64()).slice(1)
    assert int64_values(array).tolist() == [-1, 7]
    assert int64_array(int64_values(pa.array([1, 2], pa.int32()))).to_pylist() == [1, 2]


def test_preparing_a_write_loads_neither_pandas_nor_pyarrows_datasets() -> None:
    """pyarrow imports pandas from `pa.array` on NumPy or Python values, `Array.to_numpy` and Python scalars in
    compute calls, and its query engine imports it with the datasets: a run's first write paid 0.2-0.3 s for it."""
    script = textwrap.dedent("""
        import sys
        import pyarrow as pa
        from streamling.clickhouse.sink import _last_per_key
        from streamling.postgres.types import Column
        from streamling.postgres.writer import merge_rounds, to_csv
        ids = pa.Array.from_buffers(pa.int64(), 3, [None, pa.py_buffer(bytes(range(24)))])
        table = pa.Table.from_arrays([ids, ids.cast(pa.string()), ids.cast(pa.string())], ["id", "v", "_gs_op"])
        for deduplicate in (True, False):
            merge_rounds(table, ("id", "v"), deduplicate)
        _last_per_key(table, ["v"], version="id")
        to_csv(table, (Column("id", pa.int64(), "bigint"), Column("v", pa.string(), "text")))
        print(sorted(m for m in ("pandas", "pyarrow.dataset", "pyarrow.acero") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
