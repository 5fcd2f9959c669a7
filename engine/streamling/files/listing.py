"""Finding the files of a `path`: its filesystem (pyarrow's), a recursive listing, a glob, Hive-style folders.

Names starting with ``.`` or ``_`` (in any folder below the base) are left out, as Spark and pyarrow's datasets
do: writers stage files under such names (``_temporary/``, ``.part-0.crc``), and a file written under a hidden
name and renamed into place appears whole, with its final modification time — what the watermark relies on.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from streamling.errors import StreamlingError

if TYPE_CHECKING:
    from pyarrow import fs as pafs

_GLOB = re.compile(r"[*?\[]")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "file": "file"}
"""URL schemes handed to pyarrow's filesystems (``s3a://`` is Hadoop's name for S3), by pyarrow's name. Kept here,
not with the spec: the reading tasks import this module, and pydantic and the topology cost each worker ~90 ms."""
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True, order=True)
class FileEntry:
    """One file as listed; ordered by modification time, then path: the order files are read in."""

    mtime_ns: int
    path: str
    size: int = field(compare=False)
    partition: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)
    """The Hive-style ``key=value`` folders between the base and the file, outermost first."""


def scheme_of(path: str) -> str | None:
    """The URL scheme of `path` (lower case), None for a plain local path."""
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem `path` is on and the path within it (``s3a://`` read as ``s3://``)."""
    from pyarrow import fs as pafs

    scheme = scheme_of(path)
    if scheme is None:
        return pafs.LocalFileSystem(), posixpath.abspath(path) if not path.startswith("/") else path
    if scheme not in SCHEMES:
        raise StreamlingError.user(f"unsupported scheme {scheme}")
    uri = SCHEMES[scheme] + path[len(scheme) :]
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise StreamlingError.user(f"cannot open {path}: {exc}") from None


def split_glob(path: str) -> tuple[str, str | None]:
    """The folder a glob's matches are under (its segments before the first wildcard) and the glob; a plain path
    and None when there is no wildcard."""
    if not _GLOB.search(path):
        return path, None
    segments = path.split("/")
    fixed = next(i for i, s in enumerate(segments) if _GLOB.search(s))
    return "/".join(segments[:fixed]) or "/", path


def list_files(fs: pafs.FileSystem, path: str) -> tuple[str, list[FileEntry]]:
    """The files `path` names (a file, a folder read recursively, or a glob), sorted, and the base folder their
    Hive-style partition folders are relative to."""
    from pyarrow import fs as pafs

    base, pattern = split_glob(path.rstrip("/") or "/")
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        return base, []
    if info.type == pafs.FileType.File and pattern is None:
        return posixpath.dirname(base), [FileEntry(_mtime_ns(info), info.path, info.size or 0)]
    found = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    out = []
    for item in found:
        if item.type != pafs.FileType.File:
            continue
        relative = posixpath.relpath(item.path, base)
        if any(part.startswith((".", "_")) for part in relative.split("/")):
            continue
        if pattern is not None and not fnmatch.fnmatchcase(item.path, pattern):
            continue
        out.append(FileEntry(_mtime_ns(item), item.path, item.size or 0, hive_values(relative)))
    return base, sorted(out)


def _mtime_ns(info: pafs.FileInfo) -> int:
    return int(info.mtime_ns) if info.mtime_ns is not None else 0


def hive_values(relative: str) -> tuple[tuple[str, str | None], ...]:
    """``year=2024/month=05/x.csv`` → (("year", "2024"), ("month", "05")); values URL-decoded, Hive's default
    partition name read as NULL."""
    out = []
    for folder in relative.split("/")[:-1]:
        key, sep, value = folder.partition("=")
        if sep and key:
            text = unquote(value)
            out.append((unquote(key), None if text == HIVE_NULL else text))
    return tuple(out)
