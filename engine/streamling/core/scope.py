"""Which run a thread works for, in a process that hosts several (`streamling serve`): its log lines carry it and
the clients it asks for are held for it (`core/held.py`)."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

RUN_SCOPE: contextvars.ContextVar[str | None] = contextvars.ContextVar("streamling_run", default=None)
"""The run a log line belongs to, in a process that hosts several (`streamling serve`). It follows the run into
the engine's own threads (`in_this_run`) and its foreachBatch calls, whose threads are py4j's."""


def in_this_run(target: Callable[..., Any]) -> Callable[..., Any]:
    """A thread target that runs in the current run's scope (a new thread starts with an empty context)."""
    return functools.partial(contextvars.copy_context().run, target)
