"""The generator is deterministic per offset, and the pacer decides when epochs close."""

from __future__ import annotations

import time

import pyarrow as pa

from streamling.builtins.generator import GeneratorSourceSpec
from streamling.builtins.generator_reader import generate
from streamling.core.pacing import FIRST_EPOCH_ROWS, Pacer


def config(**spec: object) -> dict:
    from streamling.builtins.generator import GeneratorSource
    from streamling.config import load_settings

    settings = load_settings(config="/nonexistent/x", environ={})
    return GeneratorSource("g", GeneratorSourceSpec(type="generator", **spec), settings).reader_config()


def table(cfg: dict, start: int, end: int, batch: int = 1000) -> pa.Table:
    return pa.Table.from_batches(list(generate(cfg, start, end, batch)))


def test_same_offsets_give_same_rows_whatever_the_split() -> None:
    cfg = config(rows=100)
    whole = table(cfg, 0, 100)
    parts = pa.concat_tables([table(cfg, 0, 37, 5), table(cfg, 37, 100, 11)])
    assert whole.equals(parts)
    assert whole.column("id").to_pylist() == list(range(1, 101))
    assert whole.schema.names == ["id", "amount", "name", "created_at", "_gs_op"]
    assert set(whole.column("_gs_op").to_pylist()) == {"i"}


def test_key_space_and_delete_every_produce_upserts() -> None:
    rows = table(config(rows=10, key_space=4, delete_every=5), 0, 10).select(["id", "_gs_op"]).to_pylist()
    assert [(r["id"], r["_gs_op"]) for r in rows] == [
        (1, "i"), (2, "i"), (3, "i"), (4, "i"), (1, "d"), (2, "u"), (3, "u"), (4, "u"), (1, "u"), (2, "d"),
    ]  # fmt: skip


def test_declared_schema_types() -> None:
    cfg = config(rows=3, schema={"id": "int", "price": "decimal(20,4)", "ok": "boolean", "day": "date", "b": "bytea"})
    t = table(cfg, 0, 3)
    assert [str(f.type) for f in t.schema] == [
        "int32",
        "decimal128(20, 4)",
        "bool",
        "date32[day]",
        "binary",
        "string",
    ]


def test_pacer_offers_full_batches_at_once_and_partials_after_the_interval() -> None:
    pacer = Pacer(max_rows=100, interval_sec=0.2)
    assert pacer.next_end(0, 10) == 10  # the first epoch closes immediately
    assert pacer.next_end(10, 50) == 10  # too soon, too few
    assert pacer.next_end(10, 500) == 110  # a full batch is due at once
    assert pacer.next_end(110, 111, at_end=True) == 111  # the end of a bounded source
    time.sleep(0.25)
    assert pacer.next_end(111, 150) == 150
    assert pacer.next_end(150, 150) == 150  # nothing pending
    assert pacer.next_end(150, 1000, limit=20) == 170  # Spark's read limit wins


def test_a_runs_first_epoch_takes_a_short_slice_of_a_backlog_then_full_ones() -> None:
    pacer = Pacer.from_options(Pacer.options(50_000, 5, FIRST_EPOCH_ROWS))
    assert pacer.take(120_000) == FIRST_EPOCH_ROWS == 10_000
    assert pacer.take(110_000) == 50_000
    small = Pacer(max_rows=700, interval_sec=5, first_rows=FIRST_EPOCH_ROWS)  # below the slice: as configured
    assert small.take(5_000) == 700
    whole = Pacer.from_options(Pacer.options(50_000, 5))  # the generator's: no slice
    assert whole.take(120_000) == 50_000
