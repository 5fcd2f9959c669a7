"""The file source's position: a last-modified watermark and the files seen at exactly that time.

A position ``{"last_modified": W, "files": [...]}`` (W in nanoseconds since the epoch) covers every file modified
before W and the listed files modified at W. Files are read in (modification time, path) order, whole, so an
epoch's end is the watermark of its last file: a restart resumes after the last committed file, neither reading a
committed file again nor skipping one that was listed after it. A file rewritten later has a newer time and is
read again (its rows arrive as inserts again); a file that appears with a time before the watermark is not read;
a deleted file changes nothing. The set is what keeps two files of the same time apart, one committed and one not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streamling.files.listing import FileEntry

INITIAL: dict[str, Any] = {"last_modified": -1, "files": []}


def covers(position: Mapping[str, Any], entry: FileEntry) -> bool:
    """True when `entry` (as listed now) was read before `position`."""
    watermark = int(position.get("last_modified", -1))
    return entry.mtime_ns < watermark or (entry.mtime_ns == watermark and entry.path in position.get("files", ()))


def pending(position: Mapping[str, Any], listing: Iterable[FileEntry]) -> list[FileEntry]:
    """The listed files `position` does not cover, in reading order."""
    return sorted(e for e in listing if not covers(position, e))


def take(waiting: Sequence[FileEntry], max_bytes: int, max_files: int) -> list[FileEntry]:
    """The next epoch's files: whole files in order, at least one, until `max_bytes` or `max_files`."""
    out: list[FileEntry] = []
    total = 0
    for entry in waiting:
        if out and (total + entry.size > max_bytes or len(out) >= max_files):
            break
        out.append(entry)
        total += entry.size
    return out


def advance(position: Mapping[str, Any], read: Sequence[FileEntry]) -> dict[str, Any]:
    """The position after reading `read` (files `position` did not cover, in reading order) from `position`."""
    if not read:
        return {"last_modified": int(position.get("last_modified", -1)), "files": list(position.get("files", []))}
    watermark = read[-1].mtime_ns
    same = {e.path for e in read if e.mtime_ns == watermark}
    if watermark == int(position.get("last_modified", -1)):
        same |= set(position.get("files", []))
    return {"last_modified": watermark, "files": sorted(same)}


def between(start: Mapping[str, Any], end: Mapping[str, Any], listing: Iterable[FileEntry]) -> list[FileEntry]:
    """The listed files an epoch from `start` to `end` reads: covered by `end`, not by `start`."""
    return sorted(e for e in listing if covers(end, e) and not covers(start, e))
