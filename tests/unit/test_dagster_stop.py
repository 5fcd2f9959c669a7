"""The Dagster op's graceful stop waits for the engine to finish, even when the interrupt lands while the op's
thread waits for the engine. `run_pipeline` is replaced by a stand-in that takes a second to stop and then
records its last epoch (a Spark run would make the timing of the interrupt a matter of luck); the interrupt is a
real SIGINT to the main thread, as Dagster's run worker gets it."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import dagster as dg

import streamling_dagster.streaming as streaming
from streamling import RunSummary
from streamling_dagster.pipelines import discover
from streamling_dagster.resources import StreamlingResource
from streamling_dagster.streaming import StreamConfig, run_engine


def test_an_interrupt_while_waiting_for_the_engine_returns_only_after_the_engine_stopped(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "gen.yaml").write_text(
        "sources:\n  g: {type: generator, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n"
    )
    (pf,) = discover(tmp_path)
    settings = StreamlingResource(
        overrides={"state_backend.sqlite.database_path": str(tmp_path / "state.db")}
    ).pipeline_settings(pf)
    finished = threading.Event()

    def slow_to_stop(path, settings, session, *, stop, summary: RunSummary) -> RunSummary:  # type: ignore[no-untyped-def]
        stop.wait(30)
        time.sleep(1.0)  # the in-flight epoch commits
        summary.sink_rows["o"] = 2400
        finished.set()
        return summary

    monkeypatch.setattr(streaming, "run_pipeline", slow_to_stop)
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    interrupt = threading.Timer(0.7, signal.pthread_kill, args=(main, signal.SIGINT))
    context = dg.build_op_context(instance=dg.DagsterInstance.ephemeral())
    events = run_engine(context, pf, settings, object(), StreamConfig(), observe=False, clean_stop=True)
    interrupt.start()
    try:
        while True:
            next(events)
    except StopIteration as end:
        returned, engine_done = end.value, finished.is_set()
    interrupt.join()
    assert engine_done  # the op returned only once the engine had stopped
    assert returned.sink_rows == {"o": 2400}
