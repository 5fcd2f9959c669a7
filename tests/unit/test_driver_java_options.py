"""The driver JVM's options: the engine's own first, the user's after them, one collector."""

from __future__ import annotations

import pytest

from streamling.config.model import SparkSettings
from streamling.spark.conf import driver_java_options, session_conf


def options(**conf: str) -> list[str]:
    return driver_java_options(SparkSettings(class_archive=False, conf=conf)).split()


def test_a_default_driver_gets_the_small_heap_collector_and_the_jit_threshold() -> None:
    got = options()
    assert got[0].startswith("-Dlog4j2.configurationFile=file:")
    assert got[1:] == ["-XX:CompileThresholdScaling=5", "-XX:+UseSerialGC"]


def test_the_users_options_come_last_so_they_win() -> None:
    got = options(**{"spark.driver.extraJavaOptions": "-XX:CompileThresholdScaling=1 -Dx=y"})
    assert got[1:] == ["-XX:CompileThresholdScaling=5", "-XX:+UseSerialGC", "-XX:CompileThresholdScaling=1", "-Dx=y"]
    conf = session_conf(SparkSettings(class_archive=False, conf={"spark.driver.extraJavaOptions": "-Dx=y"}))
    assert conf["spark.driver.extraJavaOptions"].endswith("-XX:+UseSerialGC -Dx=y")


def test_a_users_collector_replaces_ours() -> None:
    got = options(**{"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})
    assert "-XX:+UseSerialGC" not in got and got[-1] == "-XX:+UseG1GC"


@pytest.mark.parametrize(
    ("memory", "serial"), [("1g", True), ("2048m", True), ("512", True), ("4g", False), ("lots", False)]
)
def test_a_large_driver_heap_keeps_the_jvms_own_collector(memory: str, serial: bool) -> None:
    assert ("-XX:+UseSerialGC" in options(**{"spark.driver.memory": memory})) is serial
