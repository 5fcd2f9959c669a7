"""The file source's stream reader: epochs of whole files planned on the driver (`runtime/reading.py` hosts it),
read by Spark tasks in the Python workers, a few files per task.

On the driver `latestOffset` lists the path (a continuous source at most once per `poll_interval`; a bounded one
reads the listing its source took at start) and takes the next files after the position; `partitions` splits an
epoch's files into at most `parallelism` contiguous groups of about equal bytes. The listing is not pickled: the
tasks get their files in their partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from streamling.errors import StreamlingError
from streamling.files import positions
from streamling.files.listing import FileEntry, filesystem, list_files
from streamling.telemetry.tasks import OFF, NodeRecorder

if TYPE_CHECKING:
    import pyarrow as pa

    from streamling.files.lines import BadLine

EPOCH_BYTES = 256 * 1024 * 1024
"""An epoch takes files until this many bytes (at least one file), so a large backlog commits as it goes."""
EPOCH_FILES = 10_000


class Files(InputPartition):
    def __init__(self, entries: Sequence[FileEntry]) -> None:
        self.entries = list(entries)


class FileStreamReader(DataSourceStreamReader):
    def __init__(
        self,
        config: Mapping[str, Any],
        snapshot: Sequence[FileEntry] | None,
        replay_end: Mapping[str, Any] | None,
        recorder: NodeRecorder = OFF,
    ) -> None:
        self.config = dict(config)
        """source (its name), path, format, arrow_schema (IPC bytes, hex), partition_columns, poll_sec, parallelism,
        batch_rows, and the dead-letter target's options (`DeadLetterTarget.to_options`) with ``on_error:
        dead_letter``."""
        self.replay_end = dict(replay_end) if replay_end is not None else None
        self.recorder = recorder
        """Where the tasks count dead-lettered lines."""
        self._listing: list[FileEntry] | None = list(snapshot) if snapshot is not None else None
        self._bounded = snapshot is not None
        self._listed_at = -float("inf")

    def __getstate__(self) -> dict[str, Any]:
        """The tasks read the files their partition names; the driver's listing stays on the driver."""
        return {**self.__dict__, "_listing": None}

    def _current(self, refresh: bool) -> list[FileEntry]:
        """The listing: taken again (continuous mode) when `refresh` and `poll_sec` passed since the last one."""
        due = time.monotonic() - self._listed_at >= float(self.config["poll_sec"])
        if self._listing is None or (refresh and not self._bounded and due):
            fs, path = filesystem(self.config["path"])
            self._listing = list_files(fs, path)[1]
            self._listed_at = time.monotonic()
        return self._listing

    def initialOffset(self) -> dict:
        return dict(positions.INITIAL)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if self.replay_end is not None:  # the first epoch repeats one a sink already applied
            end, self.replay_end = self.replay_end, None
            return end
        waiting = positions.pending(start, self._current(refresh=False))
        if not waiting:
            waiting = positions.pending(start, self._current(refresh=True))
        if not waiting:
            return dict(start)
        return positions.advance(start, positions.take(waiting, EPOCH_BYTES, EPOCH_FILES))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        files = positions.between(start, end, self._current(refresh=False))
        return [Files(group) for group in split(files, int(self.config["parallelism"]))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Files)
        import pyarrow as pa

        from streamling.files.formats import read_file

        target = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(self.config["arrow_schema"])))
        fs, _ = filesystem(self.config["path"])
        dead_letters = bool(self.config.get("dead_letter"))
        for entry in partition.entries:
            try:
                table, bad = read_file(
                    fs, entry, self.config["format"], target, self.config["partition_columns"], dead_letters
                )
            except StreamlingError as exc:
                raise exc.context(f"file source '{self.config['source']}'") from None
            except FileNotFoundError:
                continue  # deleted since it was listed: a deletion changes nothing
            if bad:
                self._deliver(entry, bad)
            yield from table.to_batches(max_chunksize=int(self.config["batch_rows"]))

    def _deliver(self, entry: FileEntry, bad: Sequence[BadLine]) -> None:
        """A file's bad lines go to the dead-letter target before its rows are handed over: the epoch commits only
        after every task returned, so a dead letter is written before the position passes its file."""
        from streamling.dead_letters import DeadLetter, DeadLetterTarget

        target = DeadLetterTarget.from_options(self.config)
        assert target is not None
        target.deliver(
            [
                DeadLetter(
                    error=f"{entry.path}: line {b.line}: {b.error}",
                    topic=entry.path,
                    offset=b.line,
                    value=b.raw,
                    version=str(entry.mtime_ns),
                )
                for b in bad
            ]
        )
        self.recorder.count("dead_lettered", len(bad))

    def commit(self, end: dict) -> None:
        """Positions are committed by the runtime to the state backend, not here."""


def split(files: Sequence[FileEntry], parallelism: int) -> list[list[FileEntry]]:
    """`files` in at most `parallelism` contiguous groups of about equal bytes (a file is never split)."""
    if not files:
        return []
    count = max(1, min(parallelism, len(files)))
    total = sum(max(1, e.size) for e in files)
    groups: list[list[FileEntry]] = [[]]
    done = 0
    for entry in files:
        share = total * len(groups) / count
        if groups[-1] and done >= share and len(groups) < count:
            groups.append([])
        groups[-1].append(entry)
        done += max(1, entry.size)
    return groups


def schema_hex(schema: pa.Schema) -> str:
    """An Arrow schema as text for the reader's config (it travels pickled to the tasks)."""
    return schema.serialize().to_pybytes().hex()
