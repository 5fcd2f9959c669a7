"""The print sink: sampled rows as JSON lines on stdout (logs go to stderr).

Line format: ``<n> -> (sample_every=<k>) [Insert|Update|Delete] {json row incl. _gs_op}`` where ``n`` is
the row's 1-based position in everything this sink has received during the run. Rows ``1, k+1, 2k+1…``
are printed; the rest are counted but not formatted.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from streamling.config.units import Milliseconds
from streamling.core.rows import GS_OP, json_default
from streamling.plugin import DriverSink, Epoch
from streamling.spec import SinkSpec, ignored_fields

ROW_KINDS = {"i": "Insert", "u": "Update", "d": "Delete"}
_stdout_lock = threading.Lock()


class PrintSinkSpec(SinkSpec):
    type: Literal["print"]
    sample_every: PositiveInt | None = None
    num_records_before_stop: PositiveInt | None = None
    """Once this sink has written this many rows, it requests the graceful stop the setting of that name requests
    for any sink (the node's field wins over the settings)."""
    parallelism: PositiveInt | None = None
    """Accepted for the original's pipelines; the driver prints every epoch in order (a warning at start)."""
    batch_size: PositiveInt | None = None
    """Accepted for the original's pipelines; each epoch is printed as it is written (a warning at start)."""
    batch_flush_interval: Milliseconds | None = None
    """The longest rows wait: sources feeding this sink close epochs at least this often."""


class PrintSinkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["batch"] = "batch"
    """The original's plugin sink printed whole batches; here every epoch's rows print as it is written."""


class OriginalPrintSinkSpec(PrintSinkSpec):
    """``print_sink``: the name (and ``options``) the original's plugin example gives its print sink."""

    type: Literal["print_sink"]  # type: ignore[assignment]
    options: PrintSinkOptions = Field(default_factory=PrintSinkOptions)


class PrintSink(DriverSink[PrintSinkSpec]):
    spec_model: ClassVar[type[PrintSinkSpec]] = PrintSinkSpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.seen = 0
        self._lock = threading.Lock()

    def warnings(self) -> list[str]:
        return ignored_fields(
            self.label,
            self.spec,
            {
                "parallelism": "the driver prints each epoch's rows in order; Spark's tasks compute them before that",
                "batch_size": "each epoch's rows are printed when it is written; an epoch holds up to "
                "record_batch_size rows",
            },
        )

    @property
    def sample_every(self) -> int:
        return self.spec.sample_every or self.settings.print_sink.sample_every

    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        k = self.sample_every
        with self._lock:  # several source queries may feed one sink
            first = self.seen
            self.seen += batch.num_rows
        # Row with 0-based batch index j has global number first + j + 1; print when (that - 1) % k == 0.
        start = (-first) % k
        picked = batch.take(pa.array(range(start, batch.num_rows, k), type=pa.int64()))
        lines = []
        for j, row in enumerate(picked.to_pylist()):
            number = first + start + j * k + 1
            kind = ROW_KINDS.get(row.get(GS_OP) or "i", "Insert")
            text = json.dumps(row, default=json_default, ensure_ascii=False)
            lines.append(f"{number} -> (sample_every={k}) [{kind}] {text}\n")
        if lines:
            with _stdout_lock:
                sys.stdout.write("".join(lines))
                sys.stdout.flush()


class OriginalPrintSink(PrintSink):
    """The print sink registered as ``print_sink``, with the original's ``options`` block."""

    spec_model: ClassVar[type[PrintSinkSpec]] = OriginalPrintSinkSpec
