"""The Spark home the driver launches from, and the engine's cache directory beside it.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the PYTHONPATH of every Python process
it starts, and a module imported from a zip is compiled from source in every process (zipimport keeps no bytecode).
Spark's workers fork from `worker_daemon`, which drops the zips, but its planner processes (the data source's
creation, its read planning, the streaming source runner) start from pyspark's own daemon or none, at every query
start: each paid ~0.5 s more, in sequence, before the first row. When no SPARK_HOME is set, pyspark uses its installed
package as the home; the launch home here is that package's entries linked one by one with ``python/`` left out, so
every Python process imports the installed pyspark, compiled once. A SPARK_HOME set by the user is left alone.

Its ``jars/`` links each installed jar, but a signed jar (pyspark ships janino and commons-compiler signed) is a
copy without its signature files. The JVM checks a signed jar's signatures (DSA) and every class's digest as it
loads its classes, and the class-data archive (`class_archive`) leaves a signed jar's classes out, so the ~370
classes of SQL code generation were read, verified and parsed at every driver's first epoch.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

CACHE_ENV = "STREAMLING_CACHE_DIR"
LAYOUT = 2
"""Part of the launch home's name: a home laid out by an older engine is not reused (2: unsigned jar copies)."""
SIGNATURE = re.compile(r"META-INF/[^/]+\.(SF|DSA|RSA|EC)", re.IGNORECASE)


def cache_dir() -> Path | None:
    """Where the engine keeps what it derives from the installation (the launch home, the JVM's class archive):
    ``$STREAMLING_CACHE_DIR``, else ``<sys.prefix>/share/streamling`` (the venv, so a new venv starts clean), else
    the user's cache; None when none is writable."""
    configured = os.environ.get(CACHE_ENV)
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamling"
    candidates = [Path(configured)] if configured else [Path(sys.prefix) / "share" / "streamling", user_cache]
    for candidate in candidates:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    return None


def digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def installed_home() -> Path:
    spec = importlib.util.find_spec("pyspark")  # found, not imported: a caller that only names paths needs no Spark
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return Path(spec.origin).resolve().parent


def launch_home() -> Path | None:
    """The home to launch from when the user set none (created on first use); None to keep pyspark's choice."""
    if os.environ.get("SPARK_HOME"):
        return None
    root = cache_dir()
    installed = installed_home()
    if root is None or not (installed / "jars").is_dir():
        return None
    home = root / f"spark-home-{pyspark_version()}-{digest(installed, LAYOUT)}"
    if (home / "jars").is_dir():
        return home
    staging = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=root))
    staging.chmod(0o755)
    for entry in installed.iterdir():
        if entry.name == "jars":
            link_jars(entry, staging / "jars")
        elif entry.name != "python":
            (staging / entry.name).symlink_to(entry)
    try:
        staging.rename(home)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return home


def link_jars(installed: Path, target: Path) -> None:
    """Each jar linked, a signed one copied without its signature (see the module's docstring)."""
    target.mkdir()
    for jar in sorted(installed.iterdir()):
        if jar.suffix == ".jar" and zipfile.is_zipfile(jar):
            with zipfile.ZipFile(jar) as archive:
                signed = any(SIGNATURE.fullmatch(name) for name in archive.namelist())
                if signed:
                    unsigned_copy(archive, target / jar.name)
                    continue
        (target / jar.name).symlink_to(jar)


def unsigned_copy(archive: zipfile.ZipFile, target: Path) -> None:
    """The jar's entries but its signature files. The manifest's per-entry digests stay: without a signature
    file the JVM treats the jar as unsigned and never reads them."""
    with zipfile.ZipFile(target, "w") as copy:
        for info in archive.infolist():
            if not SIGNATURE.fullmatch(info.filename):
                copy.writestr(info, archive.read(info), compress_type=info.compress_type)


def spark_home() -> Path:
    """The home the driver's JVM launches (or launched) from."""
    configured = os.environ.get("SPARK_HOME")
    return Path(configured) if configured else installed_home()


@functools.cache
def pyspark_version() -> str:
    """The installed pyspark's version, from its metadata rather than by importing it (~50 ms)."""
    from importlib.metadata import version

    return version("pyspark")
