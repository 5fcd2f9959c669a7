"""The one retry policy (`streamling.core.retry`) and the loops built on it: which failures are tried again, how long
each wait is, where they give up, ``Retry-After``, and one log line when an outage starts and one when it ends."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import PoolTimeout
from tenacity import retry_if_exception_type

from streamling.core.outage import Outage, wait_out
from streamling.core.retry import RetryPolicy, wait_retry_after
from streamling.errors import LeaseLostError, StreamlingError
from streamling.postgres.connection import with_retries


class Down(ConnectionError):
    def __init__(self, retry_after_sec: float | None = None) -> None:
        super().__init__("down")
        self.retry_after_sec = retry_after_sec


def failing(times: int, exc: type[BaseException] | BaseException = Down, result: Any = "done") -> Any:
    calls: list[int] = []

    def attempt() -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise exc if isinstance(exc, BaseException) else exc()
        return result

    attempt.calls = calls  # type: ignore[attr-defined]
    return attempt


def test_waits_double_up_to_the_ceiling_drawn_from_its_upper_half() -> None:
    policy = RetryPolicy(max_retries=8, retry_timeout_sec=1e9, backoff_sec=1.0, backoff_max_sec=10.0)
    sleeps: list[float] = []
    attempt = failing(100)
    with pytest.raises(Down):
        policy.retrying(retry_if_exception_type(Down), sleep=sleeps.append)(attempt)
    assert len(attempt.calls) == 9  # the first attempt and max_retries more; the last error is raised as it is
    ceilings = [1, 2, 4, 8, 10, 10, 10, 10]
    assert len(sleeps) == len(ceilings)
    for wait, ceiling in zip(sleeps, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling


def test_no_retry_starts_after_the_timeout() -> None:
    policy = RetryPolicy(max_retries=None, retry_timeout_sec=0.0, backoff_sec=1.0, backoff_max_sec=1.0)
    attempt = failing(100)
    with pytest.raises(Down):
        policy.retrying(retry_if_exception_type(Down), sleep=lambda _s: None)(attempt)
    assert len(attempt.calls) == 1  # the first wait would already end after the timeout

    policy = RetryPolicy(max_retries=None, retry_timeout_sec=0.5, backoff_sec=0.2, backoff_max_sec=0.2)
    attempt = failing(100)
    started = time.monotonic()
    with pytest.raises(Down):
        policy.retrying(retry_if_exception_type(Down))(attempt)
    assert time.monotonic() - started < 0.5
    assert 2 <= len(attempt.calls) <= 6


def test_other_errors_are_raised_at_once() -> None:
    policy = RetryPolicy(max_retries=5, retry_timeout_sec=30, backoff_sec=0.01, backoff_max_sec=0.01)
    attempt = failing(100, ValueError("bad row"))
    with pytest.raises(ValueError, match="bad row"):
        policy.retrying(retry_if_exception_type(Down))(attempt)
    assert len(attempt.calls) == 1


def test_retry_after_replaces_the_backoff() -> None:
    policy = RetryPolicy(max_retries=2, retry_timeout_sec=1e9, backoff_sec=0.01, backoff_max_sec=0.01)
    sleeps: list[float] = []
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Down(retry_after_sec=7.0)
        if len(calls) == 2:
            raise Down()
        return "ok"

    retrying = policy.retrying(retry_if_exception_type(Down), wait=wait_retry_after(policy.wait()), sleep=sleeps.append)
    assert retrying(attempt) == "ok"
    assert sleeps[0] == 7.0
    assert 0.005 <= sleeps[1] <= 0.01


def test_a_retry_after_beyond_the_timeout_gives_up_instead_of_waiting() -> None:
    policy = RetryPolicy(max_retries=5, retry_timeout_sec=30, backoff_sec=0.01, backoff_max_sec=0.01)
    sleeps: list[float] = []
    attempt = failing(100, Down(retry_after_sec=60.0))
    retrying = policy.retrying(retry_if_exception_type(Down), wait=wait_retry_after(policy.wait()), sleep=sleeps.append)
    with pytest.raises(Down):
        retrying(attempt)
    assert sleeps == []
    assert len(attempt.calls) == 1


def test_postgres_logs_an_outage_once_when_it_starts_and_once_when_it_ends(caplog) -> None:
    attempt = failing(3, PoolTimeout("couldn't get a connection after 0.01 sec"), "written")
    retries: list[int] = []
    with caplog.at_level(logging.DEBUG, logger="streamling.postgres"):
        assert with_retries(attempt, "postgres sink 'x'", 30, on_retry=lambda: retries.append(1)) == "written"
    assert len(attempt.calls) == 4
    assert len(retries) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings[0] == "postgres sink 'x': couldn't get a connection after 0.01 sec; retrying for up to 30s"
    assert warnings[1].startswith("postgres sink 'x': recovered after 3 failed attempts in ")
    assert len(warnings) == 2
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 2  # the attempts in between


def test_postgres_gives_up_after_its_timeout_with_a_retriable_error(caplog) -> None:
    attempt = failing(100, StreamlingError.retry("postgres sink 'x': cannot connect: Connection refused"))
    with caplog.at_level(logging.WARNING, logger="streamling.postgres"), pytest.raises(StreamlingError) as info:
        with_retries(attempt, "postgres sink 'x'", 0.3)
    assert info.value.retriable
    attempts = len(attempt.calls)
    assert 2 <= attempts
    assert info.value.message == (
        f"postgres sink 'x': still failing after {attempts} attempts: cannot connect: Connection refused"
    )
    assert [r.getMessage() for r in caplog.records] == [
        "postgres sink 'x': cannot connect: Connection refused; retrying for up to 0.3s"
    ]


def test_postgres_does_not_retry_the_datas_errors_or_a_lost_lease() -> None:
    import psycopg

    attempt = failing(100, psycopg.errors.UndefinedColumn('column "y" does not exist'))
    with pytest.raises(StreamlingError) as info:
        with_retries(attempt, "postgres sink 'x'", 30)
    assert info.value.user_facing and info.value.message == "postgres sink 'x': column \"y\" does not exist"
    assert len(attempt.calls) == 1

    attempt = failing(100, LeaseLostError("fenced", retriable=True))
    with pytest.raises(LeaseLostError):
        with_retries(attempt, "postgres sink 'x'", 30)
    assert len(attempt.calls) == 1


def test_wait_out_logs_an_outage_once_when_it_starts_and_once_when_it_ends(caplog) -> None:
    outage = Outage("clickhouse sink 'ch'", "ClickHouse", 300, logging.getLogger("streamling.test"))
    attempt = failing(2, ConnectionRefusedError("Connection refused"))
    with caplog.at_level(logging.DEBUG, logger="streamling.test"):
        assert wait_out(attempt, outage, lambda exc: isinstance(exc, ConnectionError)) == "done"
    assert len(attempt.calls) == 3
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages[0] == (
        "WARNING",
        "clickhouse sink 'ch': ClickHouse unreachable (Connection refused), waiting up to 300 s",
    )
    assert messages[1][0] == "INFO" and messages[1][1].startswith("clickhouse sink 'ch': ClickHouse reachable again")
    assert len(messages) == 2
    assert not outage.ongoing


def test_sqlite_switches_to_wal_once_another_connection_lets_go(tmp_path: Path) -> None:
    from streamling.state.sqlite import SqliteStateBackend

    path = tmp_path / "state.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN IMMEDIATE")  # a writer holds the lock the switch to WAL needs
    other.execute("INSERT INTO t VALUES (1)")
    threading.Timer(0.5, lambda: other.execute("COMMIT")).start()
    started = time.monotonic()
    backend = SqliteStateBackend("ns", str(path))
    try:
        assert time.monotonic() - started >= 0.4  # it waited for the lock rather than failing
        assert backend._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        backend.close()
        other.close()


class FakeProducer:
    def __init__(self, full: int = 0, undelivered: list[int] | None = None) -> None:
        self.full = full
        self.undelivered = undelivered or []
        self.produced: list[dict[str, Any]] = []
        self.polls: list[float] = []
        self.flushes = 0

    def produce(self, topic: str, **message: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.produced.append({"topic": topic, **message})

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        return self.undelivered.pop(0) if self.undelivered else 0


def test_a_full_producer_queue_is_served_then_produced_to() -> None:
    from streamling.kafka.availability import QUEUE_FULL_POLL_SEC, produce_when_room

    producer = FakeProducer(full=3)
    produce_when_room(producer, "t", value=b"v", key=b"k")
    assert producer.polls == [QUEUE_FULL_POLL_SEC] * 3
    assert producer.produced == [{"topic": "t", "value": b"v", "key": b"k"}]


def test_the_kafka_sink_flushes_while_the_broker_is_away_logging_once(caplog) -> None:
    from streamling.kafka.availability import Outage as KafkaOutage
    from streamling.kafka.sink import flush

    producer = FakeProducer(undelivered=[5, 5, 0])
    outage = KafkaOutage("kafka sink 'out'", "broker", 300)
    with caplog.at_level(logging.INFO, logger="streamling.kafka"):
        assert flush(producer, outage, []) == 0
    assert producer.flushes == 3
    assert [r.getMessage() for r in caplog.records] == [
        "kafka sink 'out': broker unreachable (5 messages not delivered after 10 s), waiting up to 300 s"
    ]

    producer = FakeProducer(undelivered=[5, 4, 3, 2])
    assert flush(producer, KafkaOutage("kafka sink 'out'", "broker", 0), []) == 4  # the patience is used up
    assert producer.flushes == 2

    producer = FakeProducer(undelivered=[5, 4])
    assert flush(producer, KafkaOutage("kafka sink 'out'", "broker", 300), ["partition 0: failed"]) == 5
    assert producer.flushes == 1  # a failed delivery fails the epoch: no waiting


def test_a_stuck_kafka_transaction_gets_a_new_producer_until_the_patience_is_used_up(monkeypatch, caplog) -> None:
    from streamling.kafka import transactions
    from streamling.kafka.transactions import EpochTransactions
    from streamling.plugin import Epoch

    monkeypatch.setattr(transactions, "STUCK_TRANSACTION_SEC", 0.1)
    txns = EpochTransactions({}, "t", "app.out", "kafka sink 'out'", patience=30)
    producers = iter(["stuck", "fine"])
    txns._producer = next(producers)
    monkeypatch.setattr(txns, "open", lambda: setattr(txns, "_producer", next(producers)))
    release = threading.Event()
    written: list[str] = []

    def transaction(producer: str) -> None:
        if producer == "stuck":
            release.wait(5)
            return
        written.append(producer)

    epoch = Epoch(source="src", id=4, start={}, end={})
    with caplog.at_level(logging.WARNING, logger="streamling.kafka"):
        txns._bounded(transaction, epoch)
    release.set()
    assert written == ["fine"]
    assert len(caplog.records) == 1
    assert (
        caplog.records[0]
        .getMessage()
        .startswith("kafka sink 'out': the transaction of epoch 4 did not complete within 0 s; a new producer takes")
    )

    txns = EpochTransactions({}, "t", "app.out", "kafka sink 'out'", patience=0)
    txns._producer = "stuck"
    monkeypatch.setattr(txns, "open", lambda: None)
    release.clear()
    with pytest.raises(StreamlingError) as info:
        txns._bounded(transaction, epoch)
    release.set()
    assert info.value.retriable
    assert info.value.message == "kafka sink 'out': the transaction of epoch 4 did not complete within 0 s"
