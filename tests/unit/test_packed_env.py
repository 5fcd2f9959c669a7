"""What `streamling package` puts in the executors' environment, and how a run finds it (`spark/packed_env.py`).
The staging runs for real (a venv with copies of the installed distributions); venv-pack's archive is built by the
shared-nothing cluster's test, which runs pipelines from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import streamling
from streamling.errors import StreamlingError
from streamling.spark import packed_env


def test_the_contents_are_the_engines_runtime_closure_without_spark_dagster_or_the_embedded_clickhouse() -> None:
    wanted = packed_env.contents()
    names = set(wanted.distributions)
    assert {"pyarrow", "polars", "confluent-kafka", "psycopg", "httpx", "pydantic", "wasmtime"} <= names
    assert {"numpy", "pydantic-core", "annotated-types"} <= names  # requirements of requirements
    assert not names & {"pyspark", "py4j", "dagster", "dagster-webserver", "dagster-spark", "chdb", "chdb-core"}
    assert not names & {"pytest", "ruff", "hypothesis"}  # the dev extra is not the runtime's


def test_stage_holds_the_engine_its_entry_points_a_path_plugin_and_a_manifest(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    (plugins / "acme_pkg").mkdir(parents=True)
    (plugins / "acme_pkg" / "__init__.py").write_text("X = 1\n")
    (plugins / "acme_single.py").write_text("Y = 2\n")
    wanted = packed_env.contents([plugins])
    wanted.distributions = {"tenacity": wanted.distributions["tenacity"]}  # a small one; the engine is always copied
    staged = tmp_path / "env"
    packed_env.stage(wanted, staged)
    assert not any("__pycache__" in p.parts for p in (staged / "lib").rglob("*"))  # compiled where it runs
    python = staged / "bin" / "python"
    code = "import streamling, tenacity, acme_pkg, acme_single, importlib.metadata as m; print(streamling.__file__); "
    code += "print([e.name for e in m.entry_points(group='streamling.plugins')])"
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    location, entry_points = out.stdout.splitlines()
    assert location.startswith(str(staged))
    assert entry_points == "['builtins']"
    manifest = json.loads((staged / packed_env.MANIFEST).read_text())
    assert manifest["platform"] == packed_env.platform_tag()
    assert manifest["distributions"] == {"tenacity": wanted.distributions["tenacity"].version}
    assert manifest["engine"] == streamling.__version__
    assert manifest["path_plugins"] == [str(plugins.resolve())]


def test_the_digest_follows_what_goes_in(tmp_path: Path) -> None:
    plugin = tmp_path / "acme.py"
    plugin.write_text("A = 1\n")
    first = packed_env.contents([plugin]).digest()
    assert packed_env.contents([plugin]).digest() == first
    plugin.write_text("A = 22\n")
    assert packed_env.contents([plugin]).digest() != first


def test_a_named_archive_that_is_missing_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StreamlingError) as raised:
        packed_env.resolve(str(tmp_path / "nope.tar.gz"))
    assert raised.value.message == (
        f"spark.environment_archive: '{tmp_path / 'nope.tar.gz'}' is not a file; build it with `streamling package "
        f"--output {tmp_path / 'nope.tar.gz'}` or set it to 'auto'"
    )


def test_the_driver_folder_links_the_archives_python_to_this_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMLING_CACHE_DIR", str(tmp_path))
    folder = Path(packed_env.driver_directory())
    assert (folder / packed_env.EXECUTOR_PYTHON).resolve() == Path(sys.prefix, "bin", "python").resolve()
    assert packed_env.driver_directory() == str(folder)  # the same folder next time, link kept


def test_package_names_a_missing_plugin_path(tmp_path: Path, capsys) -> None:
    code = packed_env.main(["--output", str(tmp_path / "x.tar.gz"), "--plugin-path", str(tmp_path / "gone")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"Error: plugin path '{tmp_path / 'gone'}' does not exist (--plugin-path / STREAMLING__PLUGIN__PATH)"
    )
    assert not (tmp_path / "x.tar.gz").exists()


def test_session_conf_ships_the_archive_only_to_a_cluster(tmp_path: Path) -> None:
    from streamling.config.model import SparkSettings
    from streamling.spark.conf import session_conf

    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"x")
    cluster = SparkSettings(
        master="spark://h:7077", environment_archive=str(archive), conf={"spark.archives": "extra.zip#x"}
    )
    conf = session_conf(cluster)
    # The driver JVM then runs elsewhere (`packed_env.driver_directory`): relative paths stay the user's.
    assert conf["spark.archives"] == f"{os.path.abspath('extra.zip')}#x,{archive}#{packed_env.ALIAS}"
    assert conf["spark.sql.warehouse.dir"] == os.path.abspath("spark-warehouse")
    assert conf["spark.pyspark.python"] == "./streamling_env/bin/python"
    own = cluster.model_copy(
        update={"conf": {"spark.pyspark.python": "/opt/py/bin/python", "spark.jars": "s3a://b/x.jar"}}
    )
    assert session_conf(own)["spark.pyspark.python"] == "/opt/py/bin/python"
    assert session_conf(own)["spark.jars"] == "s3a://b/x.jar"
    shown = session_conf(cluster.model_copy(update={"environment_archive": "auto"}), resolve_archive=False)
    assert shown["spark.archives"].endswith(f",auto#{packed_env.ALIAS}")  # a configuration to show: nothing packed
    local = session_conf(SparkSettings(master="local[2]", environment_archive=str(archive)))
    assert "spark.archives" not in local and "spark.pyspark.python" not in local


def test_shipped_archive_and_its_path_plugins_are_read_from_the_conf_and_the_manifest(tmp_path: Path) -> None:
    from pyspark import SparkConf

    archive = tmp_path / "env.tar.gz"
    (tmp_path / "env.tar.gz.json").write_text(json.dumps({"path_plugins": [str(tmp_path / "plugins")]}))
    conf = SparkConf(loadDefaults=False).set("spark.archives", f"/a/other.zip#x,{archive}#{packed_env.ALIAS}")
    assert packed_env.archive_of(conf) == archive
    assert packed_env.packed_path_plugins(conf) == {tmp_path / "plugins"}
    assert packed_env.archive_of(SparkConf(loadDefaults=False).set("spark.archives", "/a/other.zip#x")) is None


def test_auto_keeps_archives_other_drivers_may_still_serve(tmp_path, monkeypatch) -> None:
    def build(target: Path) -> packed_env.Packed:  # venv-pack's part is run by the shared-nothing cluster's test
        target.write_bytes(b"new")
        return packed_env.Packed(target, 3, 3, 0, 0, False, packed_env.platform_tag(), 0.0)

    monkeypatch.setattr(packed_env, "build", build)
    monkeypatch.setenv("STREAMLING_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "environments"
    folder.mkdir()
    tag = packed_env.platform_tag()
    recent, stale = folder / f"streamling-env-{tag}-recent.tar.gz", folder / f"streamling-env-{tag}-stale.tar.gz"
    for old in (recent, stale):
        old.write_bytes(b"old")
    long_ago = time.time() - packed_env.KEEP_UNUSED_SEC - 60
    os.utime(stale, (long_ago, long_ago))
    made = packed_env.resolve("auto")
    assert made.read_bytes() == b"new" and made.name == f"streamling-env-{tag}-{packed_env.contents().digest()}.tar.gz"
    assert recent.exists() and not stale.exists()
    assert packed_env.resolve("auto") == made  # the same contents: reused, not packed again


def test_a_named_archive_built_from_other_files_is_warned_about(tmp_path: Path, caplog) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"x")
    (tmp_path / "env.tar.gz.json").write_text(json.dumps({"digest": "0" * 12, "path_plugins": []}))
    with caplog.at_level("WARNING", logger="streamling.runtime"):
        assert packed_env.resolve(str(archive)) == archive
    assert f"spark.environment_archive {archive} was built from other engine, package or plugin files" in caplog.text


def test_each_session_gets_its_own_workers_python(monkeypatch) -> None:
    """PySpark reads PYSPARK_PYTHON when each SparkContext starts: a local session after a cluster one in the same
    process gets this interpreter back, and Spark's spark.pyspark.python sets it."""
    from streamling.spark.session import _workers_python

    monkeypatch.setenv("PYSPARK_PYTHON", packed_env.EXECUTOR_PYTHON)
    assert _workers_python({"spark.master": "local[2]"}) == sys.executable
    assert _workers_python({"spark.pyspark.python": "/opt/py/bin/python"}) == "/opt/py/bin/python"
    assert _workers_python({}) == "/opt/py/bin/python"  # a user's own interpreter is left alone


def test_a_plugin_installed_editable_is_packed_from_its_source_folder(tmp_path, site, monkeypatch) -> None:
    """``pip install -e`` leaves a path hook into the source folder in site-packages; the archive gets the code."""
    from tests.plugin_util import write_distribution

    source = tmp_path / "src"
    (source / "acme_edit").mkdir(parents=True)
    (source / "acme_edit" / "__init__.py").write_text("PLUGIN = None\nVALUE = 41\n")
    monkeypatch.syspath_prepend(str(source))
    write_distribution(site, "acme_edit", {"acme_edit": "acme_edit:PLUGIN"}, {})
    info = site / "acme_edit-1.0.dist-info"
    (info / "direct_url.json").write_text(json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}}))
    (site / "__editable__.acme_edit-1.0.pth").write_text(str(source) + "\n")
    (info / "RECORD").write_text(
        "__editable__.acme_edit-1.0.pth,,\nacme_edit-1.0.dist-info/METADATA,,\nacme_edit-1.0.dist-info/RECORD,,\n"
    )
    wanted = packed_env.contents()
    assert wanted.editable == {"acme_edit": source / "acme_edit"}
    first = wanted.digest()
    wanted.distributions = {"acme-edit": wanted.distributions["acme-edit"]}
    staged = tmp_path / "env"
    packed_env.stage(wanted, staged)
    site_packages = next(staged.glob("lib/python*/site-packages"))
    assert (site_packages / "acme_edit" / "__init__.py").read_text() == "PLUGIN = None\nVALUE = 41\n"
    assert (site_packages / "acme_edit-1.0.dist-info" / "METADATA").is_file()
    assert not list(site_packages.glob("__editable__*"))  # the hook into the driver's source folder stays behind
    (source / "acme_edit" / "__init__.py").write_text("PLUGIN = None\nVALUE = 42\n")
    assert packed_env.contents().digest() != first
