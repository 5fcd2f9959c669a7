"""Field-metadata markers that travel with Spark schemas between operators of different systems."""

from __future__ import annotations

import re
from dataclasses import dataclass

WIDE_DECIMAL_KEY = "streamling.type"
"""Field metadata key naming the wide number a string column really holds when Spark cannot: ``u256``,
``i256`` or ``decimal(p,s)`` (integers and decimals past Spark's 38 digits: Avro, ClickHouse ``UInt256``,
the SQL functions ``to_u256``/``to_decimal_arb``…); sinks read it to create the right column type, and
SQL transforms to rewrite operators on such columns into exact arithmetic."""

U256 = "u256"
I256 = "i256"
DECIMAL = "decimal"
MAX_PRECISION = 65535
"""The widest decimal the SQL functions make (the original's limit)."""

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$", re.IGNORECASE)


@dataclass(frozen=True)
class WideType:
    """What a marked column holds. Its values are exact decimal text: integers without sign when
    non-negative and without leading zeros; decimals with exactly `scale` fractional digits."""

    kind: str
    """``u256``, ``i256`` or ``decimal``."""
    precision: int = 78
    scale: int = 0

    @property
    def marker(self) -> str:
        return self.kind if self.kind != DECIMAL else f"decimal({self.precision},{self.scale})"

    @property
    def integer(self) -> bool:
        return self.kind in (U256, I256)


def decimal_type(precision: int, scale: int) -> WideType:
    """``decimal(p,s)`` with the precision capped at `MAX_PRECISION` (and the scale at the precision)."""
    precision = max(1, min(precision, MAX_PRECISION))
    return WideType(DECIMAL, precision, min(scale, precision))


def wide_type(marker: str | None) -> WideType | None:
    """The type a marker names (None when there is none or it is not one of ours)."""
    if not marker:
        return None
    text = str(marker).replace(" ", "").lower()
    if text in (U256, I256):
        return WideType(text)
    match = _DECIMAL.match(text)
    return WideType(DECIMAL, int(match.group(1)), int(match.group(2))) if match else None
