"""One error type for the whole engine.

The flags let callers decide what to do without parsing text: a `user_facing` error is safe to print
without a traceback (bad config, bad pipeline, bad input data); a `retriable` one may succeed if tried
again (a dropped connection). Context is prepended as the error travels up, so the final message reads
as the logical path: ``kafka source 'x': failed to fetch schema: connection refused``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager


class StreamlingError(Exception):
    def __init__(
        self,
        message: str,
        *,
        user_facing: bool = False,
        retriable: bool = False,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.user_facing = user_facing
        self.retriable = retriable
        if cause is not None:
            self.__cause__ = cause

    @classmethod
    def user(cls, message: str, cause: BaseException | None = None) -> StreamlingError:
        return StreamlingUserError(message, user_facing=True, cause=cause)

    @classmethod
    def retry(cls, message: str, cause: BaseException | None = None) -> StreamlingError:
        return StreamlingRetriableError(message, retriable=True, cause=cause)

    @classmethod
    def unavailable(cls, message: str) -> StreamlingError:
        """A retriable error because a service (a Kafka broker, the Schema Registry) could not be reached:
        callers may wait it out rather than fail."""
        return StreamlingUnavailableError(message, retriable=True)

    def context(self, what: str) -> StreamlingError:
        """The same error (class and flags) with `what` prepended."""
        err = type(self).__new__(type(self))
        StreamlingError.__init__(err, f"{what}: {self.message}", user_facing=self.user_facing, retriable=self.retriable)
        err.__cause__ = self.__cause__
        return err

    def __str__(self) -> str:
        return self.message


class StreamlingUserError(StreamlingError):
    """A user-facing error. A class of its own so the flag survives the trip from a Spark task, where
    only the traceback text of an exception reaches the driver."""


class StreamlingNodeError(StreamlingUserError):
    """A user-facing error that already names the node it happened in (``plugin 'acme.x' (node 'n'): …``), so
    `error_context` passes it on as it is instead of naming the node that happened to run it."""


class StreamlingRetriableError(StreamlingError):
    """A retriable error; a class of its own for the same reason as StreamlingUserError."""


class LeaseLostError(StreamlingRetriableError):
    """The run may no longer hold its pipeline's lease: it stops without committing, and is not restarted in place
    (another run may hold the pipeline by then). Raised by the run's own check before a commit, and by a state
    backend or a sink that refuses a fenced write."""


class StreamlingUnavailableError(StreamlingRetriableError):
    """A retriable error raised because a service could not be reached (see `StreamlingError.unavailable`)."""


class InvalidPipelineError(StreamlingError):
    """The pipeline failed validation; `errors` lists every problem found."""

    def __init__(self, message: str, errors: list[str]) -> None:
        super().__init__(message, user_facing=True)
        self.errors = errors


_EMBEDDED = re.compile(
    r"streamling\.errors\.(StreamlingError|StreamlingUserError|StreamlingNodeError|StreamlingRetriableError|"
    r"StreamlingUnavailableError)"
    r": (.+)"
)


def embedded_error(exc: BaseException) -> StreamlingError | None:
    """The StreamlingError raised inside a Spark task, recovered from the driver-side exception text."""
    found = _EMBEDDED.findall(str(exc))
    if not found:
        return None
    kind, message = found[-1]
    return StreamlingError(
        message.strip(),
        user_facing=kind in ("StreamlingUserError", "StreamlingNodeError"),
        retriable=kind in ("StreamlingRetriableError", "StreamlingUnavailableError"),
    )


TRACEBACK = "Traceback (most recent call last):"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Spark's JVM errors via ``getMessage``), else its type name.

    Spark reports a Python failure in its own processes as ``…: Traceback (most recent call last):`` followed
    by the traceback; the traceback is then replaced by its last line, the Python exception itself."""
    get_message = getattr(exc, "getMessage", None)
    text = (get_message() if callable(get_message) else None) or str(exc)
    lines = text.strip().splitlines()
    if not lines:
        return type(exc).__name__
    first = lines[0]
    if first.startswith(PY4J) and len(lines) > 1 and lines[1].startswith(": "):
        lines = _task_failure([lines[1][2:], *lines[2:]])
        first = lines[0] or first
    if first.endswith(TRACEBACK):
        raised = _raised(lines[1:])
        if raised:
            return first.removesuffix(TRACEBACK) + raised
    return first


PY4J = "An error occurred while calling "
"""Py4J's first line for a JVM exception (``… calling o170.save.``), which names only the JVM call; the JVM
exception follows on the next line, after ``": "``."""
_LOST_TASK = re.compile(r"most recent failure: Lost task [^:]*?\): ")
_JAVA_CLASS = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*: ")


def _task_failure(lines: list[str]) -> list[str]:
    """A JVM exception reduced to what failed: a failed job (also one wrapped, as in ``Exception thrown in
    awaitResult``) to its task's failure (``Python worker exited unexpectedly (crashed)`` when a Python worker
    died), without Java class names or Spark's configuration hints; the lines after it are kept (a traceback)."""
    for index, line in enumerate(lines):
        found = _LOST_TASK.search(line)
        if found:
            lines = [line[found.end() :], *lines[index + 1 :]]
            break
    first = _JAVA_CLASS.sub("", lines[0]).split(". Consider setting ", 1)[0]
    return [first, *lines[1:]]


def _raised(traceback_lines: list[str]) -> str | None:
    """The exception line of a Python traceback (its last unindented line, before Spark's own additions)."""
    found = None
    for line in traceback_lines:
        if not line.strip() or line.startswith((" SQLSTATE", "===", "JVM stacktrace")):
            break
        if not line[0].isspace() and not line.startswith((TRACEBACK, "During handling", "The above exception")):
            found = line.strip()
    return found


def wrap(exc: BaseException, what: str) -> StreamlingError:
    """Attach `what` to any exception; foreign exceptions become internal, non-retriable errors.

    An error our own code raised inside a Spark task already names its node and record, so it is passed
    on as it is rather than attributed to the operator whose action happened to run the task."""
    if isinstance(exc, StreamlingError):
        return exc.context(what)
    inner = embedded_error(exc)
    if inner is not None:
        return inner
    line = first_line(exc)
    missing = _NO_PYTHON.search(line)
    if missing is not None and missing[1].startswith("./"):  # a Python unpacked from spark.archives
        return StreamlingError.user(
            f"{what}: Spark could not start the packed environment's Python '{missing[1]}' where a task ran; its "
            "bin/python links to the interpreter it was packed from (`streamling package` prints it, and the "
            "archive's streamling-env.json names it), which every worker needs at that same path",
            exc,
        )
    if missing is not None:
        return StreamlingError.user(
            f"{what}: Spark could not start the Python workers' interpreter '{missing[1]}' where a task ran (no such "
            "file); on a cluster, ship one with the job (spark.environment_archive: auto, or an archive `streamling "
            "package` built) or install it at that path on every worker",
            exc,
        )
    return StreamlingError(f"{what}: {line}", cause=exc)


_NO_PYTHON = re.compile(r'Cannot run program "([^"]+)": error=2, No such file or directory')
"""A worker without the interpreter the driver names (``PYSPARK_PYTHON``): a deployment error, not an outage, so
the run ends at once instead of restarting against the same cluster."""


@contextmanager
def error_context(what: str) -> Iterator[None]:
    """Re-raise anything escaping the block with `what` prepended to its message."""
    try:
        yield
    except StreamlingError as exc:
        if exc.message.startswith((f"{what}:", f"{what} ")) or isinstance(exc, StreamlingNodeError):
            raise  # already names this node (or the one it happened in)
        raise exc.context(what) from exc.__cause__
    except Exception as exc:
        raise wrap(exc, what) from exc
