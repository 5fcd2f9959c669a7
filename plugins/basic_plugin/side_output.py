"""op_counts: a side output keeping running insert/update/delete counts of a node in its state."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from streamling.plugin import Epoch, Options, SideOutput


class OpCounts(SideOutput[Options]):
    """The counts are staged in the node's state and committed with the epoch, so after a crash they resume from
    the last committed epoch, like the source position: an epoch that is replayed is counted once."""

    options_model = Options

    def observe(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        counts = dict(self.state.get("counts", {"i": 0, "u": 0, "d": 0}))
        tally = pc.value_counts(pc.fill_null(batch.column("_gs_op"), "i"))
        for op, n in zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True):
            counts[op] = counts.get(op, 0) + n
        self.state.put("counts", counts)

    def finalize(self, epoch: Epoch) -> None:
        counts = self.state.get("counts")
        self.log.info("op_counts '%s' after epoch %d of %s: %s", self.node, epoch.id, epoch.source, counts)
