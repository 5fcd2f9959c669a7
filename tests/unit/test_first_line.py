"""`errors.first_line` on the errors Py4J raises for a failed Spark job: the task's failure, not the JVM call."""

from __future__ import annotations

from streamling.errors import first_line

CRASHED = (
    "An error occurred while calling o170.save.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, most "
    "recent failure: Lost task 0.0 in stage 0.0 (TID 0) (localhost executor driver): org.apache.spark.SparkException: "
    "Python worker exited unexpectedly (crashed). Consider setting 'spark.sql.execution.pyspark.udf.faulthandler."
    "enabled' or 'spark.python.worker.faulthandler.enabled' configuration to 'true' for the better Python traceback.\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.hasNext(PythonRunner.scala:1034)\n"
)

WRAPPED = (
    "An error occurred while calling o156.getResult.\n"
    ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
    "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:56)\n"
    "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 2.0 failed 1 "
    "times, most recent failure: Lost task 1.0 in stage 2.0 (TID 5) (localhost executor driver): "
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 2000, in main\n'
    "    process()\n"
    "ValueError: bad value\n"
    "\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)\n"
)


class Py4JLike(Exception):
    """Stands for py4j's Py4JJavaError, whose text is the JVM call, then ``: `` and the JVM exception."""


def test_a_crashed_python_worker_is_named_without_spark_hints() -> None:
    assert first_line(Py4JLike(CRASHED)) == "Python worker exited unexpectedly (crashed)"


def test_a_wrapped_job_failure_gives_the_tasks_python_exception() -> None:
    assert first_line(Py4JLike(WRAPPED)) == "ValueError: bad value"


def test_other_errors_keep_their_first_line() -> None:
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(Py4JLike("An error occurred while calling o1.x.\nno JVM exception")) == (
        "An error occurred while calling o1.x."
    )
