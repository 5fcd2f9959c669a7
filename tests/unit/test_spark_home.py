"""The launch home mirrors the installed pyspark without its bundled zips, its signed jars copied unsigned; the class archive is built once per key,
in the background only when missing and never retried after a failed build."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from streamling.spark import class_archive
from streamling.spark.spark_home import CACHE_ENV, SIGNATURE, installed_home, launch_home, link_jars


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
    assert sorted(p.name for p in (home / "jars").iterdir()) == sorted(p.name for p in (installed / "jars").iterdir())
    copies = sorted(p.name for p in (home / "jars").iterdir() if not p.is_symlink())
    assert any(name.startswith("janino-") for name in copies)  # pyspark ships janino and commons-compiler signed
    for name in copies:
        with zipfile.ZipFile(home / "jars" / name) as copy, zipfile.ZipFile(installed / "jars" / name) as original:
            assert [n for n in original.namelist() if SIGNATURE.fullmatch(n)]
            assert copy.namelist() == [n for n in original.namelist() if not SIGNATURE.fullmatch(n)]
            assert copy.read("META-INF/MANIFEST.MF") == original.read("META-INF/MANIFEST.MF")
    assert (home / "bin" / "spark-submit").is_file()
    assert launch_home() == home  # made once
    assert [p.name for p in cache.iterdir()] == [home.name]  # no staging directory left


def test_a_signed_jar_is_copied_without_its_signature_files_and_keeps_its_entries(tmp_path: Path) -> None:
    installed = tmp_path / "jars"
    installed.mkdir()
    entries = {
        "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
        "META-INF/SIGNER.SF": b"sig",
        "META-INF/SIGNER.RSA": b"block",
        "META-INF/maven/pom.properties": b"version=1",
        "org/example/A.class": b"\xca\xfe\xba\xbe" * 100,
    }
    for jar in ("signed.jar", "plain.jar"):
        with zipfile.ZipFile(installed / jar, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in entries.items():
                if jar == "signed.jar" or not SIGNATURE.fullmatch(name):
                    archive.writestr(name, data)
    (installed / "notes.txt").write_text("not a jar")
    link_jars(installed, tmp_path / "home-jars")
    linked = tmp_path / "home-jars"
    assert (linked / "plain.jar").is_symlink() and (linked / "notes.txt").is_symlink()
    assert not (linked / "signed.jar").is_symlink()
    with zipfile.ZipFile(linked / "signed.jar") as copy:
        assert copy.namelist() == ["META-INF/MANIFEST.MF", "META-INF/maven/pom.properties", "org/example/A.class"]
        assert copy.read("org/example/A.class") == entries["org/example/A.class"]
        assert copy.getinfo("org/example/A.class").compress_type == zipfile.ZIP_DEFLATED


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
