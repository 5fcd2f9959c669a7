"""A warm engine (`streamling serve`) as a black box for the e2e tests: its own process group, its URL from its
ready line, its token from the token file it made, and `streamling submit` clients."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import httpx

from tests.e2e.cli import start_cli

READY = re.compile(r"Engine ready on (http://\S+?)/? ")


class Engine:
    """`streamling serve --port 0` in its own process group; its URL read from its ready line, its token from the
    token file it made (`STREAMLING_HOME` of the test's folder, as `cli_env` sets it)."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        self.proc = start_cli(cwd, "serve", "--port", "0", *args, env=env)
        self.lines: list[str] = []
        self.url: str | None = None
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                if self.url is None and (m := READY.search(line)):
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(120) and self.url, "".join(self.lines)[-3000:]
        assert httpx.get(f"{self.url}/health", timeout=10).json()["status"] == "ok"
        port = self.url.rsplit(":", 1)[1]
        token_file = cwd / ".streamling-home" / f"engine-{port}.token"
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        self.token = token_file.read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str) -> dict:
        answer = httpx.get(f"{self.url}{path}", headers=self.headers, timeout=30)
        assert answer.status_code in (200, 503), answer.text
        return answer.json()

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


def submit(cwd: Path, engine: Engine, pipeline: Path, env: dict[str, str]) -> subprocess.Popen:
    """The run's settings are the submitter's (its STREAMLING__ variables), not the engine's."""
    return start_cli(cwd, "submit", "--engine", engine.url or "", str(pipeline), env=env)


def settings_document(cwd: Path, env: dict[str, str]) -> dict:
    """The settings a submitter in `cwd` with `env` (its STREAMLING__ variables over `cli_env`'s) sends."""
    from streamling.config import load_settings
    from streamling.engine_client import submitted_settings
    from tests.e2e.cli import cli_env

    variables = {k: v for k, v in cli_env(cwd, env).items() if k.startswith("STREAMLING__")}
    config = cwd / "no-config.yaml"
    config.write_text("{}\n")
    return submitted_settings(load_settings(str(config), environ=variables))


def submit_all(engine: Engine, pipelines: list[Path], document: dict | list[dict]) -> list[str]:
    """POST every pipeline at the same moment (one thread each), with one settings document or one each; the run
    ids, in `pipelines`' order."""
    from concurrent.futures import ThreadPoolExecutor

    documents = document if isinstance(document, list) else [document] * len(pipelines)

    def post(pair: tuple[Path, dict]) -> str:
        path, settings = pair
        answer = httpx.post(
            f"{engine.url}/runs", json={"pipeline": str(path), "settings": settings}, headers=engine.headers, timeout=60
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    with ThreadPoolExecutor(max_workers=len(pipelines)) as pool:
        return list(pool.map(post, zip(pipelines, documents, strict=True)))
