"""jsonl_sink: one JSON-lines file per epoch, made durable before the epoch commits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from streamling.plugin import ArrowSink, Epoch, ExternalObject, Options


class JsonLinesOptions(Options):
    directory: str


class JsonLinesSink(ArrowSink[JsonLinesOptions]):
    """Writes ``<directory>/<source>-<epoch>.jsonl``. An epoch replayed after a crash starts at the same committed
    position under the same id, so its file replaces the lost attempt's: every row is in exactly one file."""

    options_model = JsonLinesOptions

    def open(self) -> None:
        self.directory = Path(self.options.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pending: dict[tuple[str, int], list[pa.RecordBatch]] = {}

    def write(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        self.pending.setdefault((epoch.source, epoch.id), []).append(batch)

    def flush(self, epoch: Epoch) -> None:
        batches = self.pending.pop((epoch.source, epoch.id), [])
        if not batches:
            return
        path = self.directory / f"{epoch.source}-{epoch.id:08d}.jsonl"
        partial = path.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as out:
            for batch in batches:
                for row in batch.to_pylist():
                    out.write(json.dumps(row, default=str) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)  # atomic: a reader sees the whole epoch or none of it

    def labels(self) -> dict[str, str]:
        return {"directory": self.options.directory}

    def writes(self) -> list[ExternalObject]:
        # the directory as the pipeline names it: resolving it would put the checkout's path into the asset key
        return [ExternalObject("files", (self.options.directory,))]
