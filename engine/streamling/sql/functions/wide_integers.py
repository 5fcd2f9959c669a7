"""256-bit integers in SQL (token amounts, EVM words): ``to_u256``/``to_i256`` (also ``U256``/``I256``).

Spark's decimals stop at 38 digits, so a 256-bit value travels as its exact decimal string, with the
same column marker the Avro decoder puts on ``decimal(78,0)`` fields; sinks that understand it write
``NUMERIC(78,0)`` (Postgres) and never round or switch to exponent notation. Accepted inputs: integers,
decimals without a fraction, decimal strings, ``0x`` hex strings and big-endian bytes (two's complement for
``I256``). A value out of range or not an integer stops the pipeline naming it; NULL stays NULL.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import DataFrame

from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction

FAMILY = "Wide integers"
U256_MAX = 2**256 - 1
I256_MIN, I256_MAX = -(2**255), 2**255 - 1
WIDE_INTEGER = {WIDE_DECIMAL_KEY: "decimal(78,0)"}


def to_int(value: Any, signed: bool) -> int:
    name = "I256" if signed else "U256"
    if isinstance(value, bool):
        raise StreamlingError.user(f"SQL function {name}: {value!r} is not an integer")
    if isinstance(value, bytes | bytearray):
        number = int.from_bytes(value, "big", signed=signed and len(value) == 32)
    elif isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            number = int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(Decimal(text))
            if not text.lower().startswith(("0x", "-0x")) and Decimal(text) != number:
                raise ValueError
        except (ValueError, ArithmeticError):
            raise StreamlingError.user(f"SQL function {name}: {value!r} is not an integer") from None
    elif isinstance(value, Decimal | float):
        if value != int(value):
            raise StreamlingError.user(f"SQL function {name}: {value!r} is not an integer")
        number = int(value)
    else:
        number = int(value)
    low, high = (I256_MIN, I256_MAX) if signed else (0, U256_MAX)
    if not low <= number <= high:
        raise StreamlingError.user(f"SQL function {name}: {value!r} is out of range for a {name} ({low} to {high})")
    return number


def _convert(values: pa.Array, signed: bool) -> pa.Array:
    return pa.array([None if v is None else str(to_int(v, signed)) for v in values.to_pylist()], pa.string())


class ToU256(ArrowFunction):
    name = "to_u256"
    aliases: ClassVar = ("u256",)
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    doc_arguments = "value (integer, decimal, decimal or 0x-hex text, big-endian bytes)"
    doc_returns = "U256 (exact decimal text; NUMERIC(78,0) in Postgres, UInt256 in ClickHouse)"
    nulls = "NULL → NULL; negative, past 2^256-1 or not an integer → the epoch fails naming the value"
    example = "SELECT to_u256('1000000000000000000000') AS wei"

    def __call__(self, values: pa.Array) -> pa.Array:
        return _convert(values, signed=False)


class ToI256(ArrowFunction):
    name = "to_i256"
    aliases: ClassVar = ("i256",)
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    doc_arguments = "value (as to_u256; 32 bytes read as two's complement)"
    doc_returns = "I256 (exact decimal text; NUMERIC(78,0) in Postgres, Int256 in ClickHouse)"
    nulls = "NULL → NULL; outside -2^255 … 2^255-1 or not an integer → the epoch fails naming the value"
    example = "SELECT to_i256('-5') AS delta"

    def __call__(self, values: pa.Array) -> pa.Array:
        return _convert(values, signed=True)


SPARK_FUNCTIONS: list[SparkFunction] = []
ARROW_FUNCTIONS: list[type[ArrowFunction]] = [ToU256, ToI256]
WIDE_FUNCTIONS = frozenset({"to_u256", "to_i256"})
"""Spark names of the functions whose result is a 256-bit integer column."""


def mark(df: DataFrame, columns: list[str]) -> DataFrame:
    """Give the columns the SQL computed as 256-bit integers the wide-integer marker sinks read."""
    for name in columns:
        if name in df.columns:
            df = df.withMetadata(name, WIDE_INTEGER)
    return df
