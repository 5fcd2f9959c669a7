"""What of the JVM's standard error reaches the user (`spark/jvm_stderr.filtered`), on text Spark printed."""

from __future__ import annotations

from streamling.spark.jvm_stderr import filtered

PYSPARK = "/venv/lib/python3.11/site-packages/pyspark"

RUNNER_CUT = f"""Traceback (most recent call last):
  File "{PYSPARK}/sql/streaming/python_streaming_source_runner.py", line 265, in main
    func_id = read_int(infile)
              ^^^^^^^^^^^^^^^^
  File "{PYSPARK}/serializers.py", line 604, in read_int
    raise EOFError
EOFError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "{PYSPARK}/worker_util.py", line 255, in get_sock_file_to_executor
    sock_file.close()
  File "/usr/lib/python3.11/socket.py", line 724, in write
    return self._sock.send(b)
BrokenPipeError: [Errno 32] Broken pipe
"""

DAEMON_CUT = f"""Traceback (most recent call last):
  File "{PYSPARK}/daemon.py", line 95, in worker
    outfile.flush()
BrokenPipeError: [Errno 32] Broken pipe
"""

OUR_READER = f"""Traceback (most recent call last):
  File "{PYSPARK}/worker.py", line 1, in main
  File "/venv/lib/python3.11/site-packages/streamling/kafka/reader.py", line 9, in read
    raise EOFError
EOFError
"""

SPARK_BUG = f"""Traceback (most recent call last):
  File "{PYSPARK}/daemon.py", line 95, in worker
ValueError: something Spark got wrong
"""


WORKER_CUT_FRAMES = f"""  File "{PYSPARK}/daemon.py", line 264, in manager
    code = worker(sock, authenticated)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{PYSPARK}/daemon.py", line 95, in worker
    outfile.flush()
BrokenPipeError: [Errno 32] Broken pipe
"""
TWO_WORKERS_CUT = "Traceback (most recent call last):\n" * 2 + WORKER_CUT_FRAMES * 2
"""Two workers of the daemon, cut at once when a query stopped, printing over each other (seen over Unix sockets)."""


def lines(text: str) -> list[bytes]:
    return [line.encode() + b"\n" for line in text.splitlines()]


def shown(text: str) -> str:
    return b"".join(filtered(lines(text))).decode()


def test_helpers_cut_from_the_jvm_print_nothing_and_what_surrounds_them_stays() -> None:
    text = "before\n" + RUNNER_CUT + DAEMON_CUT + "after\n"
    assert shown(text) == "before\nafter\n"


def test_the_start_up_warning_goes_and_other_jvm_lines_stay() -> None:
    text = "WARNING: Using incubator modules: jdk.incubator.vector\n2026 WARN spark Foo: real warning\n"
    assert shown(text) == "2026 WARN spark Foo: real warning\n"


def hidden_of(text: str) -> tuple[str, list[str]]:
    """What is shown, and each block handed over as detail (the engine logs it at DEBUG)."""
    blocks: list[str] = []
    out = b"".join(filtered(lines(text), hidden=lambda block: blocks.append(b"".join(block).decode()))).decode()
    return out, blocks


def test_any_other_traceback_is_hidden_and_kept_as_detail() -> None:
    """docs/configuration.md promises no Python traceback: a failing worker's goes to the debug log, whatever it ends in."""
    assert hidden_of("before\n" + OUR_READER + "after\n") == ("before\nafter\n", [OUR_READER])
    assert hidden_of(SPARK_BUG) == ("", [SPARK_BUG])
    assert hidden_of(DAEMON_CUT + SPARK_BUG) == ("", [SPARK_BUG])
    assert shown(OUR_READER) == ""


def test_a_traceback_cut_short_by_the_jvm_exit_is_detail_too() -> None:
    partial = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
    assert hidden_of(partial) == ("", [partial])


WORKER_FAILED = f"""PySpark worker failed with exception:
Traceback (most recent call last):
  File "{PYSPARK}/util.py", line 545, in handle_worker_exception
    write_with_length(exc_info.encode("utf-8"), outfile)
UnicodeEncodeError: 'utf-8' codec can't encode character
"""

DAEMON_FLUSH = f"""PySpark daemon failed to flush the output to the worker process:
Traceback (most recent call last):
  File "{PYSPARK}/daemon.py", line 93, in worker
    outfile.flush()
OSError: [Errno 9] Bad file descriptor
"""

JVM_RECORD = f"""2026-11-29T19:00:00.000 ERROR spark PythonRunner: Python worker exited unexpectedly
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "{PYSPARK}/worker.py", line 2000, in main
    process()
  File "/plugins/boom.py", line 5, in transform
    raise ValueError("boom")
ValueError: boom

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)
Caused by: java.io.EOFException
\t... 26 more
"""


def test_pysparks_own_header_goes_with_its_traceback_and_stays_alone() -> None:
    assert hidden_of(WORKER_FAILED + DAEMON_FLUSH + "after\n") == ("after\n", [WORKER_FAILED, DAEMON_FLUSH])
    assert shown("PySpark worker failed with exception:\nsomething else\n") == (
        "PySpark worker failed with exception:\nsomething else\n"
    )


def test_a_jvm_record_carrying_a_python_traceback_loses_it_up_to_the_next_record() -> None:
    """The record's own line is a JVM log line (one line, kept); the exception under it, with the worker's
    traceback and the Java frames, is detail."""
    head, rest = JVM_RECORD.split("\n", 1)
    after = "2026-11-29T19:00:01.000 WARN spark Foo: next record\n"
    assert hidden_of(JVM_RECORD + after) == (head + "\n" + after, [rest])
    assert hidden_of(JVM_RECORD + SPARK_BUG + "x\n") == (head + "\n" + "x\n", [rest, SPARK_BUG])


def test_hidden_tracebacks_reach_the_log_at_debug_only(caplog) -> None:
    import logging

    from streamling.spark import jvm_stderr

    with caplog.at_level(logging.INFO, logger="streamling.spark"):
        jvm_stderr._debug(lines(SPARK_BUG))
    assert caplog.records == []
    with caplog.at_level(logging.DEBUG, logger="streamling.spark"):
        jvm_stderr._debug(lines(SPARK_BUG))
    assert caplog.records[0].getMessage() == (
        "a Spark process printed (hidden below log_level debug):\n" + SPARK_BUG.rstrip("\n")
    )


def test_tracebacks_of_helpers_cut_at_once_interleave_and_still_print_nothing() -> None:
    assert shown("before\n" + TWO_WORKERS_CUT + "after\n") == "before\nafter\n"


def test_interleaved_tracebacks_are_detail_when_one_is_not_a_cut_connection() -> None:
    mixed = TWO_WORKERS_CUT.replace("BrokenPipeError: [Errno 32] Broken pipe\n", "ValueError: something else\n", 1)
    assert hidden_of(mixed) == ("", [mixed])
