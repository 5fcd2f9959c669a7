"""256-bit integers in SQL (token amounts, EVM words): ``to_u256``/``to_i256`` (also ``U256``/``I256``), their
exact arithmetic, and the way back to text or ``bigint``.

Spark's decimals stop at 38 digits, so a 256-bit value travels as its exact decimal text in a string column
marked ``u256`` or ``i256`` (see `streamling.core.markers`): sinks write ``NUMERIC(78,0)`` (Postgres) or
``UInt256``/``Int256`` (ClickHouse), and SQL transforms rewrite ``+ - * / %`` and comparisons on such values
into these functions (`numeric_rewrite`). Arithmetic is Python's exact integers over whole Arrow arrays
(``map`` over the batch, no per-row branching); a result out of range, a division by zero or a value that is
not an integer stops the epoch naming the function and the values.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from streamling.core.markers import I256, U256
from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction

FAMILY = "Wide integers"
U256_MAX = 2**256 - 1
I256_MIN, I256_MAX = -(2**255), 2**255 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
RANGES = {U256: (0, U256_MAX), I256: (I256_MIN, I256_MAX)}


def _fail(function: str, detail: str) -> StreamlingError:
    return StreamlingError.user(f"SQL function {function}: {detail}")


def to_int(value: Any, signed: bool, function: str | None = None) -> int:
    """`value` (integer, integral decimal or float, decimal or ``0x`` text, big-endian bytes) as a u256 or i256."""
    kind = I256 if signed else U256
    name = function or f"to_{kind}"
    if value is None or isinstance(value, bool):
        raise _fail(name, f"{value!r} is not an integer")
    if isinstance(value, bytes | bytearray):
        number = int.from_bytes(value, "big", signed=signed and len(value) == 32)
    elif isinstance(value, str):
        number = _parse_text(value, name)
    elif isinstance(value, Decimal | float):
        finite = value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)
        if not finite or value != int(value):
            raise _fail(name, f"{value!r} is not an integer")
        number = int(value)
    else:
        number = int(value)
    low, high = RANGES[kind]
    if not low <= number <= high:
        raise _fail(name, f"{value!r} is out of range for {kind} ({low} to {high})")
    return number


def _parse_text(value: str, function: str) -> int:
    text = value.strip().replace("_", "")
    lowered = text.lower()
    try:
        if lowered.startswith(("0x", "-0x", "+0x")):
            return int(text, 16)
        number = Decimal(text)
        if not number.is_finite() or number != number.to_integral_value():
            raise ValueError
        return int(number)
    except (ValueError, ArithmeticError, InvalidOperation):
        raise _fail(function, f"{value!r} is not an integer") from None


def parse_ints(values: pa.Array, function: str, kind: str | None, fill: str = "1") -> list[int]:
    """The values of a u256/i256 text array as ints (NULLs as `fill`), each checked against the kind's range
    (`kind` None: any integer)."""
    texts = values.fill_null(fill).to_pylist() if values.null_count else values.to_pylist()
    try:
        numbers = list(map(int, texts))
    except (ValueError, TypeError):
        numbers = [_parse_text(t, function) for t in texts]
    if kind is None:
        return numbers
    low, high = RANGES[kind]
    if numbers and (min(numbers) < low or max(numbers) > high):
        bad = next(t for t, n in zip(texts, numbers, strict=True) if not low <= n <= high)
        raise _fail(function, f"{bad!r} is not a {kind} ({low} to {high})")
    return numbers


def int_texts(numbers: Sequence[int], nulls: pa.Array | None) -> pa.Array:
    """Exact decimal text of `numbers`; NULL where `nulls` (a boolean array) is true."""
    mask = None if nulls is None else nulls.to_numpy(zero_copy_only=False)
    return pa.array(list(map(str, numbers)), pa.string(), mask=mask)


def null_mask(*arrays: pa.Array) -> pa.Array | None:
    """True where any of `arrays` is NULL (None when none is)."""
    with_nulls = [a.is_null() for a in arrays if a.null_count]
    if not with_nulls:
        return None
    mask = with_nulls[0]
    for other in with_nulls[1:]:
        mask = pc.or_(mask, other)
    return mask


def _checked(function: str, kind: str, results: list[int], operands: Callable[[int], str]) -> None:
    low, high = RANGES[kind]
    if results and (min(results) < low or max(results) > high):
        index = next(i for i, n in enumerate(results) if not low <= n <= high)
        raise _fail(function, f"{operands(index)} = {results[index]} is out of range for {kind} ({low} to {high})")


def _trunc_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _trunc_mod(a: int, b: int) -> int:
    remainder = abs(a) % abs(b)
    return -remainder if a < 0 else remainder


class _Conversion(ArrowFunction):
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    signed: ClassVar[bool]

    def __call__(self, values: pa.Array) -> pa.Array:
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            kind = I256 if self.signed else U256
            try:  # canonical decimal text (the usual case) converts without a Decimal per value
                return int_texts(parse_ints(values, self.name, kind), null_mask(values))
            except StreamlingError:
                pass
        out = [None if v is None else str(to_int(v, self.signed, self.name)) for v in values.to_pylist()]
        return pa.array(out, pa.string())


class ToU256(_Conversion):
    name = "to_u256"
    aliases: ClassVar = ("u256",)
    signed = False
    doc_arguments = "value (integer, integral decimal, decimal or 0x-hex text, big-endian bytes)"
    doc_returns = "u256 (exact decimal text; NUMERIC(78,0) in Postgres, UInt256 in ClickHouse)"
    nulls = "NULL → NULL; negative, past 2^256-1 or not an integer → the epoch fails naming the value"
    example = "to_u256('1000000000000000000') → 1000000000000000000"


class ToI256(_Conversion):
    name = "to_i256"
    aliases: ClassVar = ("i256",)
    signed = True
    doc_arguments = "value (as to_u256; 32 bytes read as two's complement)"
    doc_returns = "i256 (exact decimal text; NUMERIC(78,0) in Postgres, Int256 in ClickHouse)"
    nulls = "NULL → NULL; outside -2^255 … 2^255-1 or not an integer → the epoch fails naming the value"
    example = "to_i256('-5') → -5"


class _Binary(ArrowFunction):
    arguments: ClassVar = ("string", "string")
    returns = "string"
    family = FAMILY
    kind: ClassVar[str]
    symbol: ClassVar[str]
    operation: ClassVar[Callable[[int, int], int]]
    divides: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        problem = {
            "+": f"a sum past the {cls.kind} range",
            "-": "a result below 0" if cls.kind == U256 else "a result outside the i256 range",
            "*": f"a product past the {cls.kind} range",
            "/": "a zero divisor" + ("" if cls.kind == U256 else " or -2^255 / -1"),
            "%": "a zero divisor",
        }[cls.symbol]
        rounding = {"/": " (truncated toward zero)", "%": " (sign of the dividend)"}.get(cls.symbol, "")
        cls.divides = cls.symbol in "/%"
        cls.doc_arguments = f"left, right ({cls.kind}; other integers are converted)"
        cls.doc_returns = f"{cls.kind}: left {cls.symbol} right{rounding}"
        cls.nulls = f"NULL operand → NULL; {problem} → the epoch fails naming the values"

    def __call__(self, left: pa.Array, right: pa.Array) -> pa.Array:
        xs = parse_ints(left, self.name, self.kind)
        ys = parse_ints(right, self.name, self.kind)
        if self.divides and 0 in ys:
            index = ys.index(0)
            raise _fail(self.name, f"division by zero ({xs[index]} {self.symbol} 0)")
        results = list(map(self.operation, xs, ys))
        _checked(self.name, self.kind, results, lambda i: f"{xs[i]} {self.symbol} {ys[i]}")
        return int_texts(results, null_mask(left, right))


class _Unary(ArrowFunction):
    arguments: ClassVar = ("string",)
    returns = "string"
    family = FAMILY
    kind: ClassVar[str] = I256
    operation: ClassVar[Callable[[int], int]]

    def __call__(self, values: pa.Array) -> pa.Array:
        xs = parse_ints(values, self.name, self.kind)
        results = list(map(self.operation, xs))
        _checked(self.name, self.kind, results, lambda i: f"{self.name}({xs[i]})")
        return int_texts(results, null_mask(values))


class _ToString(ArrowFunction):
    arguments: ClassVar = ("string",)
    returns = "string"
    family = FAMILY
    kind: ClassVar[str]
    nulls = "NULL → NULL"

    def __call__(self, values: pa.Array) -> pa.Array:
        return int_texts(parse_ints(values, self.name, self.kind), null_mask(values))


class U256ToString(_ToString):
    name = "u256_to_string"
    kind = U256
    doc_arguments = "value (u256)"
    doc_returns = "string (decimal digits, no marker: a text column in sinks)"
    example = "u256_to_string(to_u256(wei) / to_u256('1000000000000000000')) → whole tokens as text"


class I256ToString(_ToString):
    name = "i256_to_string"
    kind = I256
    doc_arguments = "value (i256)"
    doc_returns = "string (decimal digits, no marker: a text column in sinks)"
    example = "i256_to_string(to_i256(-5)) → '-5'"


class U256Add(_Binary):
    name, kind, symbol, operation = "u256_add", U256, "+", staticmethod(operator.add)
    example = "u256_add(to_u256(1), to_u256(2)) → 3"


class U256Sub(_Binary):
    name, kind, symbol, operation = "u256_sub", U256, "-", staticmethod(operator.sub)
    example = "u256_sub(to_u256(5), to_u256(3)) → 2"


class U256Mul(_Binary):
    name, kind, symbol, operation = "u256_mul", U256, "*", staticmethod(operator.mul)
    example = "u256_mul(to_u256(10), to_u256(3)) → 30"


class U256Div(_Binary):
    name, kind, symbol, operation = "u256_div", U256, "/", staticmethod(_trunc_div)
    example = "u256_div(to_u256('2500000000000000000'), to_u256('1000000000000000000')) → 2"


class U256Mod(_Binary):
    name, kind, symbol, operation = "u256_mod", U256, "%", staticmethod(_trunc_mod)
    example = "u256_mod(to_u256(10), to_u256(3)) → 1"


class I256Add(_Binary):
    name, kind, symbol, operation = "i256_add", I256, "+", staticmethod(operator.add)
    example = "i256_add(to_i256(-5), to_i256(3)) → -2"


class I256Sub(_Binary):
    name, kind, symbol, operation = "i256_sub", I256, "-", staticmethod(operator.sub)
    example = "i256_sub(to_i256(3), to_i256(5)) → -2"


class I256Mul(_Binary):
    name, kind, symbol, operation = "i256_mul", I256, "*", staticmethod(operator.mul)
    example = "i256_mul(to_i256(-4), to_i256(3)) → -12"


class I256Div(_Binary):
    name, kind, symbol, operation = "i256_div", I256, "/", staticmethod(_trunc_div)
    example = "i256_div(to_i256(-7), to_i256(2)) → -3"


class I256Mod(_Binary):
    name, kind, symbol, operation = "i256_mod", I256, "%", staticmethod(_trunc_mod)
    example = "i256_mod(to_i256(-7), to_i256(2)) → -1"


class I256Neg(_Unary):
    name = "i256_neg"
    operation = staticmethod(operator.neg)
    doc_arguments = "value (i256)"
    doc_returns = "i256: -value"
    nulls = "NULL → NULL; i256_neg(-2^255) → the epoch fails naming the value"
    example = "i256_neg(to_i256(5)) → -5"


class I256Abs(_Unary):
    name = "i256_abs"
    operation = staticmethod(abs)
    doc_arguments = "value (i256)"
    doc_returns = "i256: |value|"
    nulls = "NULL → NULL; i256_abs(-2^255) → the epoch fails naming the value"
    example = "i256_abs(to_i256(-5)) → 5"


class ToInt64(ArrowFunction):
    name = "to_int64"
    arguments: ClassVar = ("any",)
    returns = "bigint"
    family = FAMILY
    doc_arguments = "value (u256 or i256, or integer text)"
    doc_returns = "bigint"
    nulls = "NULL → NULL; a value outside the bigint range → the epoch fails naming the value"
    example = "to_int64(to_u256('42')) → 42"

    def __call__(self, values: pa.Array) -> pa.Array:
        if pa.types.is_integer(values.type):
            return values.cast(pa.int64())
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            numbers = parse_ints(values, self.name, None, fill="0")
        else:
            numbers = [0 if v is None else to_int(v, True, self.name) for v in values.to_pylist()]
        if numbers and (min(numbers) < INT64_MIN or max(numbers) > INT64_MAX):
            bad = next(n for n in numbers if not INT64_MIN <= n <= INT64_MAX)
            raise _fail(self.name, f"{bad} is out of range for bigint ({INT64_MIN} to {INT64_MAX})")
        mask = null_mask(values)
        return pa.array(numbers, pa.int64(), mask=None if mask is None else mask.to_numpy(zero_copy_only=False))


SPARK_FUNCTIONS: list[SparkFunction] = []
ARROW_FUNCTIONS: list[type[ArrowFunction]] = [
    ToU256,
    U256ToString,
    U256Add,
    U256Sub,
    U256Mul,
    U256Div,
    U256Mod,
    ToI256,
    I256ToString,
    I256Add,
    I256Sub,
    I256Mul,
    I256Div,
    I256Mod,
    I256Neg,
    I256Abs,
    ToInt64,
]
