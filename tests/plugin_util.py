"""Plugins written into a test's tmp dir, as an author would write them outside the repo, and a
distribution's entry point made visible to `importlib.metadata` by a dist-info folder on the path."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

# One plugin module holding the six kinds. `{ns}` is its namespace (and file name), unique per test because
# Spark's Python workers and this process keep a module once imported.
SIX_KINDS = '''
from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.compute as pc

from streamling.plugin import (
    ArrowSink, ArrowSource, ArrowTransform, Options, Plugin, PolledSource, Preprocessor, SideOutput, SqlFunction,
)

MARKS = os.environ.get("ACME_MARKS")


def mark(what: str) -> None:
    """Leaves a trace of plugin I/O, so a test can tell that validation did none."""
    if MARKS:
        with open(MARKS, "a") as out:
            out.write(what + "\\n")


class CounterOptions(Options):
    rows: int
    step: int = 4
    fail_at: int | None = None


class Counter(ArrowSource[CounterOptions]):
    """Rows 0 .. rows-1; position = the next row; `step` rows per epoch."""

    options_model = CounterOptions
    bounded = True

    def output_schema(self):
        return pa.schema([("id", pa.int64()), ("label", pa.string())])

    def initial_position(self):
        return 0

    def latest_position(self, start):
        return min(start + self.options.step, self.options.rows)

    def partitions(self, start, end):
        middle = (start + end) // 2
        return [(start, middle), (middle, end)] if end - start > 1 else [(start, end)]

    def read(self, start, end):
        if self.options.fail_at is not None and start <= self.options.fail_at < end:
            raise RuntimeError(f"row {{self.options.fail_at}} is cursed")
        ids = pa.array(range(start, end), pa.int64())
        yield pa.record_batch([ids, pc.binary_join_element_wise("row", pc.cast(ids, pa.string()), "")],
                              names=["id", "label"])

    def finished(self, position):
        return position >= self.options.rows

    def backlog(self, position):
        return {{"rows": self.options.rows - (position or 0)}}

    def open(self):
        mark("open counter")


class PagesOptions(Options):
    pages: int = 3
    size: int = 2
    quiet_polls: int = 0
    """Polls that find nothing new before the first page arrives."""


class Pages(PolledSource[PagesOptions]):
    """A partner API on the driver: page n holds ids n*size .. n*size+size-1; the cursor is the next page."""

    options_model = PagesOptions
    bounded = True
    poll_interval_sec = 0.05

    def output_schema(self):
        return pa.schema([("id", pa.int64()), ("page", pa.int64())])

    def poll(self, after):
        self.polled = getattr(self, "polled", 0) + 1
        if self.polled <= self.options.quiet_polls:
            return None
        page = 0 if after is None else after
        if page >= self.options.pages:
            return None
        self.state.put("polls", (self.state.get("polls") or 0) + 1)
        ids = list(range(page * self.options.size, (page + 1) * self.options.size))
        return pa.table({{"id": ids, "page": [page] * len(ids)}}), page + 1

    def finished(self, position):
        return position is not None and position >= self.options.pages


class KeepOptions(Options):
    min_id: int = 0


class Keep(ArrowTransform[KeepOptions]):
    options_model = KeepOptions

    def output_schema(self, input_schema):
        return pa.schema([input_schema.field("id"), input_schema.field("label"), ("tag", pa.string())])

    def transform(self, batch):
        kept = batch.filter(pc.greater_equal(batch.column("id"), self.options.min_id))
        tags = pa.array(["kept"] * kept.num_rows, pa.string())
        return pa.record_batch([kept.column("id"), kept.column("label"), tags], names=["id", "label", "tag"])


class FileOptions(Options):
    path: str
    fail_on_epoch: int | None = None
    fail_detail_lines: int = 0
    fail_delay_sec: float = 0


class FileSink(ArrowSink[FileOptions]):
    """JSON lines, buffered per epoch and written on flush; counts rows in its state."""

    options_model = FileOptions

    def open(self):
        mark("open sink")
        self.pending = []

    def write(self, batch, epoch):
        if self.options.fail_on_epoch == epoch.id:
            # As a failed Spark call on the driver reports itself, with a long Java stack under it.
            detail = "".join(f"\\n  at frame {{i}}" for i in range(self.options.fail_detail_lines))
            detail = detail and "\\npy4j.protocol.Py4JJavaError: An error occurred while calling o1.write." + detail
            time.sleep(self.options.fail_delay_sec)
            raise ValueError(f"cannot write epoch {{epoch.id}}{{detail}}")
        self.pending += batch.to_pylist()
        self.state.put("rows", (self.state.get("rows") or 0) + batch.num_rows)

    def flush(self, epoch):
        with open(self.options.path, "a") as out:
            for row in self.pending:
                out.write(json.dumps({{k: v for k, v in row.items()}}, default=str) + "\\n")
        self.pending = []

    def finalize(self, epoch):
        with open(self.options.path + ".committed", "a") as out:
            out.write(f"{{epoch.id}}\\n")

    def labels(self):
        return {{"destination": os.path.basename(self.options.path)}}


class AuditOptions(Options):
    path: str


class Audit(SideOutput[AuditOptions]):
    options_model = AuditOptions

    def observe(self, batch, epoch):
        self.seen = getattr(self, "seen", 0) + batch.num_rows

    def flush(self, epoch):
        self.state.put("seen", (self.state.get("seen") or 0) + getattr(self, "seen", 0))
        self.seen = 0

    def finalize(self, epoch):
        with open(self.options.path, "a") as out:
            out.write(f"{{epoch.id}} {{self.state.get('seen')}}\\n")


class Shout(SqlFunction):
    name = "{ns}_shout"
    arguments = ["string", "bigint"]
    returns = "string"

    def __call__(self, text, times):
        return pc.binary_join_element_wise(pc.utf8_upper(text), pc.cast(times, pa.string()), "!")


class RenameOptions(Options):
    prefix: str = "pre_"


class Rename(Preprocessor[RenameOptions]):
    """Prefixes every sink's name: a definition rewritten before parsing."""

    name = "rename"
    options_model = RenameOptions

    def process(self, definition):
        definition["sinks"] = {{self.options.prefix + k: v for k, v in (definition.get("sinks") or {{}}).items()}}
        return definition


PLUGIN = Plugin(
    namespace="{ns}",
    operators={{"counter": Counter, "pages": Pages, "keep": Keep, "file": FileSink}},
    side_outputs={{"audit": Audit}},
    functions=[Shout],
    preprocessors=[Rename],
)
'''


def write_six_kinds(directory: Path, namespace: str) -> Path:
    """The plugin file ``<namespace>.py`` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{namespace}.py"
    path.write_text(SIX_KINDS.format(ns=namespace))
    return path


def write_plugin(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def write_distribution(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """An installed distribution as `importlib.metadata` finds it: ``<dist>-1.0.dist-info`` with its
    ``entry_points.txt`` (group ``streamling.plugins``) beside its modules, in `site` (put it on the path)."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[streamling.plugins]\n{lines}")
    for module, text in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(text))
    return site


# A partner-API source and an archive sink with their own Dagster objects (`reads`/`writes`), backlog and
# identity labels; a stream that cannot tell its backlog. `{ns}` as in SIX_KINDS.
FEED = '''
import json

import pyarrow as pa

from streamling.plugin import ArrowSink, ArrowSource, ExternalObject, Options, Plugin


class FeedOptions(Options):
    endpoint: str
    rows: int
    """The backfill reads the first `rows` orders..."""
    held: int
    """...of the `held` the partner API offers: the backlog after a backfill is the difference."""


class Feed(ArrowSource[FeedOptions]):
    """Orders from a partner API by number; the position is the next order's."""

    options_model = FeedOptions
    bounded = True

    def output_schema(self):
        return pa.schema([("id", pa.int64()), ("amount", pa.int64())])

    def initial_position(self):
        return 0

    def latest_position(self, start):
        return min(start + 4, self.options.rows)

    def read(self, start, end):
        ids = list(range(start, end))
        yield pa.record_batch([pa.array(ids, pa.int64()), pa.array([i * 10 for i in ids], pa.int64())],
                              names=["id", "amount"])

    def finished(self, position):
        return position >= self.options.rows

    def backlog(self, position):
        return {{"0": self.options.held - (position or 0)}}

    def reads(self):
        if "/" in self.options.endpoint:
            raise ValueError(f"endpoint {{self.options.endpoint!r}} must not contain '/'")
        return [ExternalObject("acme", ("partner_api", self.options.endpoint),
                               "Orders as the ACME partner API offers them.",
                               {{"endpoint": f"https://api.acme.example/{{self.options.endpoint}}", "partitions": 1}})]


class Ticker(ArrowSource[Options]):
    """A stream that reads something outside the pipeline but cannot tell its backlog."""

    def output_schema(self):
        return pa.schema([("id", pa.int64())])

    def initial_position(self):
        return 0

    def latest_position(self, start):
        return start + 1

    def read(self, start, end):
        yield pa.record_batch([pa.array(range(start, end), pa.int64())], names=["id"])

    def reads(self):
        return [ExternalObject("acme", ("ticks",))]


class ArchiveOptions(Options):
    bucket: str
    path: str
    label: str | None = None
    """An identity label key, to try the label rules."""


class Archive(ArrowSink[ArchiveOptions]):
    """JSON lines, written when the epoch flushes."""

    options_model = ArchiveOptions

    def open(self):
        self.pending = []

    def write(self, batch, epoch):
        self.pending += batch.to_pylist()

    def flush(self, epoch):
        with open(self.options.path, "a") as out:
            out.writelines(json.dumps(row) + "\\n" for row in self.pending)
        self.pending = []

    def writes(self):
        return [ExternalObject("objectstore", (self.options.bucket, "orders"), "Order archive, JSON lines.",
                               {{"bucket": self.options.bucket, "format": "jsonl"}})]

    def labels(self):
        return {{self.options.label: self.options.bucket}} if self.options.label else {{}}


PLUGIN = Plugin(namespace="{ns}", operators={{"feed": Feed, "ticker": Ticker, "archive": Archive}})
'''


@dataclass
class FeedPlugin:
    namespace: str
    pipelines: Path
    """Its pipeline files (`write_feed_pipelines`)."""
    archive: Path
    """The file the archive sink of ``feed.yaml`` writes."""


def write_feed_pipelines(root: Path, ns: str) -> FeedPlugin:
    """`root/pipelines`: ``feed.yaml`` (the feed's first 10 of 25 orders into the archive) and ``typo.yaml``
    (a type no plugin defines)."""
    pipelines = root / "pipelines"
    pipelines.mkdir()
    archive = root / "archive.jsonl"
    (pipelines / "feed.yaml").write_text(
        textwrap.dedent(
            f"""
            sources:
              orders: {{type: {ns}.feed, primary_key: id, endpoint: orders, rows: 10, held: 25}}
            sinks:
              archive: {{type: {ns}.archive, from: orders, bucket: lake, path: {archive}}}
            """
        )
    )
    (pipelines / "typo.yaml").write_text(
        f"sources:\n  orders: {{type: {ns}.fed, endpoint: x}}\nsinks:\n  out: {{type: print, from: orders}}\n"
    )
    return FeedPlugin(ns, pipelines, archive)
