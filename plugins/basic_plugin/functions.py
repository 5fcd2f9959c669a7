"""redact(): a vectorised SQL function, usable in every ``sql`` transform."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from streamling.plugin import SqlFunction

KEEP = 4


class Redact(SqlFunction):
    """``redact(s)``: every character but the last four replaced by ``*`` (``'k3x9q2'`` → ``'**x9q2'``)."""

    name = "redact"
    arguments = ("string",)
    returns = "string"

    def __call__(self, values: pa.Array) -> pa.Array:
        hidden = pc.max_element_wise(pc.subtract(pc.utf8_length(values), KEEP), 0)
        kept = pc.utf8_slice_codeunits(values, start=-KEEP)
        return pc.binary_join_element_wise(pc.binary_repeat("*", hidden), kept, "")
