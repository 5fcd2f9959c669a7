"""The engine's admission of starting runs (`serve/admission.py`): at most `limit` at once, first come first served,
and a run stopped while it waits leaves the queue without holding anyone up."""

from __future__ import annotations

import threading
import time

from streamling.serve.admission import Admission


def wait_for(check, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_runs_start_in_submission_order_at_most_limit_at_once() -> None:
    admission = Admission(2)
    admitted: list[int] = []
    told: dict[int, int] = {}
    lock = threading.Lock()

    def run(i: int) -> None:
        if admission.enter(threading.Event(), lambda waiting: told.__setitem__(i, waiting)):
            with lock:
                admitted.append(i)

    threads = []
    for i in range(6):  # one after another, so the submission order is known
        threads.append(threading.Thread(target=run, args=(i,), daemon=True))
        threads[-1].start()
        wait_for(lambda i=i: len(admitted) + admission.waiting() == i + 1)
    assert admitted == [0, 1]
    assert told == {2: 1, 3: 2, 4: 3, 5: 4}  # how many waited, each one included, when it was queued
    for started in range(3, 7):
        admission.leave()
        wait_for(lambda started=started: len(admitted) == started)
        time.sleep(0.05)  # nobody else slips in
        assert admitted == list(range(started))
    assert admission.waiting() == 0


def test_a_run_stopped_while_queued_leaves_and_the_next_one_starts() -> None:
    admission = Admission(1)
    assert admission.enter(threading.Event())
    stops = [threading.Event(), threading.Event()]
    results: dict[int, bool] = {}
    threads = []
    for i, stop in enumerate(stops):
        threads.append(threading.Thread(target=lambda i=i, stop=stop: results.__setitem__(i, admission.enter(stop))))
        threads[-1].start()
        wait_for(lambda i=i: admission.waiting() == i + 1)
    stops[0].set()  # the head of the queue gives up
    wait_for(lambda: 0 in results)
    assert results == {0: False}
    admission.leave()
    wait_for(lambda: 1 in results)
    assert results == {0: False, 1: True}
    assert admission.waiting() == 0
