"""Clients held per run (`core/held.py`), without Spark: shared by the runs that ask for the same key, closed
when the last of them is retired (on the driver) or when a task carries the retirement (in a worker), and closed
after `IDLE_SEC` unused in a worker."""

from __future__ import annotations

import pytest

from streamling.core import held
from streamling.core.held import PROCESS, Held
from streamling.core.scope import RUN_SCOPE


class Client:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def as_run(run: str | None, cache: Held, key: str) -> Client:
    token = RUN_SCOPE.set(run)
    try:
        return cache.get("kafka consumer", key, lambda: Client(key), lambda c: c.close())
    finally:
        RUN_SCOPE.reset(token)


def test_runs_share_a_client_and_the_last_one_to_end_closes_it() -> None:
    cache = Held()
    a = as_run("run-a", cache, "brokers=x")
    assert as_run("run-b", cache, "brokers=x") is a
    other = as_run("run-b", cache, "brokers=y")
    assert cache.retire("run-a") == 0 and not a.closed  # run-b still uses it
    assert cache.retire("run-b") == 2 and a.closed and other.closed
    assert cache.count() == 0
    assert list(cache.retired) == ["run-a", "run-b"]
    fresh = as_run("run-c", cache, "brokers=x")
    assert fresh is not a and not fresh.closed


def test_what_is_held_outside_a_run_is_never_retired() -> None:
    cache = Held()
    client = as_run(None, cache, "k")
    assert cache.retire(PROCESS) == 0 and not client.closed
    assert cache.count("kafka consumer") == 1


class FakeTask:
    def __init__(self, run: str, retired: str = "") -> None:
        self.properties = {held.RUN_PROPERTY: run, held.RETIRED_PROPERTY: retired}

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)


def test_a_task_retires_the_runs_it_carries_and_closes_idle_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mocked: pyspark's TaskContext (only a Spark task has one); the rest is the real cache."""
    from pyspark import TaskContext

    cache = Held()
    task: list[FakeTask] = [FakeTask("run-a")]
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: task[0]))
    a = cache.get("kafka producer", "p", lambda: Client("p"), lambda c: c.close())
    task[0] = FakeTask("run-b", retired="run-a")
    b = cache.get("kafka producer", "q", lambda: Client("q"), lambda c: c.close())
    assert a.closed and not b.closed  # run-a ended: its producer went when run-b's task started
    monkeypatch.setattr(held, "IDLE_SEC", 0.0)
    c = cache.get("postgres pool", "r", lambda: Client("r"), lambda x: x.close())
    assert b.closed and not c.closed  # unused since: closed at a task's start
