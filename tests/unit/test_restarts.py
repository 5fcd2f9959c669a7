"""The restart strategy's policy and loop (`runtime/restarts.py`), without Spark: which failures restart, how long
each backoff is, when it gives up, and that a stop ends a backoff."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from streamling.config.model import RestartStrategySettings
from streamling.errors import InvalidPipelineError, LeaseLostError, StreamlingError
from streamling.runtime.restarts import RestartPolicy, Restarts, restartable


def settings(**fields: object) -> RestartStrategySettings:
    return RestartStrategySettings.model_validate({"initial_backoff_sec": 0.01, "jitter_factor": 0, **fields})


def test_what_restarts_and_what_fails_at_once() -> None:
    assert restartable(StreamlingError.retry("kafka source 's': broker unreachable for 300s"))
    assert restartable(StreamlingError.unavailable("the Schema Registry is unreachable"))
    assert restartable(StreamlingError("kafka source 's': Python worker exited unexpectedly (crashed)"))
    assert restartable(RuntimeError("an engine bug"))
    assert not restartable(StreamlingError.user("sink 'p': value too long for type character varying(3)"))
    assert not restartable(InvalidPipelineError("pipeline 'p' is invalid", ["x"]))
    assert not restartable(LeaseLostError("pipeline 'p': its run lease was not renewed for 30 s", retriable=True))
    assert not restartable(KeyboardInterrupt())


def test_exponential_delay_grows_per_failure_in_the_window_and_resets_once_they_are_old() -> None:
    policy = RestartPolicy(settings(initial_backoff_sec=1, max_backoff_sec=5, failure_window_sec=60))
    delays = []
    for second in (0, 1, 2, 3, 4):
        policy.failed(now=float(second))
        delays.append(policy.delay())
    assert delays == [1, 2, 4, 5, 5]
    policy.failed(now=200.0)  # the earlier failures left the window
    assert (policy.recent, policy.delay()) == (1, 1)


def test_fixed_delay_jitter_and_none() -> None:
    fixed = RestartPolicy(settings(type="fixed-delay", initial_backoff_sec=2))
    for second in range(4):
        fixed.failed(now=float(second))
    assert fixed.delay() == 2
    jittered = RestartPolicy(settings(initial_backoff_sec=10, jitter_factor=0.1))
    jittered.failed(now=0.0)
    assert all(9 <= jittered.delay() <= 11 for _ in range(100))
    off = RestartPolicy(settings(type="none"))
    off.failed(now=0.0)
    assert off.gives_up()
    assert RestartStrategySettings.model_validate({"type": "ExponentialDelay"}).type == "exponential-delay"
    assert RestartStrategySettings.model_validate({"type": "off"}).type == "none"


def test_a_run_restarts_until_an_attempt_succeeds_with_one_warning_per_restart(caplog) -> None:
    attempts: list[int] = []
    restarted: list[str] = []

    def attempt() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise StreamlingError(f"Python worker failed to connect back (attempt {len(attempts)})")
        return "done"

    restarts = Restarts(settings(max_failures=5), "pipeline 'p'", threading.Event(), lambda e: restarted.append(str(e)))
    with caplog.at_level(logging.WARNING, logger="streamling.runtime"):
        assert restarts.run(attempt) == "done"
    assert len(attempts) == 3 and restarts.count == 2
    assert restarted == [
        "Python worker failed to connect back (attempt 1)",
        "Python worker failed to connect back (attempt 2)",
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith("pipeline 'p' failed; restarting from its last committed epochs in 0.0s (restart 1;")
    assert warnings[0].endswith("failure 1 of at most 5 within 600s): Python worker failed to connect back (attempt 1)")


def test_it_gives_up_after_max_failures_within_the_window_with_the_last_error() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise StreamlingError.retry(f"outage {len(calls)}")

    restarts = Restarts(settings(max_failures=2), "pipeline 'p'", threading.Event())
    with pytest.raises(StreamlingError, match=r"^outage 3$"):
        restarts.run(attempt)
    assert len(calls) == 3 and restarts.count == 2


def test_the_users_own_error_fails_at_once() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise StreamlingError.user("transform 't': [UNRESOLVED_COLUMN] nope")

    with pytest.raises(StreamlingError, match="UNRESOLVED_COLUMN"):
        Restarts(settings(), "pipeline 'p'", threading.Event()).run(attempt)
    assert calls == [1]


def test_a_stop_during_the_backoff_ends_it_and_the_next_attempt_sees_the_stop() -> None:
    stop = threading.Event()
    seen: list[bool] = []

    def attempt() -> str:
        seen.append(stop.is_set())
        if not stop.is_set():
            threading.Timer(0.2, stop.set).start()
            raise StreamlingError.retry("down")
        return "stopped"

    began = time.monotonic()
    assert Restarts(settings(initial_backoff_sec=30), "p", stop).run(attempt) == "stopped"
    assert seen == [False, True]
    assert time.monotonic() - began < 5  # not the 30 s backoff
