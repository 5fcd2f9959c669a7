"""The `file` source operator (driver side): the schema inferred from the files, positions in the state backend
under ``<source>:file``, and the stream reader (`reader.py`) whose tasks read the files."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from streamling.core.rows import GS_OP
from streamling.dead_letters import DeadLetterTarget
from streamling.errors import StreamlingError
from streamling.files import positions
from streamling.files.listing import SCHEMES, FileEntry, filesystem, list_files, scheme_of
from streamling.files.spec import FileSourceSpec
from streamling.plugin import ExternalObject, RunContext, Source
from streamling.state import StateBackend
from streamling.telemetry.tasks import OFF, NodeRecorder

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from streamling.files.reader import FileStreamReader

log = logging.getLogger("streamling.files")


class FileSource(Source[FileSourceSpec]):
    spec_model: ClassVar[type[FileSourceSpec]] = FileSourceSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._partition_columns: list[str] = []
        """Columns from Hive-style ``key=value`` folders (a column the files have wins over a folder's)."""
        self._snapshot: list[FileEntry] | None = None
        """A bounded source's files, listed once when the run loads its position."""
        self.dead_letter = (
            DeadLetterTarget.of(self.spec.dead_letter, self.settings, self.name, self.label, None)
            if self.spec.dead_letter is not None
            else None
        )
        self._recorder: NodeRecorder = OFF
        """Where its reading tasks count dead-lettered lines (set when telemetry is on)."""

    def initialize(self, ctx: RunContext) -> None:
        recorder = ctx.recorder(self.name)
        if recorder.active:
            self._recorder = recorder
        if self.dead_letter is not None:
            self.dead_letter.prepare()

    @property
    def state_key(self) -> str:
        return f"{self.name}:file"

    def reads(self) -> list[ExternalObject]:
        """The files as the control plane's asset: keyed by the store (``file``, ``s3``, ``gs``) and the path's
        folders, so two pipelines reading one folder share it."""
        scheme = scheme_of(self.spec.path)
        store = SCHEMES.get(scheme, "file") if scheme is not None else "file"
        rest = self.spec.path.split("://", 1)[1] if scheme is not None else os.path.abspath(self.spec.path)
        parts = tuple(p for p in rest.split("/") if p)
        return [ExternalObject(store, parts or ("/",), description=f"{self.spec.format} files at {self.spec.path}")]

    def _list(self) -> tuple[str, list[FileEntry]]:
        fs, path = filesystem(self.spec.path)
        try:
            return list_files(fs, path)
        except OSError as exc:
            raise StreamlingError.retry(f"{self.label}: cannot list {self.spec.path}: {exc}") from None

    @cached_property
    def _arrow_schema(self) -> pa.Schema:
        """The files' columns (inferred), then the Hive partition columns, then ``_gs_op`` unless a file has it."""
        import pyarrow as pa

        from streamling.files.formats import infer_schema

        wanted = self.settings.backfill_range
        if wanted is not None and not wanted.by_time:
            raise StreamlingError.user(
                f"{self.label}: backfill_range {wanted} is of integers; a file source's ranges are of the files' "
                "modification times (dates or date-times)"
            )
        if wanted is not None and wanted.column not in (None, "last_modified"):
            raise StreamlingError.user(
                f"{self.label}: backfill_range column '{wanted.column}': a file source's ranges are of the files' "
                "modification times (column 'last_modified', or none)"
            )
        _, files = self._list()
        if not files:
            raise StreamlingError.user(f"{self.label}: no files matching {self.spec.path}")
        try:
            fs = filesystem(self.spec.path)[0]
            data = infer_schema(fs, files, self.spec.format or "", dead_letters=self.dead_letter is not None)
        except StreamlingError as exc:
            raise exc.context(self.label) from None
        fields = list(data)
        keys: dict[str, list[str | None]] = {}
        for entry in files:
            for key, value in entry.partition:
                keys.setdefault(key, []).append(value)
        self._partition_columns = [key for key in keys if key not in data.names]
        fields += [pa.field(key, _partition_type(keys[key])) for key in self._partition_columns]
        if GS_OP in data.names:
            fields = [f if f.name != GS_OP else pa.field(GS_OP, pa.string()) for f in fields]
        else:
            fields.append(pa.field(GS_OP, pa.string(), nullable=False))
        return pa.schema(fields)

    def schema(self) -> T.StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        try:
            return from_arrow_schema(self._arrow_schema)
        except StreamlingError:
            raise
        except Exception as exc:
            raise StreamlingError.user(f"{self.label}: a column type Spark cannot hold: {exc}") from None

    def _in_range(self) -> list[FileEntry]:
        """The files a bounded run reads: all listed, or with a `backfill_range` (a Dagster time partition) those
        modified within it, [start, end)."""
        files = self._list()[1]
        wanted = self.settings.backfill_range
        if wanted is None:
            return files
        start, end = (int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000 for t in (wanted.start, wanted.end))
        log.info("%s reads the files modified in %s", self.label, wanted)
        return [e for e in files if start <= e.mtime_ns < end]

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        position = self.committed_position(state) or dict(positions.INITIAL)
        if self.spec.bounded:
            self._snapshot = self._in_range()
            left = positions.pending(position, self._snapshot)
            log.info("%s reads %d of the %d files at %s", self.label, len(left), len(self._snapshot), self.spec.path)
        return position

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        saved = state.get(self.state_key)
        if not saved:
            return None
        return {"last_modified": int(saved["last_modified"]), "files": list(saved.get("files", []))}

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        return {
            self.state_key: {
                "last_modified": int(end["last_modified"]),
                "files": list(end.get("files", [])),
                "updated_at": now_ms,
            }
        }

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        if not self.spec.bounded or self._snapshot is None:
            return False
        return not positions.pending(position, self._snapshot)

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> FileStreamReader:
        from streamling.files.reader import FileStreamReader, schema_hex

        arrow_schema = self._spark_arrow_schema()  # infers the schema, and with it the partition columns
        config = {
            "source": self.name,
            "path": self.spec.path,
            "format": self.spec.format,
            "arrow_schema": schema_hex(arrow_schema),
            "partition_columns": list(self._partition_columns),
            "poll_sec": self.spec.mode.poll_sec,
            "parallelism": self.spec.parallelism or spark.sparkContext.defaultParallelism,
            "batch_rows": min(self.settings.record_batch_size, 65_536),
            **(self.dead_letter.to_options() if self.dead_letter is not None else {}),
        }
        snapshot = self._snapshot if self.spec.bounded else None
        if self.spec.bounded and snapshot is None:
            snapshot = self._snapshot = self._in_range()
        return FileStreamReader(config, snapshot, replay_end, self._recorder)

    def _spark_arrow_schema(self) -> pa.Schema:
        """The Arrow schema Spark expects of the tasks' batches (timestamps in UTC microseconds, as Spark's)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.schema(), timezone="UTC")


def _partition_type(values: list[str | None]) -> pa.DataType:
    """A Hive partition column's type: bigint when every value listed at start is an integer, else string."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(_is_int(v) for v in present):
        return pa.int64()
    return pa.string()


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
