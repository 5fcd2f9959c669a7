"""Fenced commits against a real Postgres: the state backend cut off in the middle of a commit whose lease expires
before its retry lands, and a sink's progress row that a run of an older lease generation may not write over."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from streamling.config.model import PostgresConnectionSettings
from streamling.errors import LeaseLostError
from streamling.operators import Epoch
from streamling.postgres import progress
from streamling.postgres.connection import transact
from streamling.state import Fence
from streamling.state.postgres import PostgresStateBackend

PREFIX = "STREAMLING__STATE_BACKEND__POSTGRES__"


def _settings(postgres_env: dict[str, str], **extra: object) -> PostgresConnectionSettings:
    fields = ("host", "port", "user", "password", "database")
    return PostgresConnectionSettings(**{f: postgres_env[PREFIX + f.upper()] for f in fields}, **extra)


def test_a_commit_cut_off_mid_flight_is_refused_when_its_retry_lands_after_the_lease_expired(
    postgres_env, pg_connect
) -> None:
    namespace = f"fence_{uuid.uuid4().hex[:8]}"
    settings = _settings(postgres_env, retry_timeout_sec=60)
    holder, taker = PostgresStateBackend(namespace, settings), PostgresStateBackend(namespace, settings)
    assert holder.acquire_lease("pipeline:p", "run-a", {}, ttl_sec=2) is None
    fence = Fence("pipeline:p", "run-a", holder.lease_generation("pipeline:p", "run-a") or 0)
    holder.put_many({"src:t:0": {"offset": 10}}, fence=fence)
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            holder.put_many({"src:t:0": {"offset": 20}}, fence=fence)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with pg_connect() as blocker:
        blocker.execute("BEGIN")  # holds the position's row: the commit waits in flight, past its lease check
        blocker.execute(
            "SELECT 1 FROM streamling.state WHERE namespace = %s AND key = 'src:t:0' FOR UPDATE", (namespace,)
        )
        thread = threading.Thread(target=commit)
        thread.start()

        def in_flight() -> list[int]:
            with pg_connect() as admin:
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'INSERT INTO streamling.state%%'"
                ).fetchall()
            return [r[0] for r in rows]

        deadline = time.monotonic() + 30
        while not (pids := in_flight()):
            assert time.monotonic() < deadline, "the commit never reached the row"
            time.sleep(0.05)
        time.sleep(2.5)  # the lease (2 s) runs out while the commit waits
        with pg_connect() as admin:  # the state backend's connection is cut off mid-commit
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        thread.join(60)
        blocker.execute("ROLLBACK")
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
    assert holder.get("src:t:0") == {"offset": 10}
    assert taker.acquire_lease("pipeline:p", "run-b", {}, ttl_sec=30) is None
    assert taker.lease_generation("pipeline:p", "run-b") == fence.generation + 1
    for backend in (holder, taker):
        backend.close()


def test_a_sinks_progress_row_refuses_a_run_of_an_older_lease_generation(postgres_env, pg_connect) -> None:
    schema = f"g_{uuid.uuid4().hex[:8]}"
    settings = _settings(postgres_env)
    key = progress.ProgressKey(schema, "app", "out")
    newer = Epoch("src", 7, {"0": 60}, {"0": 70}, generation=3)
    older = Epoch("src", 5, {"0": 40}, {"0": 50}, generation=2)
    try:
        transact(settings, "setup", lambda cur: cur.execute(f'CREATE SCHEMA "{schema}"'))
        transact(settings, "setup", lambda cur: cur.execute(progress.ddl(schema)))
        transact(settings, "newer", lambda cur: progress.record(cur, key, newer, 0, 1, 10))

        def late_write(cur) -> None:  # the epoch's rows, then its progress row, in one transaction
            cur.execute(f'CREATE TABLE "{schema}".rows (id int)')
            cur.execute(f'INSERT INTO "{schema}".rows VALUES (1)')
            progress.record(cur, key, older, 0, 1, 10)

        with pytest.raises(LeaseLostError) as refused:
            transact(settings, "postgres sink 'out'", late_write)
        assert refused.value.message == (
            "epoch 5 of source 'src' was refused: a run holding a later lease of the pipeline (generation > 2) "
            f"has written to {schema}._streamling_progress"
        )
        with pg_connect() as conn:
            row = conn.execute(
                f'SELECT epoch, generation FROM "{schema}"._streamling_progress WHERE sink = %s', ("out",)
            ).fetchone()
            rows_table = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".rows',)).fetchone()[0]
        assert row == (7, 3)
        assert rows_table is None  # rolled back with the refused progress row
        again = Epoch("src", 8, {"0": 70}, {"0": 80}, generation=3)  # the same generation goes on
        transact(settings, "same", lambda cur: progress.record(cur, key, again, 0, 1, 10))
    finally:
        with pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
