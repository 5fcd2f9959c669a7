"""The JVM's standard error (and its Python helpers', which inherit it) onto the driver's, without Spark's noise.

Dropped: the JVM's start-up warning, printed while the driver still validates the pipeline, whose errors are then
the only output of an invalid run; and every Python traceback, which the docs promise the user never sees. A
Python process of Spark's prints one when it fails: a worker whose task raised or whose JVM side went away (the
daemon's "failed to flush" report), a helper cut when a run stops a query in the middle of an epoch, a JVM log
record whose exception carries a Python worker's traceback. A failure that matters fails its task, and the engine
reports it as the run's one ``Error:`` line (`errors.first_line`: the traceback's exception line), so the
traceback itself is only detail: it goes to the ``streamling.spark`` logger at DEBUG (shown with ``log_level:
debug``), except helpers' cut connections, which are how they end when a query stops and say nothing at all.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import IO

JVM_NOISE = (b"WARNING: Using incubator modules:",)
"""Lines the JVM prints on every start that say nothing to a user (Spark's launcher adds the vector module)."""

TRACEBACK = b"Traceback (most recent call last):"
CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
HEADERS = (
    b"PySpark worker failed with exception:",
    b"PySpark daemon failed to flush the output to the worker process:",
)
"""Lines pyspark's worker and daemon print just before a traceback of theirs (`pyspark.util`, `pyspark.daemon`)."""
CUT_CONNECTION = re.compile(rb"^(EOFError|BrokenPipeError|ConnectionResetError)\b")
FRAME_FILE = re.compile(rb'^\s+File "([^"]+)"')
JVM_CONTINUATION = (b"\tat ", b"\t... ", b"Caused by: ", b"Suppressed: ", b"\t")
"""Lines of a Java stack trace after its first: what follows a Python traceback inside a JVM exception."""
RECORD = re.compile(rb"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
"""The start of a log record (the JVM's log4j pattern and the engine's, in workers too): a new record ends a
JVM exception that carried a Python traceback."""

log = logging.getLogger("streamling.spark")


def forward(stream: IO[bytes]) -> None:
    """Until the JVM exits; keeps draining when the driver has no usable stderr, so the JVM never blocks."""
    for line in filtered(iter(stream.readline, b""), hidden=_debug):
        try:
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
        except (OSError, ValueError, AttributeError):
            continue


def _debug(block: list[bytes]) -> None:
    if log.isEnabledFor(logging.DEBUG):
        text = b"".join(block).decode("utf-8", "replace").rstrip("\n")
        log.debug("a Spark process printed (hidden below log_level debug):\n%s", text)


def filtered(lines: Iterable[bytes], hidden: Callable[[list[bytes]], None] | None = None) -> Iterable[bytes]:
    """`lines` without the start-up warning and tracebacks; each hidden traceback (with the header pyspark printed
    before it, or the JVM exception carrying it) is handed to `hidden`, except helpers' cut connections."""
    block: list[bytes] = []  # tracebacks being read, held until their exception lines end them
    open_tracebacks = 0  # headers in the block still waiting for their exception line
    dropped = False  # the last block ended: a chaining line after it belongs to it
    held: bytes | None = None  # a pyspark header line, waiting to see whether a traceback follows
    in_jvm = False  # inside a JVM exception that carries a Python traceback: its Java frames follow

    def hide(lines: list[bytes]) -> None:
        if hidden is not None and not _cut_connection(lines):
            hidden(lines)

    for line in lines:
        if held is not None and not line.startswith(TRACEBACK):
            yield held
            held = None
        if in_jvm:
            if not RECORD.match(line) and not line.startswith((TRACEBACK, *HEADERS)):
                block.append(line)
                continue
            hide(block)
            block, in_jvm, dropped = [], False, False
        if line.startswith(TRACEBACK):
            # Helpers cut at once (a daemon's workers, when a query stops) print together: their lines interleave.
            if held is not None:
                block.append(held)
                held = None
            block.append(line)
            open_tracebacks += 1
        elif TRACEBACK in line and not block:
            # A JVM exception whose message is a worker's traceback (``PythonException: Traceback …``): the
            # traceback, then the Java frames, up to the next log record.
            block, in_jvm = [line], True
        elif block:
            block.append(line)
            if not _exception_line(line):  # frames, code, carets, chaining
                continue
            open_tracebacks -= 1
            if open_tracebacks > 0:
                continue
            hide(block)
            dropped = True
            block = []
        elif dropped and (not line.strip() or line.startswith(CHAINED)):
            continue
        elif line.startswith(JVM_NOISE):
            continue
        elif line.startswith(HEADERS):
            held = line
        else:
            dropped = False
            yield line
    if held is not None:
        yield held
    if block:  # cut short by the JVM's exit: detail as well
        hide(block)


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
