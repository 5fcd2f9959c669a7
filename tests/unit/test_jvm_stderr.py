"""What of the JVM's standard error reaches the user (`runtime.jvm_stderr.filtered`), on text Spark printed."""

from __future__ import annotations

from streamling.runtime.jvm_stderr import filtered

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


def test_a_traceback_through_the_engine_or_ending_otherwise_is_shown_whole() -> None:
    assert shown(OUR_READER) == OUR_READER
    assert shown(SPARK_BUG) == SPARK_BUG
    assert shown(DAEMON_CUT + SPARK_BUG) == SPARK_BUG


def test_a_traceback_cut_short_by_the_jvm_exit_is_shown_as_it_is() -> None:
    partial = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
    assert shown(partial) == partial


def test_tracebacks_of_helpers_cut_at_once_interleave_and_still_print_nothing() -> None:
    assert shown("before\n" + TWO_WORKERS_CUT + "after\n") == "before\nafter\n"


def test_interleaved_tracebacks_are_shown_whole_when_one_is_not_a_cut_connection() -> None:
    mixed = TWO_WORKERS_CUT.replace("BrokenPipeError: [Errno 32] Broken pipe\n", "ValueError: something else\n", 1)
    assert shown(mixed) == mixed
