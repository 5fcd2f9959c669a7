"""The per-process Postgres connection pools (`streamling.postgres.connection`) against the real server: a connection
belongs to one thread at a time, two threads write two tables at once, a busy pool or a lost connection is waited
out, sessions carry the configured time zone and statement timeout, and a forked child never uses its parent's
pool."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pyarrow as pa
import pytest

from streamling.config.model import PostgresSinkSettings
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.operators import Epoch
from streamling.postgres import catalog, progress
from streamling.postgres.connection import POOL_MAX_SIZE, connection, pool, transact, with_retries
from streamling.postgres.progress import ProgressKey
from streamling.postgres.types import Column
from streamling.postgres.writer import WritePlan, write_stream

pytestmark = pytest.mark.integration

EPOCHS = 40
ROWS_PER_EPOCH = 5


@pytest.fixture
def settings(postgres_env) -> PostgresSinkSettings:
    prefix = "STREAMLING__POSTGRES_SINK__"
    return PostgresSinkSettings.model_validate(
        {
            "host": postgres_env[prefix + "HOST"],
            "port": postgres_env[prefix + "PORT"],
            "user": postgres_env[prefix + "USER"],
            "pass": postgres_env[prefix + "PASS"],
            "db": postgres_env[prefix + "DB"],
            "retry_timeout_sec": 30,
        }
    )


@pytest.fixture
def schema(pg_connect):
    name = f"pool_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def plan_for(settings: PostgresSinkSettings, schema: str, table: str) -> WritePlan:
    columns = (Column("id", pa.int64(), "bigint"), Column("name", pa.string(), "text"))

    def create(cur) -> None:
        catalog.lock_ddl(cur, schema, table)
        catalog.create_table(cur, schema, table, [(c.name, c.pg) for c in columns], ["id"])
        cur.execute(progress.ddl(schema))

    transact(settings, "test", create)
    return WritePlan(
        label=f"postgres sink '{table}'",
        connection=settings,
        schema=schema,
        table=table,
        columns=columns,
        staging_types=("bigint", "text"),
        keys=("id",),
        mode="upsert",
        on_conflict="update",
        update_where=(),
        deduplicate=True,
        batch_size=None,
        progress=ProgressKey(schema, "pool_test", table),
    )


def epoch_rows(epoch: int) -> pa.Table:
    ids = list(range((epoch - 1) * ROWS_PER_EPOCH + 1, epoch * ROWS_PER_EPOCH + 1))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], GS_OP: ["i"] * len(ids)})


def test_two_threads_write_two_tables_through_the_pool_at_once(settings, schema, pg_connect) -> None:
    plans = [plan_for(settings, schema, table) for table in ("a", "b")]
    start = threading.Barrier(len(plans))
    errors: list[BaseException] = []

    def writer(plan: WritePlan) -> None:
        try:
            start.wait()
            for epoch in range(1, EPOCHS + 1):
                offsets = ({"offset": (epoch - 1) * ROWS_PER_EPOCH}, {"offset": epoch * ROWS_PER_EPOCH})
                write_stream(epoch_rows(epoch), plan, Epoch(plan.table, epoch, *offsets))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(plan,)) for plan in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    with pg_connect() as conn:
        for table in ("a", "b"):
            count, low, high = conn.execute(f'SELECT count(*), min(id), max(id) FROM "{schema}"."{table}"').fetchone()
            assert (count, low, high) == (EPOCHS * ROWS_PER_EPOCH, 1, EPOCHS * ROWS_PER_EPOCH)
        recorded = conn.execute(f'SELECT sink, epoch FROM "{schema}"._streamling_progress ORDER BY sink').fetchall()
    assert recorded == [("a", EPOCHS), ("b", EPOCHS)]


def test_a_connection_is_never_in_two_threads_at_once(settings) -> None:
    in_use: set[int] = set()
    lock = threading.Lock()
    clashes: list[int] = []
    errors: list[BaseException] = []

    def user() -> None:
        try:
            for _ in range(20):
                with connection(settings, "test") as conn:
                    backend = conn.info.backend_pid
                    with lock:
                        if backend in in_use:
                            clashes.append(backend)
                        in_use.add(backend)
                    conn.execute("SELECT pg_sleep(0.005)")
                    with lock:
                        in_use.discard(backend)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=user) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert (errors, clashes) == ([], [])


def test_waiting_for_a_busy_pool_is_transient_and_retried_until_a_connection_is_free(settings) -> None:
    busy = settings.model_copy(update={"pool_acquire_timeout_secs": 0.3})
    shared = pool(busy)
    held = [shared.getconn(timeout=30) for _ in range(POOL_MAX_SIZE)]
    with pytest.raises(StreamlingError) as caught, connection(busy, "postgres sink 'x'"):
        pass
    assert caught.value.retriable
    assert str(caught.value) == "postgres sink 'x': no free connection within 0.3s"

    def release() -> None:
        for conn in held:
            shared.putconn(conn)

    released = threading.Timer(1.0, release)
    released.start()

    def query() -> int:
        with connection(busy, "postgres sink 'x'") as conn:
            return conn.execute("SELECT 1").fetchone()[0]

    started = time.monotonic()
    assert with_retries(query, "postgres sink 'x'", 30) == 1
    assert time.monotonic() - started >= 0.9  # it waited for the release, retrying
    released.join()


def test_a_connection_the_server_ended_is_replaced_on_checkout(settings, pg_connect) -> None:
    with connection(settings, "test") as conn:
        ended = conn.info.backend_pid
    with pg_connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (ended,))
    with connection(settings, "test") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.info.backend_pid != ended


def test_sessions_run_in_utc_with_the_configured_statement_timeout(settings) -> None:
    with connection(settings, "test") as conn:
        assert conn.execute("SELECT current_setting('TimeZone'), current_setting('statement_timeout')").fetchone() == (
            "UTC",
            "0",
        )
    limited = settings.model_copy(update={"statement_timeout_secs": 1.5})
    with connection(limited, "test") as conn:
        assert conn.execute("SELECT current_setting('statement_timeout')").fetchone() == ("1500ms",)
    with pytest.raises(StreamlingError) as caught:
        transact(limited, "postgres sink 'slow'", lambda cur: cur.execute("SELECT pg_sleep(5)"))
    assert str(caught.value) == "postgres sink 'slow': canceling statement due to statement timeout"


def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_connection_alone(settings) -> None:
    settings = settings.model_copy(update={"pool_acquire_timeout_secs": 7.5})  # a pool of this test's own
    with connection(settings, "test") as conn:
        parent_backend = conn.info.backend_pid
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: a Spark Python worker is forked like this
        code = 1
        try:
            with connection(settings, "test") as conn:
                os.write(write, str(conn.info.backend_pid).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(child, 0)
    child_backend = int(os.read(read, 64).decode() or 0)
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_backend not in (0, parent_backend)
    with connection(settings, "test") as conn:  # the same connection, still open (the checkout's check passed)
        assert conn.info.backend_pid == parent_backend
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_pool_idle_timeout_closes_connections_left_unused(settings) -> None:
    """``postgres_sink.pool_idle_timeout_secs`` is the pool's ``max_idle``: an idle pipeline gives its sessions
    back to the server; with the original's default (600 s) the connection stays."""
    idle = settings.model_copy(update={"pool_idle_timeout_secs": 1.0, "pool_max_lifetime_secs": 120.0})
    kept = settings.model_copy(update={"pool_acquire_timeout_secs": 8.5})  # a pool of this test's own
    for configured in (idle, kept):
        with connection(configured, "test") as conn:
            conn.execute("SELECT 1")
    assert (pool(idle).max_idle, pool(idle).max_lifetime) == (1.0, 120.0)
    assert (pool(kept).max_idle, pool(kept).max_lifetime) == (600.0, 1800.0)
    deadline = time.monotonic() + 15
    while pool(idle).get_stats()["pool_size"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pool(idle).get_stats()["pool_size"] == 0
    assert pool(kept).get_stats()["pool_size"] == 1


def test_pool_max_lifetime_replaces_an_old_connection(settings) -> None:
    """``postgres_sink.pool_max_lifetime_secs`` is the pool's ``max_lifetime``: a connection older than it is
    closed when it comes back, and the next checkout gets a new session."""
    aged = settings.model_copy(update={"pool_max_lifetime_secs": 1.0, "pool_acquire_timeout_secs": 9.5})
    with connection(aged, "test") as conn:
        first = conn.info.backend_pid
        time.sleep(1.5)  # older than its lifetime when it is returned
    with connection(aged, "test") as conn:
        assert conn.info.backend_pid != first


def test_max_connections_is_the_pool_s_size(settings) -> None:
    """The original's ``max_connections`` (state backend, dynamic tables): the most connections one process's pool
    holds; a third thread waits for one of the two to come back."""
    capped = settings.model_copy(update={"max_connections": 2, "pool_acquire_timeout_secs": 0.5})
    assert pool(capped).max_size == 2
    assert pool(settings).max_size == POOL_MAX_SIZE
    with connection(capped, "test"), connection(capped, "test"):
        with pytest.raises(StreamlingError) as caught:
            with connection(capped, "test"):
                pass
        assert caught.value.retriable
