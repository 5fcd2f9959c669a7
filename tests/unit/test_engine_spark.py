"""The engine's task slots: `local[*]` becomes several slots per core, a master naming its slots is kept."""

from __future__ import annotations

import os

import pytest

from streamling.config.model import SparkSettings
from streamling.serve.server import engine_spark


def test_local_star_becomes_task_slots_per_core() -> None:
    cores = len(os.sched_getaffinity(0))
    assert engine_spark(SparkSettings(master="local[*]"), 4).master == f"local[{cores * 4}]"
    assert engine_spark(SparkSettings(master="local[ * ]"), 1).master == f"local[{cores}]"


@pytest.mark.parametrize("master", ["local[2]", "local", "spark://host:7077", "local-cluster[2,1,1024]"])
def test_a_master_naming_its_slots_is_kept(master: str) -> None:
    assert engine_spark(SparkSettings(master=master), 4).master == master


def test_the_setting_is_an_engine_setting_with_a_default_of_four(make_settings) -> None:
    settings = make_settings()
    assert settings.engine.task_slots_per_core == 4
    assert make_settings(engine__task_slots_per_core=2).engine.task_slots_per_core == 2
