"""The launch home mirrors the installed pyspark without its bundled zips; the class archive is built once per key,
in the background only when missing and never retried after a failed build."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamling.runtime import class_archive
from streamling.runtime.spark_home import CACHE_ENV, installed_home, launch_home


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    return tmp_path / "cache"


def test_the_launch_home_links_everything_of_pyspark_but_its_python_zips(cache: Path) -> None:
    home = launch_home()
    assert home is not None and home.parent == cache
    installed = installed_home()
    assert sorted(p.name for p in home.iterdir()) == sorted(p.name for p in installed.iterdir() if p.name != "python")
    assert (home / "jars").resolve() == installed / "jars"
    assert (home / "bin" / "spark-submit").is_file()
    assert launch_home() == home  # made once
    assert [p.name for p in cache.iterdir()] == [home.name]  # no staging directory left


def test_a_spark_home_set_by_the_user_is_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(cache / "spark-4.1"))
    assert launch_home() is None


def test_a_missing_archive_is_built_after_exit_once_and_a_failed_build_is_not_retried(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[tuple] = []
    monkeypatch.setattr(class_archive.atexit, "register", lambda *args: registered.append(args))
    monkeypatch.setattr(class_archive, "_pending", set())
    path = class_archive.archive_path({})
    assert path is not None and path.parent == cache
    class_archive.build_later({})
    class_archive.build_later({})
    assert registered == [(class_archive._spawn_builder, path, "")]

    other = {class_archive.CLASS_PATH: "/opt/extra.jar"}
    failed = class_archive.archive_path(other)
    assert failed is not None
    class_archive.failed_note(failed).write_text("the JVM exited without writing the archive\n")
    class_archive.build_later(other)
    assert len(registered) == 1
