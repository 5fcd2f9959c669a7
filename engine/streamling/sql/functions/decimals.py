"""Arbitrary-precision decimals in SQL (the original's ``decimal_arb``): up to 65535 digits, exact.

A value travels as decimal text in a string column marked ``decimal(p,s)``, always with exactly `s`
fractional digits (so equal values have equal text, and each function reads a value's scale from its
text). Results widen like SQL decimals — add/sub: scale max(s1, s2), one more integer digit; mul: scale
s1 + s2, precision p1 + p2 + 1; div: scale max(s1, 18), rounded half-even once; mod: scale max(s1, s2) —
with the precision capped at 65535; `numeric_rewrite` computes the marker of each result and rewrites
``+ - * / %`` and comparisons on marked values into these functions. Values are Python integers scaled by
10^s: nothing is ever rounded except a division's last digit, the narrowing casts to the original's
Arrow decimals (``decimal_arb_to_decimal128``/``…256``), ``decimal_arb_round``, ``decimal_arb_to_int64`` and
the conversions from floats and declared Arrow decimals (all half to even, as the original), and a value that
does not fit stops the epoch naming the function and the value.
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import pyarrow as pa
from sqlglot import exp

from streamling.core.markers import I256, MAX_PRECISION, U256
from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction
from streamling.sql.functions.wide_integers import INT64_MAX, INT64_MIN, RANGES

FAMILY = "Arbitrary-precision decimals"
DIVISION_SCALE = 18
_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
DECIMAL128_PRECISION = 38
"""Arrow's Decimal128, and Spark's only decimal: a ``decimal_arb_to_decimal128`` result is a Spark decimal."""
DECIMAL256_PRECISION = 76
"""Arrow's Decimal256 (ClickHouse's Decimal256): Spark has none, so a ``decimal_arb_to_decimal256`` result is
a decimal_arb value (exact text marked ``decimal(p,s)``), as every decimal past 38 digits is here."""

Scaled = tuple[int, int]
"""(unscaled integer, scale): the value unscaled * 10^-scale."""


def _fail(function: str, detail: str) -> StreamlingError:
    return StreamlingError.user(f"SQL function {function}: {detail}")


def parse(text: str, function: str) -> Scaled:
    """Decimal text (as the functions write it; exponents are read too) as (unscaled, scale)."""
    head, dot, tail = text.partition(".")
    try:
        return (int(head + tail), len(tail)) if dot else (int(head), 0)
    except ValueError:
        pass
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or not _TEXT.match(text):
        raise _fail(function, f"{text!r} is not a decimal number")
    sign, digits, exponent = number.as_tuple()
    unscaled = int(Decimal((sign, digits, 0)))
    return (unscaled * 10**exponent, 0) if exponent >= 0 else (unscaled, -exponent)


def render(unscaled: int, scale: int) -> str:
    """Exact decimal text with `scale` fractional digits (never exponent notation, never ``-0``)."""
    try:
        digits = str(abs(unscaled))
    except ValueError:  # past Python's 4300-digit int-to-text limit
        digits = str(Decimal(abs(unscaled)))
    if scale > 0:
        digits = digits.rjust(scale + 1, "0")
        digits = f"{digits[:-scale]}.{digits[-scale:]}"
    return f"-{digits}" if unscaled < 0 else digits


def digit_count(unscaled: int) -> int:
    """Significant digits of an unscaled value (at least 1)."""
    n = abs(unscaled)
    if n < 10**18:
        return len(str(n))
    return len(str(Decimal(n)))


def rescale(value: Scaled, scale: int, function: str, text: str) -> int:
    """The unscaled value at `scale`; fractional digits that would be lost are an error, never rounded."""
    unscaled, have = value
    if have <= scale:
        return unscaled * 10 ** (scale - have)
    drop = 10 ** (have - scale)
    if unscaled % drop:
        raise _fail(function, f"{text} has more than {scale} fractional digits")
    return unscaled // drop


def fit(value: Scaled, precision: int, scale: int, function: str, text: str) -> str:
    """`value` as text of a ``decimal(precision,scale)``, or an error naming it."""
    unscaled = rescale(value, scale, function, text)
    if digit_count(unscaled) > precision:
        raise _fail(function, f"{text} does not fit decimal({precision},{scale})")
    return render(unscaled, scale)


def align(left: Scaled, right: Scaled) -> tuple[int, int, int]:
    """Both values' unscaled integers at their common (larger) scale, and that scale."""
    scale = max(left[1], right[1])
    return left[0] * 10 ** (scale - left[1]), right[0] * 10 ** (scale - right[1]), scale


_LIMIT = 10**MAX_PRECISION


def _checked(function: str, unscaled: int, scale: int) -> str:
    if abs(unscaled) >= _LIMIT:
        raise _fail(function, f"the result has more than {MAX_PRECISION} digits")
    return render(unscaled, scale)


def add(a: Scaled, b: Scaled) -> Scaled:
    x, y, scale = align(a, b)
    return x + y, scale


def sub(a: Scaled, b: Scaled) -> Scaled:
    x, y, scale = align(a, b)
    return x - y, scale


def mul(a: Scaled, b: Scaled) -> Scaled:
    return a[0] * b[0], a[1] + b[1]


def div(a: Scaled, b: Scaled) -> Scaled:
    scale = max(a[1], DIVISION_SCALE)
    numerator, denominator = a[0] * 10 ** (scale - a[1] + b[1]), b[0]
    quotient, remainder = divmod(abs(numerator), abs(denominator))
    if 2 * remainder > abs(denominator) or (2 * remainder == abs(denominator) and quotient % 2):
        quotient += 1
    return (quotient if (numerator < 0) == (denominator < 0) else -quotient), scale


def mod(a: Scaled, b: Scaled) -> Scaled:
    x, y, scale = align(a, b)
    remainder = abs(x) % abs(y)
    return (-remainder if x < 0 else remainder), scale


def round_half_even(value: Scaled, scale: int) -> int:
    """The unscaled value at `scale`, dropped fractional digits rounded half to even (as the original's
    narrowing casts do: 0.125 → 0.12, 0.135 → 0.14, -0.125 → -0.12)."""
    unscaled, have = value
    if have <= scale:
        return unscaled * 10 ** (scale - have)
    divisor = 10 ** (have - scale)
    quotient, remainder = divmod(abs(unscaled), divisor)
    if 2 * remainder > divisor or (2 * remainder == divisor and quotient % 2):
        quotient += 1
    return -quotient if unscaled < 0 else quotient


def sort_key(value: Scaled, function: str) -> bytes:
    """A byte string whose unsigned byte-wise order is the numeric order of the values, whatever their scale
    (Spark, Postgres' ``bytea`` and ClickHouse's ``String`` compare bytes that way, so sorting by the key is
    numeric where the text would put '10' before '9' and '-1' after '-2'). Equal numbers get equal keys (1.50
    and 1.5), so the key also groups and compares as the numbers do.

    Zero is ``01``. Any other value is written as 0.d1d2…dn * 10^e with d1 ≠ 0 and no trailing zero: a positive
    one is ``02``, e + 2^31 in four big-endian bytes (a larger exponent is a larger number), then the digits two
    to a byte (d1·10 + d2, …; an odd last digit is padded with 0), so a key that is a prefix of another is the
    smaller number. A negative one is ``00``, the exponent field bitwise inverted, each digit byte b as 254 - b,
    and ``FF`` last (larger than any digit byte, so -0.1 sorts after -0.15): every comparison reversed."""
    unscaled, scale = value
    if unscaled == 0:
        return b"\x01"
    try:
        digits = str(abs(unscaled))
    except ValueError:  # past Python's 4300-digit int-to-text limit
        digits = str(Decimal(abs(unscaled)))
    exponent = len(digits) - scale
    if not -(2**31) <= exponent < 2**31:
        raise _fail(function, f"the exponent of {render(unscaled, scale)[:40]}… is out of range for a sort key")
    digits = digits.rstrip("0")
    if len(digits) % 2:
        digits += "0"
    pairs = bytes(int(digits[i : i + 2]) for i in range(0, len(digits), 2))
    field = exponent + 2**31
    if unscaled > 0:
        return b"\x02" + field.to_bytes(4, "big") + pairs
    return b"\x00" + (0xFFFFFFFF - field).to_bytes(4, "big") + bytes(254 - b for b in pairs) + b"\xff"


def _declaration(precision: pa.Array, scale: pa.Array, function: str, most: int = MAX_PRECISION) -> tuple[int, int]:
    p, s = precision[0].as_py() if len(precision) else 1, scale[0].as_py() if len(scale) else 0
    if p is None or s is None or not 1 <= p <= most or not 0 <= s <= p:
        raise _fail(function, f"{_declared(most)}; got precision {p}, scale {s}")
    return p, s


def _declared(most: int) -> str:
    return f"precision and scale are integer literals, 1 ≤ precision ≤ {most} and 0 ≤ scale ≤ precision"


_DECLARATION = _declared(MAX_PRECISION)


def scaled_of(value: Any, function: str) -> Scaled:
    """An integer, decimal, float (by its shortest text) or decimal text as (unscaled, scale)."""
    if isinstance(value, bool):
        raise _fail(function, f"{value!r} is not a decimal number")
    if isinstance(value, int):
        return value, 0
    if isinstance(value, float | Decimal):
        value = repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str) and _TEXT.match(value):
        return parse(value.strip(), function)
    raise _fail(function, f"{value!r} is not a decimal number")


class _Base(ArrowFunction):
    returns = "string"
    family = FAMILY


def literal_int(node: exp.Expression) -> int | None:
    """An integer literal's value (None for anything else)."""
    if isinstance(node, exp.Literal) and not node.is_string and node.name.isdigit():
        return int(node.name)
    return None


class _Conversion(_Base):
    arguments: ClassVar = ("any", "bigint", "bigint")
    lenient: ClassVar[bool] = False
    max_precision: ClassVar[int] = MAX_PRECISION
    """The widest declaration a call may ask for (Arrow's Decimal128 and Decimal256 stop at 38 and 76)."""

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        precision, scale = literal_int(args[1]), literal_int(args[2])
        most = cls.max_precision
        if precision is None or scale is None or not 1 <= precision <= most or not 0 <= scale <= precision:
            return (
                f"precision and scale must be integer literals with 1 <= precision <= {most} and "
                f"0 <= scale <= precision, got {args[1].sql(dialect='spark')}, {args[2].sql(dialect='spark')}"
            )
        kind = args[3] if len(args) > 3 else None
        if kind is not None and not (isinstance(kind, exp.Literal) and kind.is_string and kind.name in RANGES):
            return f"native_int_kind must be the literal 'u256' or 'i256', got {kind.sql(dialect='spark')}"
        return None

    def __call__(self, values: pa.Array, precision: pa.Array, scale: pa.Array, *kind: pa.Array) -> pa.Array:
        p, s = _declaration(precision, scale, self.name, self.max_precision)
        native = str(kind[0][0].as_py()).lower() if kind and len(kind[0]) and s == 0 else None
        low, high = RANGES.get(native, (None, None))
        out = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            try:
                text = fit(scaled_of(value, self.name), p, s, self.name, repr(value))
                if low is not None and not low <= int(text) <= high:
                    raise _fail(self.name, f"{value!r} is out of range for {native} ({low} to {high})")
                out.append(text)
            except StreamlingError:
                if not self.lenient:
                    raise
                out.append(None)
        return pa.array(out, pa.string())


class ToDecimalArb(_Conversion):
    name = "to_decimal_arb"
    doc_arguments = "value (integer, decimal or decimal text), precision, scale (integer literals)"
    doc_returns = (
        "decimal(precision,scale) (exact decimal text; NUMERIC(p,s) in Postgres, Decimal(p,s) in ClickHouse up to "
        "76 digits, else String)"
    )
    nulls = (
        "NULL → NULL; excess fractional digits, too many integer digits or malformed text → the epoch fails "
        "naming the value; " + _DECLARATION + " (checked by --validate)"
    )
    example = "decimal_arb_to_string(to_decimal_arb('123.45', 100, 4)) → '123.4500'"


class ToDecimalArbFromString(_Conversion):
    name = "to_decimal_arb_from_string"
    aliases: ClassVar = ("to_decimal_arb_from_str",)
    arguments: ClassVar = ("string", "bigint", "bigint", "string")
    min_arguments: ClassVar = 3
    doc_arguments = "text, precision, scale[, native_int_kind ('u256' or 'i256': with scale 0, the result is one)]"
    doc_returns = "decimal(precision,scale), or u256/i256 when native_int_kind is given and scale is 0"
    nulls = ToDecimalArb.nulls
    example = "to_decimal_arb_from_string('123.45', 100, 2) → 123.45"


class TryToDecimalArbFromString(ToDecimalArbFromString):
    name = "try_to_decimal_arb_from_string"
    aliases: ClassVar = ()  # not ToDecimalArbFromString's
    lenient = True
    nulls = "NULL, malformed text or a value that does not fit → NULL; " + _DECLARATION + " (checked by --validate)"
    example = "try_to_decimal_arb_from_string('bad', 100, 2) → NULL"


class ToDecimalArbFromInt(_Conversion):
    name = "to_decimal_arb_from_int"
    arguments: ClassVar = ("bigint", "bigint", "bigint")
    doc_arguments = "value (integer), precision, scale (integer literals)"
    doc_returns = "decimal(precision,scale)"
    nulls = "NULL → NULL; too many digits → the epoch fails naming the value; " + _DECLARATION
    example = "to_decimal_arb_from_int(123, 100, 2) → 123.00"


class DecimalArbRescale(_Conversion):
    name = "decimal_arb_rescale"
    arguments: ClassVar = ("string", "bigint", "bigint")
    doc_arguments = "value (decimal_arb), precision, scale (integer literals)"
    doc_returns = "decimal(precision,scale): the same number"
    nulls = "NULL → NULL; fractional digits that would be lost or too many digits → the epoch fails naming the value"
    example = "decimal_arb_to_string(decimal_arb_rescale(to_decimal_arb('1.5', 10, 1), 100, 4)) → '1.5000'"


class _Narrowing(_Conversion):
    """decimal_arb (or decimal text) to an Arrow fixed-width decimal, as the original's ``decimal_arb_to_decimal128``
    and ``…256``: dropped fractional digits are rounded half to even, and a value with more than `precision`
    digits after rounding stops the epoch naming it (as every conversion here that does not fit does)."""

    arguments: ClassVar = ("string", "bigint", "bigint")

    def __call__(self, values: pa.Array, precision: pa.Array, scale: pa.Array, *kind: pa.Array) -> pa.Array:
        del kind  # always empty: `arguments` declares three, so a fourth fails the arity check at --validate
        p, s = _declaration(precision, scale, self.name, self.max_precision)
        out: list[str | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            unscaled = round_half_even(parse(value, self.name), s)
            if digit_count(unscaled) > p:
                raise _fail(self.name, f"{value} does not fit decimal({p},{s}) (rounded to {s} fractional digits)")
            out.append(render(unscaled, s))
        return pa.array(out, pa.string())


class DecimalArbToDecimal128(_Narrowing):
    name = "decimal_arb_to_decimal128"
    max_precision = DECIMAL128_PRECISION
    doc_arguments = (
        "value (decimal_arb; integers, decimals and decimal text are converted), precision, scale (integer literals)"
    )
    doc_returns = (
        "decimal(precision,scale): a Spark decimal (Arrow's Decimal128), the value rounded half to even to scale"
    )
    nulls = (
        "NULL → NULL; more than precision digits after rounding, or malformed text → the epoch fails naming the "
        "value; " + _declared(DECIMAL128_PRECISION) + " (checked by --validate)"
    )
    example = "decimal_arb_to_decimal128(to_decimal_arb('1.2345', 100, 4), 20, 2) → 1.23 (decimal(20,2))"


class DecimalArbToDecimal256(_Narrowing):
    name = "decimal_arb_to_decimal256"
    max_precision = DECIMAL256_PRECISION
    doc_arguments = DecimalArbToDecimal128.doc_arguments
    doc_returns = (
        "decimal(precision,scale) up to 76 digits (Arrow's Decimal256; Spark has none, so a decimal_arb: exact "
        "text, NUMERIC(p,s) in Postgres, Decimal(p,s) in ClickHouse), rounded half to even to scale"
    )
    nulls = (
        "NULL → NULL; more than precision digits after rounding, or malformed text → the epoch fails naming the "
        "value; " + _declared(DECIMAL256_PRECISION) + " (checked by --validate)"
    )
    example = "decimal_arb_to_string(decimal_arb_to_decimal256(to_decimal_arb('2.675', 100, 3), 76, 2)) → '2.68'"


class _FromArrowDecimal(_Narrowing):
    """The original's ``to_decimal_arb_from_decimal128``/``…256``: with the value alone, a decimal keeps its
    precision and scale (`numeric_rewrite` reads them from the argument's type, so the call is a plain
    ``to_decimal_arb``); with a declared precision and scale, dropped fractional digits are rounded half to even
    and a value with too many digits stops the epoch naming it."""

    arguments: ClassVar = ("any", "bigint", "bigint")
    min_arguments: ClassVar = 1
    source_precision: ClassVar[int]

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        return None if len(args) == 1 else super().check(args)

    def __call__(self, values: pa.Array, *declared: pa.Array) -> pa.Array:
        if len(declared) != 2:  # `numeric_rewrite` replaces every one-argument call whose type it knows
            raise _fail(self.name, f"takes a decimal of at most {self.source_precision} digits (of known type)")
        return super().__call__(pa.array([None if v is None else str(v) for v in values.to_pylist()]), *declared)


class ToDecimalArbFromDecimal128(_FromArrowDecimal):
    name = "to_decimal_arb_from_decimal128"
    source_precision = DECIMAL128_PRECISION
    doc_arguments = "value (decimal(p,s), p ≤ 38)[, precision, scale (integer literals)]"
    doc_returns = "decimal_arb: decimal(p,s) of the value's own type, or decimal(precision,scale) rounded half to even"
    nulls = (
        "NULL → NULL; a value that is not a decimal of known type is refused by --validate; too many digits after "
        "rounding → the epoch fails naming the value"
    )
    example = "decimal_arb_to_string(to_decimal_arb_from_decimal128(CAST(1.25 AS DECIMAL(10,2)))) → '1.25'"


class ToDecimalArbFromDecimal256(_FromArrowDecimal):
    name = "to_decimal_arb_from_decimal256"
    source_precision = DECIMAL256_PRECISION
    doc_arguments = (
        "value (decimal(p,s), p ≤ 76: a Spark decimal or a decimal_arb of at most 76 digits)[, precision, scale]"
    )
    doc_returns = ToDecimalArbFromDecimal128.doc_returns
    nulls = ToDecimalArbFromDecimal128.nulls
    example = (
        "decimal_arb_to_string(to_decimal_arb_from_decimal256(decimal_arb_to_decimal256(to_decimal_arb('2.5', 80, 1),"
        " 76, 1))) → '2.5'"
    )


_WARNED: set[str] = set()
"""Call sites (the call as written) already warned about, so a query run every epoch warns once."""


def warn_once(function: str, call: str, detail: str) -> None:
    """Log the original's one warning per call site of a conversion through floating point."""
    if call in _WARNED:
        return
    _WARNED.add(call)
    logging.getLogger("streamling.sql").warning("%s: %s (%s)", function, detail, call)


class ToDecimalArbFromFloat(_Conversion):
    """A float's exact binary value is rarely the decimal its text shows (0.1 is 0.1000000000000000055…): the
    value is read by its shortest text (what Spark and Python print) and rounded half to even to the scale,
    never refused for its fractional digits; the call site is warned about once, as in the original."""

    name = "to_decimal_arb_from_float"
    arguments: ClassVar = ("double", "bigint", "bigint")
    doc_arguments = "value (float or double), precision, scale (integer literals)"
    doc_returns = "decimal(precision,scale): the float's shortest text, rounded half to even to scale"
    nulls = (
        "NULL → NULL; NaN, infinity or too many digits → the epoch fails naming the value; a warning is logged once "
        "per call site (floating point is inexact); " + _DECLARATION + " (checked by --validate)"
    )
    example = "decimal_arb_to_string(to_decimal_arb_from_float(0.125, 10, 2)) → '0.12'"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        problem = super().check(args)
        if problem is None:
            call = exp.Anonymous(this=cls.name, expressions=[a.copy() for a in args]).sql(dialect="spark")
            warn_once(cls.name, call, "converting a float to a decimal can carry IEEE 754 imprecision")
        return problem

    def __call__(self, values: pa.Array, precision: pa.Array, scale: pa.Array, *kind: pa.Array) -> pa.Array:
        del kind
        p, s = _declaration(precision, scale, self.name)
        out: list[str | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            if value != value or value in (float("inf"), float("-inf")):
                raise _fail(self.name, f"{value!r} is not a finite number")
            unscaled = round_half_even(parse(repr(float(value)), self.name), s)
            if digit_count(unscaled) > p:
                raise _fail(self.name, f"{value!r} does not fit decimal({p},{s}) (rounded to {s} fractional digits)")
            out.append(render(unscaled, s))
        return pa.array(out, pa.string())


class DecimalArbRound(_Base):
    """Rounding half to even to a literal scale: the result is ``decimal(p', target)`` where p' keeps every
    integer digit (and the carry of 9.99 → 10.0) — `numeric_rewrite` computes it from the operand's type."""

    name = "decimal_arb_round"
    arguments: ClassVar = ("string", "bigint")
    doc_arguments = "value (decimal_arb; integers and decimals are converted), target_scale (integer literal ≥ 0)"
    doc_returns = "decimal(max(p, p - s + target_scale), target_scale): value rounded half to even"
    nulls = "NULL → NULL; target_scale not an integer literal ≥ 0 → refused by --validate"
    example = "decimal_arb_to_string(decimal_arb_round(to_decimal_arb('2.675', 10, 3), 2)) → '2.68'"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        scale = literal_int(args[1])
        if scale is None or scale > MAX_PRECISION:
            return f"target_scale must be an integer literal from 0 to {MAX_PRECISION}, got {args[1].sql('spark')}"
        return None

    def __call__(self, values: pa.Array, scale: pa.Array) -> pa.Array:
        target = scale[0].as_py() if len(scale) else 0
        if target is None or not 0 <= target <= MAX_PRECISION:
            raise _fail(self.name, f"target_scale must be from 0 to {MAX_PRECISION}, got {target}")
        out = []
        for value in values.to_pylist():
            out.append(
                None if value is None else _checked(self.name, round_half_even(parse(value, self.name), target), target)
            )
        return pa.array(out, pa.string())


class DecimalArbToInt64(ArrowFunction):
    name = "decimal_arb_to_int64"
    arguments: ClassVar = ("string",)
    returns = "bigint"
    family = FAMILY
    doc_arguments = "value (decimal_arb; integers and decimals are converted)"
    doc_returns = "bigint: value rounded half to even to an integer"
    nulls = "NULL → NULL; a value outside the bigint range after rounding → the epoch fails naming it"
    example = "decimal_arb_to_int64(to_decimal_arb('2.5', 10, 1)) → 2"

    def __call__(self, values: pa.Array) -> pa.Array:
        out: list[int | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            number = round_half_even(parse(value, self.name), 0)
            if not INT64_MIN <= number <= INT64_MAX:
                raise _fail(self.name, f"{value} is out of range for bigint ({INT64_MIN} to {INT64_MAX})")
            out.append(number)
        return pa.array(out, pa.int64())


class DecimalArbToFloat64(ArrowFunction):
    """The nearest double (Python's correctly rounded decimal-to-float); the call site is warned about once."""

    name = "decimal_arb_to_float64"
    arguments: ClassVar = ("string",)
    returns = "double"
    family = FAMILY
    doc_arguments = "value (decimal_arb; integers and decimals are converted)"
    doc_returns = "double: the nearest double (inexact past 15 to 17 digits)"
    nulls = (
        "NULL → NULL; a value past the double range → the epoch fails naming it; a warning is logged once per call "
        "site (floating point is inexact)"
    )
    example = "decimal_arb_to_float64(to_decimal_arb('1.5', 10, 1)) → 1.5"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        call = exp.Anonymous(this=cls.name, expressions=[a.copy() for a in args]).sql(dialect="spark")
        warn_once(cls.name, call, "converting a decimal to a float can lose digits")
        return None

    def __call__(self, values: pa.Array) -> pa.Array:
        out: list[float | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            unscaled, scale = parse(value, self.name)
            number = float(Decimal(unscaled).scaleb(-scale))
            if number in (float("inf"), float("-inf")):
                raise _fail(self.name, f"{value[:40]} is out of range for a double")
            out.append(number)
        return pa.array(out, pa.float64())


class _ArrayExtreme(_Base):
    arguments: ClassVar = (pa.list_(pa.string()),)
    doc_arguments = "list (array of decimal_arb)"
    nulls = "NULL, empty or all-NULL list → NULL; NULL elements are skipped"
    largest: ClassVar[bool]

    def __call__(self, lists: pa.Array) -> pa.Array:
        out: list[str | None] = []
        for items in lists.to_pylist():
            present = [v for v in items or () if v is not None]
            if not present:
                out.append(None)
                continue
            pick = max if self.largest else min
            out.append(pick(present, key=lambda v: Decimal(render(*parse(v, self.name)))))
        return pa.array(out, pa.string())


class DecimalArbArrayMin(_ArrayExtreme):
    name, largest = "decimal_arb_array_min", False
    doc_returns = "decimal_arb: the smallest element (the elements' precision and scale)"
    example = "decimal_arb_array_min(array(to_decimal_arb('10', 5, 1), to_decimal_arb('9.5', 5, 1))) → 9.5"


class DecimalArbArrayMax(_ArrayExtreme):
    name, largest = "decimal_arb_array_max", True
    doc_returns = "decimal_arb: the largest element (the elements' precision and scale)"
    example = "decimal_arb_array_max(array(to_decimal_arb('10', 5, 1), to_decimal_arb('9.5', 5, 1))) → 10.0"


_ORDERS, _NULLS = ("ASC", "DESC"), ("NULLS FIRST", "NULLS LAST")


def _word(node: exp.Expression) -> str | None:
    return " ".join(node.name.upper().split()) if isinstance(node, exp.Literal) and node.is_string else None


class DecimalArbArraySort(ArrowFunction):
    name = "decimal_arb_array_sort"
    arguments: ClassVar = (pa.list_(pa.string()), "string", "string")
    min_arguments: ClassVar = 1
    returns = pa.list_(pa.string())
    family = FAMILY
    doc_arguments = "list (array of decimal_arb)[, order ('ASC' or 'DESC')[, nulls ('NULLS FIRST' or 'NULLS LAST')]]"
    doc_returns = "array of decimal_arb: the elements in numeric order (ASC, NULLS FIRST by default), unchanged"
    nulls = "NULL list → NULL; another order or nulls word → refused by --validate"
    example = "decimal_arb_array_sort(array(to_decimal_arb('10', 5, 0), to_decimal_arb('9', 5, 0)), 'DESC') → [10, 9]"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        for node, words, what in zip(args[1:], (_ORDERS, _NULLS), ("order", "nulls"), strict=False):
            if _word(node) not in words:
                allowed = " or ".join(f"'{w}'" for w in words)
                return f"{what} must be the literal {allowed}, got {node.sql(dialect='spark')}"
        return None

    def __call__(self, lists: pa.Array, *words: pa.Array) -> pa.Array:
        said = [" ".join(str(w[0].as_py()).upper().split()) if len(w) else "" for w in words]
        descending, nulls_last = said[:1] == ["DESC"], said[1:2] == ["NULLS LAST"]
        rows = lists.to_pylist()
        numbers = {v: Decimal(render(*parse(v, self.name))) for items in rows for v in items or () if v is not None}
        out: list[list[str | None] | None] = []
        for items in rows:
            if items is None:
                out.append(None)
                continue
            present = sorted((v for v in items if v is not None), key=numbers.__getitem__, reverse=descending)
            missing = [None] * (len(items) - len(present))
            out.append(present + missing if nulls_last else missing + present)
        return pa.array(out, pa.list_(pa.string()))


class DecimalArbRestamp(_Base):
    """The original restores decimal_arb metadata from a template without touching the value's bytes (for
    planner-generated SQL); here a value is its text and the metadata its marker, so `numeric_rewrite` replaces
    the call by the value typed as the template. Running it (where that did not happen) gives the value's text."""

    name = "decimal_arb_restamp"
    arguments: ClassVar = ("string", "any")
    doc_arguments = "value, template"
    doc_returns = "value unchanged, typed as template (its decimal(p,s), u256 or i256 marker)"
    nulls = "NULL value → NULL; nothing is rescaled or checked (as in the original)"
    example = "decimal_arb_restamp(decimal_arb_to_string(amount), amount) → amount's text, marked as amount"

    def __call__(self, values: pa.Array, template: pa.Array) -> pa.Array:
        del template
        return values


class LegacyWideIntToDecimalArb(_Base):
    """A u256/i256 (the original's retired FixedSizeBinary(32) integers; here exact text marked ``u256`` or
    ``i256``) as a decimal_arb ``decimal(78,0)`` of the same digits."""

    name = "legacy_wide_int_to_decimal_arb"
    arguments: ClassVar = ("any",)
    doc_arguments = "value (u256 or i256)"
    doc_returns = "decimal(78,0): the same integer"
    nulls = "NULL → NULL; bytes, or text that is not an integer in the u256 or i256 range → the epoch fails naming it"
    example = "decimal_arb_to_string(legacy_wide_int_to_decimal_arb(to_u256('5'))) → '5'"

    def __call__(self, values: pa.Array) -> pa.Array:
        kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_null)
        if not any(kind(values.type) for kind in kinds):
            raise _fail(self.name, f"takes a u256 or i256 value, got {values.type} (untagged bytes are rejected)")
        out: list[str | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            try:
                number = int(str(value).strip())
            except ValueError:
                raise _fail(self.name, f"{value!r} is not a u256 or i256 integer") from None
            if not RANGES[I256][0] <= number <= RANGES[U256][1]:
                raise _fail(self.name, f"{value} is out of range for u256 and i256")
            out.append(str(number))
        return pa.array(out, pa.string())


class DecimalArbToSortKey(ArrowFunction):
    name = "decimal_arb_to_sort_key"
    arguments: ClassVar = ("string",)
    returns = "binary"
    family = FAMILY
    doc_arguments = "value (decimal_arb; integers, decimals and decimal text are converted)"
    doc_returns = (
        "binary: a key whose unsigned byte order is the numeric order at any scale (the text's is not: '10' < '9'), "
        "for a sink's table to sort by or to compare keys; equal numbers get equal keys (1.50 and 1.5); not a "
        "decimal_arb, and its bytes are this runtime's, not the original's"
    )
    nulls = "NULL → NULL; malformed text → the epoch fails naming the value"
    example = (
        "decimal_arb_to_sort_key(to_decimal_arb('-2', 10, 0)) < decimal_arb_to_sort_key(to_decimal_arb('-1.5', 10, 1))"
        " → true"
    )

    def __call__(self, values: pa.Array) -> pa.Array:
        keys = [None if v is None else sort_key(parse(v, self.name), self.name) for v in values.to_pylist()]
        return pa.array(keys, pa.binary())


class DecimalArbToString(_Base):
    name = "decimal_arb_to_string"
    arguments: ClassVar = ("string",)
    doc_arguments = "value (decimal_arb)"
    doc_returns = "string (every fractional digit of its scale, no marker: a text column in sinks)"
    nulls = "NULL → NULL"
    example = "decimal_arb_to_string(to_decimal_arb('1.5', 10, 3)) → '1.500'"

    def __call__(self, values: pa.Array) -> pa.Array:
        return pa.array([None if v is None else render(*parse(v, self.name)) for v in values.to_pylist()], pa.string())


class _Binary(_Base):
    arguments: ClassVar = ("string", "string")
    doc_arguments = "left, right (decimal_arb; integers and decimals are converted)"
    symbol: ClassVar[str]
    operation: ClassVar[Callable[[Scaled, Scaled], Scaled]]

    def __call__(self, left: pa.Array, right: pa.Array) -> pa.Array:
        out: list[str | None] = []
        for x, y in zip(left.to_pylist(), right.to_pylist(), strict=True):
            if x is None or y is None:
                out.append(None)
                continue
            b = parse(y, self.name)
            if self.symbol in "/%" and b[0] == 0:
                raise _fail(self.name, f"division by zero ({x} {self.symbol} {y})")
            out.append(_checked(self.name, *self.operation(parse(x, self.name), b)))
        return pa.array(out, pa.string())


class DecimalArbAdd(_Binary):
    name, symbol, operation = "decimal_arb_add", "+", staticmethod(add)
    doc_returns = "decimal_arb: left + right (scale max(s1, s2))"
    nulls = "NULL operand → NULL"
    example = "decimal_arb_add(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2)) → 3.75"


class DecimalArbSub(_Binary):
    name, symbol, operation = "decimal_arb_sub", "-", staticmethod(sub)
    doc_returns = "decimal_arb: left - right (scale max(s1, s2))"
    nulls = "NULL operand → NULL"
    example = "decimal_arb_sub(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2)) → -0.75"


class DecimalArbMul(_Binary):
    name, symbol, operation = "decimal_arb_mul", "*", staticmethod(mul)
    doc_returns = "decimal_arb: left * right (scale s1 + s2)"
    nulls = "NULL operand → NULL"
    example = "decimal_arb_mul(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2)) → 3.375"


class DecimalArbDiv(_Binary):
    name, symbol, operation = "decimal_arb_div", "/", staticmethod(div)
    doc_returns = "decimal_arb: left / right (scale max(s1, 18), rounded half-even once)"
    nulls = "NULL operand → NULL; a zero divisor → the epoch fails naming the values"
    example = "decimal_arb_div(to_decimal_arb(2, 10, 0), to_decimal_arb(3, 10, 0)) → 0.666666666666666667"


class DecimalArbMod(_Binary):
    name, symbol, operation = "decimal_arb_mod", "%", staticmethod(mod)
    doc_returns = "decimal_arb: the remainder of left / right (sign of left, scale max(s1, s2))"
    nulls = "NULL operand → NULL; a zero divisor → the epoch fails naming the values"
    example = "decimal_arb_mod(to_decimal_arb('7.5', 10, 1), to_decimal_arb(2, 10, 0)) → 1.5"


class _Unary(_Base):
    arguments: ClassVar = ("string",)
    doc_arguments = "value (decimal_arb)"
    nulls = "NULL → NULL"
    operation: ClassVar[Callable[[int], int]]

    def __call__(self, values: pa.Array) -> pa.Array:
        out = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            unscaled, scale = parse(value, self.name)
            out.append(render(self.operation(unscaled), scale))
        return pa.array(out, pa.string())


class DecimalArbNeg(_Unary):
    name, operation = "decimal_arb_neg", staticmethod(operator.neg)
    doc_returns = "decimal_arb: -value (same precision and scale)"
    example = "decimal_arb_neg(to_decimal_arb('1.50', 10, 2)) → -1.50"


class DecimalArbAbs(_Unary):
    name, operation = "decimal_arb_abs", staticmethod(abs)
    doc_returns = "decimal_arb: |value| (same precision and scale)"
    example = "decimal_arb_abs(to_decimal_arb('-1.50', 10, 2)) → 1.50"


class _Comparison(ArrowFunction):
    arguments: ClassVar = ("string", "string")
    returns = "boolean"
    family = FAMILY
    doc_arguments = "left, right (decimal_arb; integers and decimals are converted)"
    nulls = "NULL operand → NULL"
    symbol: ClassVar[str]
    operation: ClassVar[Callable[[int, int], bool]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.doc_returns = f"boolean: left {cls.symbol} right, compared as numbers (1.50 = 1.5)"
        cls.example = f"{cls.name}(to_decimal_arb('1.50', 10, 2), to_decimal_arb('1.5', 10, 1))"

    def __call__(self, left: pa.Array, right: pa.Array) -> pa.Array:
        out: list[bool | None] = []
        for x, y in zip(left.to_pylist(), right.to_pylist(), strict=True):
            if x is None or y is None:
                out.append(None)
                continue
            a, b, _ = align(parse(x, self.name), parse(y, self.name))
            out.append(self.operation(a, b))
        return pa.array(out, pa.bool_())


class DecimalArbEq(_Comparison):
    name, symbol, operation = "decimal_arb_eq", "=", staticmethod(operator.eq)


class DecimalArbNeq(_Comparison):
    name, symbol, operation = "decimal_arb_neq", "<>", staticmethod(operator.ne)


class DecimalArbLt(_Comparison):
    name, symbol, operation = "decimal_arb_lt", "<", staticmethod(operator.lt)


class DecimalArbLte(_Comparison):
    name, symbol, operation = "decimal_arb_lte", "<=", staticmethod(operator.le)


class DecimalArbGt(_Comparison):
    name, symbol, operation = "decimal_arb_gt", ">", staticmethod(operator.gt)


class DecimalArbGte(_Comparison):
    name, symbol, operation = "decimal_arb_gte", ">=", staticmethod(operator.ge)


class _Extreme(_Base):
    arguments: ClassVar = ("string",)
    variadic: ClassVar = True
    doc_arguments = "value[, value …] (decimal_arb)"
    nulls = "NULL arguments are skipped; NULL only when all are NULL"
    largest: ClassVar[bool]

    def __call__(self, *columns: pa.Array) -> pa.Array:
        rows = [[None if v is None else parse(v, self.name) for v in c.to_pylist()] for c in columns]
        scale = max((v[1] for row in rows for v in row if v is not None), default=0)
        pick = max if self.largest else min
        out = []
        for values in zip(*rows, strict=True):
            present = [v[0] * 10 ** (scale - v[1]) for v in values if v is not None]
            out.append(render(pick(present), scale) if present else None)
        return pa.array(out, pa.string())


class DecimalArbGreatest(_Extreme):
    name, largest = "decimal_arb_greatest", True
    doc_returns = "decimal_arb: the largest (at the arguments' largest scale)"
    example = "decimal_arb_greatest(to_decimal_arb('1.5', 10, 1), to_decimal_arb(2, 10, 0), NULL) → 2.0"


class DecimalArbLeast(_Extreme):
    name, largest = "decimal_arb_least", False
    doc_returns = "decimal_arb: the smallest (at the arguments' largest scale)"
    example = "decimal_arb_least(to_decimal_arb('1.5', 10, 1), to_decimal_arb(2, 10, 0)) → 1.5"


SPARK_FUNCTIONS: list[SparkFunction] = []
ARROW_FUNCTIONS: list[type[ArrowFunction]] = [
    ToDecimalArb,
    ToDecimalArbFromString,
    TryToDecimalArbFromString,
    ToDecimalArbFromInt,
    DecimalArbToString,
    DecimalArbAdd,
    DecimalArbSub,
    DecimalArbMul,
    DecimalArbDiv,
    DecimalArbMod,
    DecimalArbNeg,
    DecimalArbAbs,
    DecimalArbEq,
    DecimalArbNeq,
    DecimalArbLt,
    DecimalArbLte,
    DecimalArbGt,
    DecimalArbGte,
    DecimalArbGreatest,
    DecimalArbLeast,
    DecimalArbRescale,
    DecimalArbToDecimal128,
    DecimalArbToDecimal256,
    DecimalArbToSortKey,
    ToDecimalArbFromDecimal128,
    ToDecimalArbFromDecimal256,
    ToDecimalArbFromFloat,
    DecimalArbRound,
    DecimalArbToInt64,
    DecimalArbToFloat64,
    DecimalArbArrayMin,
    DecimalArbArrayMax,
    DecimalArbArraySort,
    DecimalArbRestamp,
    LegacyWideIntToDecimalArb,
]
