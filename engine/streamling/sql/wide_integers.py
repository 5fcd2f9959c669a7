"""``U256(x)`` and ``I256(x)``: 256-bit integers in SQL transforms (token amounts, EVM words).

Spark's decimals stop at 38 digits, so a 256-bit value travels as its exact decimal string, with the
same column marker the Avro decoder puts on ``decimal(78,0)`` fields; sinks that understand it write
``NUMERIC(78,0)`` (Postgres) and never round or switch to exponent notation. Accepted inputs: integers,
decimals without a fraction, decimal strings, ``0x`` hex strings and big-endian bytes (two's complement for
``I256``). A value out of range or not an integer stops the pipeline naming it; NULL stays NULL.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError

FUNCTIONS = ("u256", "i256")
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


def _u256(values: pa.Array) -> pa.Array:
    return _convert(values, signed=False)


def _i256(values: pa.Array) -> pa.Array:
    return _convert(values, signed=True)


def register(spark: SparkSession) -> None:
    from pyspark.sql.functions import arrow_udf

    spark.udf.register("u256", arrow_udf(_u256, "string"))
    spark.udf.register("i256", arrow_udf(_i256, "string"))


def mark(df: DataFrame, columns: list[str]) -> DataFrame:
    """Give the columns the SQL computed with U256/I256 the wide-integer marker sinks read."""
    for name in columns:
        if name in df.columns:
            df = df.withMetadata(name, WIDE_INTEGER)
    return df
