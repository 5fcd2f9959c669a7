"""How read tasks are dealt to a cluster's executors (`spark/locality.choose`)."""

from __future__ import annotations

from collections import Counter

from streamling.spark.locality import choose

EXECUTORS = [("10", "b"), ("2", "a"), ("0", "a")]


def test_consecutive_partitions_spread_evenly_and_keep_their_executor() -> None:
    keys = [("orders", p) for p in range(12)]
    chosen = choose(keys, EXECUTORS)
    assert Counter(chosen) == {e: 4 for e in EXECUTORS}
    # Whatever subset of partitions has data in an epoch, each keeps its executor; the order of the list is irrelevant.
    assert choose(keys[5:9], list(reversed(EXECUTORS))) == chosen[5:9]
    # Executors are dealt in the order of their numeric ids: 0, 2, 10, 0, …
    ids = [executor for executor, _ in chosen]
    start = ["0", "2", "10"].index(ids[0])
    assert ids == [["0", "2", "10"][(start + p) % 3] for p in range(12)]
    # Another topic starts elsewhere in the round, or the first partition of every topic would share one executor.
    assert {choose([(f"t{n}", 0)], EXECUTORS)[0] for n in range(20)} == set(EXECUTORS)


def test_a_lost_executor_leaves_the_others_with_all_partitions() -> None:
    keys = [("orders", p) for p in range(6)]
    survivors = [e for e in EXECUTORS if e[0] != "2"]
    assert set(choose(keys, survivors)) == set(survivors)
    assert Counter(choose(keys, survivors)) == {e: 3 for e in survivors}


def test_a_split_backlog_spreads_its_pieces_and_the_first_keeps_the_partitions_executor() -> None:
    from streamling.kafka.source.reader import Range

    pieces = [Range(3, 0, 10, "orders", piece) for piece in range(4)]
    assert [r.locality_key for r in pieces] == [("orders", 3), ("orders", 4), ("orders", 5), ("orders", 6)]
    chosen = choose([r.locality_key for r in pieces], EXECUTORS)
    assert chosen[0] == choose([("orders", 3)], EXECUTORS)[0] and len(set(chosen[:3])) == 3
