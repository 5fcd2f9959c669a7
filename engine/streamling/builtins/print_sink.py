"""The print sink: sampled rows as JSON lines on stdout (logs go to stderr).

Line format: ``<n> -> (sample_every=<k>) [Insert|Update|Delete] {json row incl. _gs_op}`` where ``n`` is
the row's 1-based position in everything this sink has received during the run. Rows ``1, k+1, 2k+1…``
are printed; the rest are counted but not formatted.

It is the built-in written on the Arrow level (`streamling.plugin.ArrowSink`), as plugins are: a sink that
prints an epoch's rows in order on the driver needs nothing from Spark but those rows, which the runtime
collects for it (``bench/print_sink_tiers.py`` measures what the adapter costs next to the Spark-level version it
replaced). It is the living example `docs/writing-a-plugin.md` points plugin authors at; like every built-in,
it imports the operator interface only from `streamling.plugin`.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Literal

import pyarrow as pa
from pydantic import PositiveInt

from streamling.core.rows import GS_OP, json_default
from streamling.plugin import ArrowSink, Context, Epoch, Options

ROW_KINDS = {"i": "Insert", "u": "Update", "d": "Delete"}
_stdout_lock = threading.Lock()


class PrintOptions(Options):
    """``type: print``'s fields, given at the node's top level as the original's pipelines do (``options:`` works
    too). ``batch_flush_interval`` is a field of every Arrow-level sink: sources feeding it close epochs at least
    that often."""

    sample_every: PositiveInt | None = None
    """Print rows 1, k+1, 2k+1…; unset: the setting ``print_sink.sample_every``."""
    num_records_before_stop: PositiveInt | None = None
    """Once this sink has written this many rows, it requests the graceful stop the setting of that name requests
    for any sink (the node's field wins over the settings)."""
    parallelism: PositiveInt | None = None
    """Accepted for the original's pipelines; the driver prints every epoch in order (a warning at start)."""
    batch_size: PositiveInt | None = None
    """Accepted for the original's pipelines; each epoch is printed as it is written (a warning at start)."""


class OriginalPrintOptions(PrintOptions):
    """``print_sink``: the name (and ``options``) the original's plugin example gives its print sink."""

    mode: Literal["batch"] = "batch"
    """The original's plugin sink printed whole batches; here every epoch's rows print as it is written."""


IGNORED = {
    "parallelism": "the driver prints each epoch's rows in order; Spark's tasks compute them before that",
    "batch_size": "each epoch's rows are printed when it is written; an epoch holds up to record_batch_size rows",
}
"""The original's fields that change nothing here, with what they map to (a warning at start)."""


class PrintSink(ArrowSink[PrintOptions]):
    """Numbers every row it receives during the run and prints the sampled ones. Several source queries may feed
    one sink, so the count is taken under a lock; the lines of one batch are written in one piece."""

    options_model = PrintOptions

    def __init__(self, options: PrintOptions, context: Context) -> None:
        super().__init__(options, context)
        self.seen = 0
        self._lock = threading.Lock()

    def warnings(self) -> list[str]:
        return [
            f"{field} = {getattr(self.options, field)!r} has no effect here: {meaning}"
            for field, meaning in IGNORED.items()
            if getattr(self.options, field) is not None
        ]

    @property
    def sample_every(self) -> int:
        return self.options.sample_every or self.context.settings.print_sink.sample_every

    def write(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        k = self.sample_every
        with self._lock:
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

    options_model = OriginalPrintOptions
    nested_options = ("mode",)
    """Shown under ``options`` where the control plane shows the node (`plugins/specs.py`), as the original has it."""
