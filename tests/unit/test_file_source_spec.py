"""The file source's YAML validation (exact messages, no Spark), its position rules and its listing."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from streamling.files import positions
from streamling.files.listing import FileEntry, filesystem, hive_values, list_files, split_glob
from streamling.files.spec import FileSourceSpec
from streamling.topology.pipeline import load_pipeline


def check(fields: str, job_mode: bool = False) -> list[str]:
    text = f"""
        sources:
          files: {{type: file, {fields}}}
        sinks:
          out: {{type: blackhole, from: files}}
        """
    return load_pipeline(textwrap.dedent(text), job_mode=job_mode)[1].errors


def spec(**fields: object) -> FileSourceSpec:
    return FileSourceSpec.model_validate({"type": "file", **fields})


def test_formats_aliases_and_suffixes() -> None:
    assert spec(path="/d", format="parquet").format == "parquet"
    assert spec(path="/d", format="NDJSON").format == "json"
    assert spec(path="/d", format="jsonl").format == "json"
    assert spec(path="/d", format="avro").format == "avro"
    assert spec(path="/d/events.csv").format == "csv"
    assert spec(path="/d/*.jsonl").format == "json"


def test_mode_defaults_to_continuous_every_five_seconds_and_parses_units() -> None:
    default = spec(path="/d", format="csv")
    assert (default.mode.type, default.mode.poll_sec, default.bounded) == ("continuous", 5.0, False)
    assert spec(path="/d", format="csv", mode={"type": "continuous", "poll_interval": "250ms"}).mode.poll_sec == 0.25
    assert spec(path="/d", format="csv", mode={"type": "continuous", "poll_interval": "2m"}).mode.poll_sec == 120.0
    assert spec(path="/d", format="csv", mode={"type": "bounded"}).bounded


def test_object_store_schemes_are_accepted() -> None:
    for path in ("s3://bucket/events/", "s3a://bucket/events/", "gs://bucket/events/*.parquet", "file:///tmp/x"):
        assert check(f"path: '{path}', format: parquet") == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            "path: 'ftp://host/x', format: csv",
            "source 'files' (type 'file'): field 'path': unsupported scheme ftp; use a local path or an s3://, s3a:// "
            "or gs:// URL (got 'ftp://host/x')",
        ),
        (
            "path: /data/x",
            "source 'files' (type 'file'): field 'format' is required (parquet, csv, json, avro): the path has no "
            "such suffix",
        ),
        (
            "path: /data/x, format: xml",
            "source 'files' (type 'file'): field 'format': unknown format 'xml'; use one of parquet, csv, json "
            "(ndjson, jsonl), avro (got 'xml')",
        ),
        (
            "path: /data/x, format: csv, mode: {type: bounded, poll_interval: 5s}",
            "source 'files' (type 'file'): field 'mode': 'poll_interval' applies only to mode type 'continuous' "
            "(got {'type': 'bounded', 'poll_interval': '5s'})",
        ),
        (
            "path: /data/x, format: csv, mode: {type: sometimes}",
            "source 'files' (type 'file'): field 'mode.type': Input should be 'bounded' or 'continuous' "
            "(got 'sometimes')",
        ),
    ],
)
def test_invalid_fields_name_the_node_and_the_field(fields: str, message: str) -> None:
    assert check(fields) == [message]


def test_job_mode_accepts_only_a_bounded_file_source_and_names_the_node() -> None:
    assert check("path: /data/x, format: csv", job_mode=True) == [
        "job mode needs bounded sources, but these sources are unbounded: files"
    ]
    assert check("path: /data/x, format: csv, mode: {type: continuous, poll_interval: 1s}", job_mode=True) == [
        "job mode needs bounded sources, but these sources are unbounded: files"
    ]
    assert check("path: /data/x, format: csv, mode: {type: bounded}", job_mode=True) == []


def entry(mtime: int, path: str, size: int = 10) -> FileEntry:
    return FileEntry(mtime, path, size)


def test_a_position_covers_older_files_and_the_listed_ones_of_its_time() -> None:
    position = {"last_modified": 100, "files": ["/d/b"]}
    assert positions.covers(position, entry(99, "/d/z"))
    assert positions.covers(position, entry(100, "/d/b"))
    assert not positions.covers(position, entry(100, "/d/a"))  # same time, not read yet
    assert not positions.covers(position, entry(101, "/d/b"))  # rewritten: a newer time
    assert not positions.covers(positions.INITIAL, entry(0, "/d/a"))


def test_epochs_take_whole_files_in_time_then_path_order_and_resume_exactly() -> None:
    listing = [entry(5, "/d/c"), entry(3, "/d/b"), entry(3, "/d/a"), entry(7, "/d/d", size=100)]
    start = dict(positions.INITIAL)
    first = positions.take(positions.pending(start, listing), max_bytes=20, max_files=10)
    assert [e.path for e in first] == ["/d/a", "/d/b"]
    middle = positions.advance(start, first[:1])
    assert middle == {"last_modified": 3, "files": ["/d/a"]}
    # a restart from the middle reads b, not a
    assert [e.path for e in positions.pending(middle, listing)] == ["/d/b", "/d/c", "/d/d"]
    end = positions.advance(middle, [entry(3, "/d/b")])
    assert end == {"last_modified": 3, "files": ["/d/a", "/d/b"]}
    assert [e.path for e in positions.between(start, end, listing)] == ["/d/a", "/d/b"]
    # one file bigger than the budget still makes an epoch on its own
    rest = positions.pending(end, listing)
    assert [e.path for e in positions.take(rest, max_bytes=20, max_files=10)] == ["/d/c"]
    assert [e.path for e in positions.take(rest[1:], max_bytes=20, max_files=10)] == ["/d/d"]
    final = positions.advance(end, rest)
    assert final == {"last_modified": 7, "files": ["/d/d"]}
    assert positions.pending(final, listing) == []
    # a file that appears with an older time is skipped; a deletion changes nothing
    assert positions.pending(final, [*listing[:2], entry(6, "/d/late")]) == []


def test_hive_folders_and_globs(tmp_path: Path) -> None:
    assert hive_values("year=2024/month=05/x.csv") == (("year", "2024"), ("month", "05"))
    assert hive_values("region=eu%2Fwest/plain/x.csv") == (("region", "eu/west"),)
    assert hive_values("k=__HIVE_DEFAULT_PARTITION__/x.csv") == (("k", None),)
    assert split_glob("/d/x=*/part-*.csv") == ("/d", "/d/x=*/part-*.csv")
    assert split_glob("/d/events") == ("/d/events", None)
    for name in ("a.csv", "k=1/b.csv", "k=2/deep/c.csv", "_temporary/d.csv", ".hidden.csv", "k=1/e.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    os.utime(tmp_path / "a.csv", ns=(1, 5_000_000_000))
    fs, path = filesystem(str(tmp_path))
    base, files = list_files(fs, path)
    assert base == str(tmp_path)
    assert sorted(os.path.relpath(e.path, tmp_path) for e in files) == [
        "a.csv",
        "k=1/b.csv",
        "k=1/e.json",
        "k=2/deep/c.csv",
    ]
    assert files[0].path.endswith("a.csv") and files[0].mtime_ns == 5_000_000_000  # the oldest first
    _, globbed = list_files(fs, f"{tmp_path}/*.csv")
    assert sorted(os.path.relpath(e.path, tmp_path) for e in globbed) == ["a.csv", "k=1/b.csv", "k=2/deep/c.csv"]
    _, single = list_files(fs, f"{tmp_path}/k=1/b.csv")
    assert [os.path.relpath(e.path, tmp_path) for e in single] == ["k=1/b.csv"]
    assert list_files(fs, f"{tmp_path}/absent")[1] == []


def test_the_control_plane_sees_the_files_as_an_object_of_their_store_and_folders(make_settings) -> None:
    from streamling.files.source import FileSource

    def key(path: str) -> tuple[str, ...]:
        source = FileSource("files", spec(path=path, format="parquet"), make_settings())
        (read,) = source.reads()
        return read.key

    assert key("/data/events/") == ("file", "data", "events")
    assert key("s3a://lake/events/*.parquet") == ("s3", "lake", "events", "*.parquet")
    assert key("gs://lake/x") == ("gs", "lake", "x")
