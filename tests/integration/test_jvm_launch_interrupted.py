"""A driver interrupted while its JVM boots leaves no JVM behind (`spark/session.start_jvm`).

The driver here is a real process whose SIGTERM handler raises, as the Dagster run worker's `StopSignals` does
while Spark starts; the test signals it as soon as its JVM exists. Before the fix, PySpark's interrupted launch
deleted the folder the JVM writes its address to, and that JVM (in a session of its own) ran on forever. Real JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import psutil
import pytest

from tests.waiting import wait_for

DRIVER = textwrap.dedent("""
    import signal, sys, time

    from streamling.config.model import SparkSettings
    from streamling.spark.conf import session_conf
    from streamling.spark.session import prepare_environment, start_jvm

    class Stop(Exception):
        pass

    def stop(signo, frame):
        raise Stop

    signal.signal(signal.SIGTERM, stop)
    prepare_environment()
    try:
        start_jvm(session_conf(SparkSettings(master="local[1]")))
        print("launched", flush=True)
    except Stop:
        print("interrupted", flush=True)
    if sys.argv[1] == "stay":
        time.sleep(120)
""")


SUBMIT = "org.apache.spark.deploy.SparkSubmit"
"""The driver's JVM (not the launcher JVM Spark's scripts run first to compute its command line)."""


def marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("STREAMLING_TEST_MARK") == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.parametrize("driver_then", ["exits", "stay"])
def test_a_driver_interrupted_while_its_jvm_boots_leaves_no_jvm(driver_then: str) -> None:
    """`exits`: the driver ends right after the interruption (the JVM ends on its closed input once up);
    `stay`: it goes on living (the launch, once done, ends the JVM itself)."""
    mark = uuid.uuid4().hex
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, driver_then],
        env={**os.environ, "STREAMLING_TEST_MARK": mark},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        jvm = wait_for(
            lambda: next((p for p in marked(mark) if SUBMIT in p.cmdline()), None),
            timeout=60,
            what="the driver's JVM",
            ignore=(psutil.Error,),
        )
        driver.send_signal(signal.SIGTERM)
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "interrupted"
        psutil.wait_procs([jvm], timeout=60)
        assert not jvm.is_running(), f"the JVM {jvm.pid} outlived the interrupted launch"
        if driver_then == "stay":
            assert driver.poll() is None  # the JVM was ended by the driver, not by its exit
        else:
            assert driver.wait(timeout=30) == 0
    finally:
        driver.kill()
        driver.wait(timeout=10)
        for leftover in marked(mark):
            leftover.kill()
