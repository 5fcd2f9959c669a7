"""The first epoch of a query is small, so a start that meets a backlog shows rows early; the rest run full size."""

from __future__ import annotations

from streamling.runtime.pacing import Pacer, first_epoch_rows


def test_the_first_epoch_takes_a_fiftieth_then_epochs_run_full_size() -> None:
    pacer = Pacer(max_rows=250_000, interval_sec=5.0)
    assert pacer.take(1_000_000) == 5_000
    assert pacer.take(995_000) == 250_000
    assert pacer.take(745_000) == 250_000


def test_the_first_epoch_is_never_under_five_thousand_rows_nor_over_an_epoch() -> None:
    assert first_epoch_rows(250_000) == 5_000
    assert first_epoch_rows(1_000_000) == 20_000
    assert first_epoch_rows(20_000) == 5_000
    assert first_epoch_rows(3_000) == 3_000
    assert first_epoch_rows(400) == 400
    small = Pacer(max_rows=400, interval_sec=5.0)
    assert [small.take(1_000), small.take(600)] == [400, 400]


def test_a_first_epoch_smaller_than_the_cap_ends_the_ramp_and_a_limit_still_applies() -> None:
    pacer = Pacer(max_rows=250_000, interval_sec=0.0)
    assert pacer.take(300, at_end=True) == 300
    assert pacer.take(600_000, limit=100_000) == 100_000
    assert Pacer(max_rows=250_000, interval_sec=5.0).take(600_000, limit=2_000) == 2_000
