"""The warm engine's HTTP API is no open door (`core/guard.py`): a real `streamling serve` on loopback refuses every
request without its token, under a Host name that is not its own, or from another origin; `streamling submit` finds
the token in the engine's token file and says what to do when it is wrong; the token is never logged."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx

from tests.e2e.cli import run_cli, write
from tests.e2e.engine import Engine
from tests.net import assert_guarded


def test_every_refusal_and_what_passes(tmp_path: Path) -> None:
    engine = Engine(tmp_path, {})
    try:
        assert engine.url is not None
        assert_guarded(engine.url, engine.token, "the engine", probe="/health", data="/runs")
        assert httpx.get(f"{engine.url}/ready", timeout=10).json()["ready"] is True  # a probe: no token
        plain = httpx.post(
            f"{engine.url}/runs", headers={**engine.headers, "Content-Type": "text/plain"}, content='{"pipeline": "x"}'
        )
        assert (plain.status_code, plain.json()) == (
            415,
            {"error": "the body must be JSON (Content-Type: application/json)"},
        )
        home = tmp_path / ".streamling-home"
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
    finally:
        assert engine.stop() == 0
    assert engine.token not in "".join(engine.lines)
    assert f"its token is in {home}/engine-" in "".join(engine.lines)


def test_submit_reads_the_token_file_and_a_wrong_token_is_one_clear_error(tmp_path: Path) -> None:
    pipeline = write(tmp_path, "sources: {g: {type: generator, rows: 10}}\nsinks: {out: {type: blackhole, from: g}}\n")
    engine = Engine(tmp_path, {})
    try:
        env = {"STREAMLING__JOB_MODE": "true"}
        ok = run_cli(tmp_path, "submit", "--engine", engine.url or "", str(pipeline), env=env)
        assert ok.returncode == 0, ok.stderr
        wrong = run_cli(
            tmp_path,
            "submit",
            "--engine",
            engine.url or "",
            str(pipeline),
            env={**env, "STREAMLING__ENGINE__TOKEN": "guessed"},
        )
        assert wrong.returncode == 2
        port = (engine.url or "").rsplit(":", 1)[1]
        assert wrong.stderr.strip() == (
            f"Error: the engine at {engine.url} refused the token given: set engine.token (STREAMLING__ENGINE__TOKEN) "
            "to its token, or run as the engine's user on its host (the engine keeps it in "
            f"{tmp_path}/.streamling-home/engine-{port}.token)"
        )
        elsewhere = run_cli(
            tmp_path,
            "submit",
            "--engine",
            engine.url or "",
            str(pipeline),
            env={**env, "STREAMLING_HOME": str(tmp_path / "another-home")},
        )
        assert elsewhere.returncode == 2
        assert elsewhere.stderr.strip().startswith(f"Error: the engine at {engine.url} needs a token: set engine.token")
        assert "guessed" not in "".join(engine.lines)
    finally:
        assert engine.stop() == 0
