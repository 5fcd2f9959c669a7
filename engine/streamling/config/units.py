"""Human-friendly units in configuration: ``"500ms"``, ``"1s"``, ``"2m"`` and plain numbers."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(value: object, default_unit: str) -> float:
    """Return seconds; a bare number is read in `default_unit`."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value) * _SECONDS[default_unit]
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            unit = (match.group(2) or default_unit).lower()
            return float(match.group(1)) * _SECONDS[unit]
    raise ValueError(f"invalid duration {value!r}: use a number or a value like '500ms', '5s', '2m'")


def _to_ms(value: object) -> int:
    return round(parse_duration(value, "ms") * 1000)


def _to_sec(value: object) -> float:
    return parse_duration(value, "s")


Milliseconds = Annotated[int, BeforeValidator(_to_ms)]
"""An interval stored in milliseconds; accepts ``250``, ``"250"``, ``"500ms"``, ``"1s"``."""

Seconds = Annotated[float, BeforeValidator(_to_sec)]
"""An interval stored in seconds; accepts ``5``, ``"5"``, ``"500ms"``, ``"2m"``."""
