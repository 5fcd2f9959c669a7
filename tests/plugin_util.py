"""Plugins written into a test's tmp dir, as an author would write them outside the repo, and a
distribution's entry point made visible to `importlib.metadata` by a dist-info folder on the path."""

from __future__ import annotations

import textwrap
from pathlib import Path

# One plugin module holding the six kinds. `{ns}` is its namespace (and file name), unique per test because
# Spark's Python workers and this process keep a module once imported.
SIX_KINDS = '''
from __future__ import annotations

import json
import os

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


class FileSink(ArrowSink[FileOptions]):
    """JSON lines, buffered per epoch and written on flush; counts rows in its state."""

    options_model = FileOptions

    def open(self):
        mark("open sink")
        self.pending = []

    def write(self, batch, epoch):
        if self.options.fail_on_epoch == epoch.id:
            raise ValueError(f"cannot write epoch {{epoch.id}}")
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
