"""The JVM's standard error (and its Python helpers', which inherit it) onto the driver's, without Spark's noise.

Dropped: the JVM's start-up warning, printed while the driver still validates the pipeline, whose errors are then
the only output of an invalid run; and the tracebacks of Spark's own Python helpers (the streaming source runner,
the worker daemon) that only say their connection to the JVM was cut, which is how they end when a run stops a
query in the middle of an epoch (a failure elsewhere, a lost lease). Any other traceback passes whole.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import IO

JVM_NOISE = (b"WARNING: Using incubator modules:",)
"""Lines the JVM prints on every start that say nothing to a user (Spark's launcher adds the vector module)."""

TRACEBACK = b"Traceback (most recent call last):"
CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
CUT_CONNECTION = re.compile(rb"^(EOFError|BrokenPipeError|ConnectionResetError)\b")
FRAME_FILE = re.compile(rb'^\s+File "([^"]+)"')
SPARK_OWN = (b"/pyspark/", b"<frozen", b"/socket.py", b"/contextlib.py", b"/socketserver.py")
"""Frames of Spark's helpers: pyspark and the standard library modules it calls into."""


def forward(stream: IO[bytes]) -> None:
    """Until the JVM exits; keeps draining when the driver has no usable stderr, so the JVM never blocks."""
    for line in filtered(iter(stream.readline, b"")):
        try:
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
        except (OSError, ValueError, AttributeError):
            continue


def filtered(lines: Iterable[bytes]) -> Iterable[bytes]:
    block: list[bytes] = []  # tracebacks being read, held until their exception lines say whether they are noise
    open_tracebacks = 0  # headers in the block still waiting for their exception line
    dropped = False  # the last block was noise: a chaining line after it belongs to it
    for line in lines:
        if line.startswith(TRACEBACK):
            # Helpers cut at once (a daemon's workers, when a query stops) print together: their lines interleave.
            block.append(line)
            open_tracebacks += 1
        elif block:
            block.append(line)
            if not _exception_line(line):  # frames, code, carets, chaining
                continue
            open_tracebacks -= 1
            if open_tracebacks > 0:
                continue
            dropped = _cut_connection(block)
            if not dropped:
                yield from block
            block = []
        elif dropped and (not line.strip() or line.startswith(CHAINED)):
            continue
        elif line.startswith(JVM_NOISE):
            continue
        else:
            dropped = False
            yield line
    yield from block  # cut short by the JVM's exit: shown as it is


def _cut_connection(block: list[bytes]) -> bool:
    """Tracebacks of Spark's own Python code, each ending in a closed connection."""
    files = [m.group(1) for line in block if (m := FRAME_FILE.match(line))]
    in_pyspark = all(
        b"/pyspark/" in f or f.startswith(b"<frozen") or b"/socket" in f or b"/contextlib" in f for f in files
    )
    ends = [line for line in block if _exception_line(line)]
    return bool(files) and in_pyspark and bool(ends) and all(CUT_CONNECTION.match(end) for end in ends)


def _exception_line(line: bytes) -> bool:
    """A traceback's last line, naming its exception: not a header, frame, code, caret, chaining or blank line."""
    return bool(line.strip()) and not line.startswith((b" ", b"\t", TRACEBACK, *CHAINED))
