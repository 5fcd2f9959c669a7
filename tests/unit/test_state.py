"""State backends share one contract, leases included; Sqlite and Postgres also keep the documented table layout."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from streamling.config.model import PostgresConnectionSettings
from streamling.errors import LeaseLostError
from streamling.state import Fence, InMemoryStateBackend, StateBackend
from streamling.state.sqlite import SqliteStateBackend


def contract(backend: StateBackend, other: StateBackend) -> None:
    assert backend.get("k") is None
    backend.put("k", {"offset": 1})
    backend.put_many({"src:t:0": {"offset": 5}, "src:t:1": {"offset": 7}, "x": {"n": [1, 2]}})
    other.put("k", {"offset": 99})  # another namespace
    assert backend.get("k") == {"offset": 1}
    assert backend.items("src:") == {"src:t:0": {"offset": 5}, "src:t:1": {"offset": 7}}
    backend.put("k", {"offset": 2})
    assert backend.get("k") == {"offset": 2}
    backend.remove("k")
    assert backend.get("k") is None
    backend.clear()
    assert backend.items() == {}
    assert other.get("k") == {"offset": 99}


def test_in_memory_contract() -> None:
    contract(InMemoryStateBackend("app"), InMemoryStateBackend("other"))


def test_sqlite_contract_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "state.db"
    with SqliteStateBackend("app", str(path)) as a, SqliteStateBackend("other", str(path)) as b:
        contract(a, b)
    conn = sqlite3.connect(path)
    columns = [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(state)")]
    assert columns == [
        ("namespace", "TEXT", 0, 1),
        ("key", "TEXT", 0, 2),
        ("data", "TEXT", 1, 0),
        ("created_at", "DATETIME", 0, 0),
    ]


def test_runs_opening_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Two pipelines submitted together to one engine (or two CLI runs started together) open the same new file:
    switching it to WAL does not wait on the busy timeout, and used to fail one of them with "database is locked"
    (about 1 in 10 rounds of three here)."""
    import threading

    for n in range(60):
        path = str(tmp_path / f"state-{n}.db")
        barrier = threading.Barrier(3)

        def open_and_write(name: str, path: str = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            SqliteStateBackend(name, path).put_many({"k": {"v": name}})

        with ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(open_and_write, name) for name in ("a", "b", "c")]:
                future.result()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("SELECT count(*) FROM state").fetchone()[0] == 3


def test_sqlite_keeps_created_at_on_update(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SqliteStateBackend("app", str(path)) as backend:
        backend.put("k", {"v": 1})
        conn = sqlite3.connect(path)
        conn.execute("UPDATE state SET created_at = '2000-01-01 00:00:00'")
        conn.commit()
        backend.put("k", {"v": 2})
        assert conn.execute("SELECT data, created_at FROM state").fetchall() == [('{"v":2}', "2000-01-01 00:00:00")]


@pytest.mark.integration
def test_postgres_contract_schema_and_created_at(postgres_env, pg_connect) -> None:
    from streamling.state.postgres import PostgresStateBackend

    prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"
    settings = PostgresConnectionSettings(
        host=postgres_env[prefix + "HOST"],
        port=int(postgres_env[prefix + "PORT"]),
        user=postgres_env[prefix + "USER"],
        password=postgres_env[prefix + "PASSWORD"],
        database=postgres_env[prefix + "DATABASE"],
    )
    namespace = f"test_state_{time.time_ns()}"
    with (
        PostgresStateBackend(namespace, settings) as a,
        PostgresStateBackend(namespace + "_o", settings) as b,
    ):
        contract(a, b)
        a.put("k", {"v": 1})
        with pg_connect() as conn:
            conn.execute(
                "UPDATE streamling.state SET created_at = '2000-01-01T00:00:00Z' WHERE namespace = %s",
                (namespace,),
            )
            a.put("k", {"v": 2})
            row = conn.execute(
                "SELECT data, created_at::date::text FROM streamling.state WHERE namespace = %s", (namespace,)
            ).fetchone()
            assert row == ({"v": 2}, "2000-01-01")
            types = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'streamling' AND table_name = 'state' ORDER BY ordinal_position"
            ).fetchall()
            assert types == [
                ("namespace", "text"),
                ("key", "text"),
                ("data", "jsonb"),
                ("created_at", "timestamp with time zone"),
            ]
            pk = conn.execute(
                "SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_index i JOIN pg_attribute a "
                "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = 'streamling.state'::regclass AND i.indisprimary"
            ).fetchone()[0]
            assert pk == ["namespace", "key"]


@pytest.mark.integration
def test_postgres_connection_error_hides_password(postgres_env) -> None:
    from streamling.errors import StreamlingError
    from streamling.state.postgres import PostgresStateBackend

    prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"
    settings = PostgresConnectionSettings(
        host="127.0.0.1",
        port=int(postgres_env[prefix + "PORT"]),
        user=postgres_env[prefix + "USER"],
        password="wrong-Secret-123",
        database=postgres_env[prefix + "DATABASE"],
    )  # the default retry_timeout_sec (600 s): a login the server turns down is not retried
    started = time.monotonic()
    with pytest.raises(StreamlingError) as info:
        PostgresStateBackend("x", settings)
    assert time.monotonic() - started < 10
    assert info.value.user_facing and not info.value.retriable
    assert str(info.value).startswith(
        f"postgres state backend 127.0.0.1:{settings.port}/{settings.database}: cannot connect: "
    )
    assert "password authentication failed" in str(info.value)
    assert "wrong-Secret-123" not in str(info.value)


def lease_contract(make: Callable[[], StateBackend], other_namespace: StateBackend) -> None:
    """`make()` opens the same store again, as another run would."""
    a, b = make(), make()
    me, you = {"pid": 1, "host": "a"}, {"pid": 2, "host": "b"}
    assert a.acquire_lease("pipeline:p", "run-a", me, ttl_sec=30) is None
    assert a.acquire_lease("pipeline:p", "run-a", me, ttl_sec=30) is None  # ours already: taken again
    held = b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30)
    assert held is not None and (held.token, held.holder, held.renewals) == ("run-a", me, 0)
    assert b.acquire_lease("pipeline:q", "run-b", you, ttl_sec=30) is None  # another pipeline
    assert other_namespace.acquire_lease("pipeline:p", "run-c", you, ttl_sec=30) is None  # another application id
    assert a.renew_lease("pipeline:p", "run-a", ttl_sec=30)
    assert a.renew_lease("pipeline:p", "run-a", ttl_sec=30)
    assert b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30).renewals == 2  # type: ignore[union-attr]
    assert not b.renew_lease("pipeline:p", "run-b", ttl_sec=30)  # not b's
    b.release_lease("pipeline:p", "run-b")  # not b's: left alone
    assert b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30).token == "run-a"  # type: ignore[union-attr]
    # A holder known to be dead is replaced at once, but only that holder.
    assert b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30, replace="run-x") is not None
    assert b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30, replace="run-a") is None
    assert not a.renew_lease("pipeline:p", "run-a", ttl_sec=30)  # a lost it
    b.release_lease("pipeline:p", "run-b")
    assert a.acquire_lease("pipeline:p", "run-a", me, ttl_sec=0.5) is None  # released: free
    # An expired lease is free for the taking.
    assert b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30) is not None
    deadline = time.monotonic() + 10
    while b.acquire_lease("pipeline:p", "run-b", you, ttl_sec=30) is not None:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.05)
    assert not a.renew_lease("pipeline:p", "run-a", ttl_sec=30)
    # Concurrent takers of a free lease: exactly one wins.
    b.release_lease("pipeline:p", "run-b")
    takers = [make() for _ in range(4)]
    with ThreadPoolExecutor(len(takers)) as pool:
        results = list(
            pool.map(lambda i: takers[i].acquire_lease("pipeline:p", f"t{i}", {"pid": i}, 30), range(len(takers)))
        )
    assert sum(r is None for r in results) == 1
    winner = f"t{results.index(None)}"
    assert all(r.token == winner for r in results if r is not None)
    for backend in (a, b, *takers):
        backend.close()


def fence_contract(make: Callable[[], StateBackend]) -> None:
    """Commits carry the lease (`put_many(fence=)`): refused, writing nothing, once the lease expired and another
    run took it, and once released. Generations grow with each takeover, not when a holder takes its lease again."""
    a, b = make(), make()
    assert a.acquire_lease("pipeline:f", "run-a", {}, ttl_sec=0.5) is None
    first = a.lease_generation("pipeline:f", "run-a")
    assert first is not None and first >= 1
    assert a.acquire_lease("pipeline:f", "run-a", {}, ttl_sec=0.5) is None
    assert a.lease_generation("pipeline:f", "run-a") == first
    mine = Fence("pipeline:f", "run-a", first)
    a.put_many({"k": {"v": 1}}, fence=mine)
    assert a.get("k") == {"v": 1}
    deadline = time.monotonic() + 10
    while b.acquire_lease("pipeline:f", "run-b", {}, ttl_sec=30) is not None:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.05)
    assert b.lease_generation("pipeline:f", "run-b") == first + 1
    assert a.lease_generation("pipeline:f", "run-a") is None
    with pytest.raises(LeaseLostError) as refused:
        a.put_many({"k": {"v": 2}, "j": {"v": 2}}, fence=mine)
    assert (
        refused.value.message == "its run lease 'pipeline:f' is held by another run or expired; the commit was refused"
    )
    assert (a.get("k"), a.get("j")) == ({"v": 1}, None)
    yours = Fence("pipeline:f", "run-b", first + 1)
    b.put_many({"k": {"v": 3}}, fence=yours)
    b.release_lease("pipeline:f", "run-b")
    with pytest.raises(LeaseLostError):
        b.put_many({"k": {"v": 4}}, fence=yours)
    assert b.get("k") == {"v": 3}
    assert a.acquire_lease("pipeline:f", "run-a", {}, ttl_sec=30) is None  # released: free, the generation kept
    assert a.lease_generation("pipeline:f", "run-a") == first + 2
    for backend in (a, b):
        backend.close()


def test_in_memory_leases_are_per_instance() -> None:
    memory = InMemoryStateBackend("app")
    lease_contract(lambda: memory, InMemoryStateBackend("other"))
    fenced = InMemoryStateBackend("app")
    fence_contract(lambda: fenced)
    # Another instance (another process) shares nothing, the lease included.
    assert InMemoryStateBackend("app").acquire_lease("pipeline:p", "run-z", {}, 30) is None


def test_sqlite_leases(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with SqliteStateBackend("other", path) as other:
        lease_contract(lambda: SqliteStateBackend("app", path), other)
    fence_contract(lambda: SqliteStateBackend("app", path))


@pytest.mark.integration
def test_postgres_leases(postgres_env) -> None:
    from streamling.state.postgres import PostgresStateBackend

    prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"
    settings = PostgresConnectionSettings(
        host=postgres_env[prefix + "HOST"],
        port=int(postgres_env[prefix + "PORT"]),
        user=postgres_env[prefix + "USER"],
        password=postgres_env[prefix + "PASSWORD"],
        database=postgres_env[prefix + "DATABASE"],
    )
    namespace = f"test_lease_{time.time_ns()}"
    with PostgresStateBackend(namespace + "_o", settings) as other:
        lease_contract(lambda: PostgresStateBackend(namespace, settings), other)
    fence_contract(lambda: PostgresStateBackend(namespace, settings))


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_sources_reset_forgets_its_positions_and_keeps_its_epoch_and_phase(kind, tmp_path, request) -> None:
    """`Source.reset_position` (what `streamling.reset_positions` asks of each bounded source) on every backend."""
    from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
    from streamling.config import Settings

    if kind == "memory":
        backend: StateBackend = InMemoryStateBackend("app")
    elif kind == "sqlite":
        backend = SqliteStateBackend("app", str(tmp_path / "state.db"))
    else:
        from streamling.state.postgres import PostgresStateBackend

        env = request.getfixturevalue("postgres_env")
        prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"
        fields = ("host", "port", "user", "password", "database")
        settings = PostgresConnectionSettings(**{f: env[prefix + f.upper()] for f in fields})
        backend = PostgresStateBackend(f"test_reset_{time.time_ns()}", settings)
    source = GeneratorSource("g", GeneratorSourceSpec.model_validate({"type": "generator", "rows": 5}), Settings())
    with backend:
        backend.put_many(
            {"g:generator": {"offset": 5}, "g:__epoch__": {"epoch": 3}, "g:__phase__": {"phase": 1}, "gx:k": {"a": 1}}
        )
        assert source.reset_position(backend) == ["g:generator"]
        assert backend.items() == {"g:__epoch__": {"epoch": 3}, "g:__phase__": {"phase": 1}, "gx:k": {"a": 1}}
        assert source.load_position(backend) == {"offset": 0}
