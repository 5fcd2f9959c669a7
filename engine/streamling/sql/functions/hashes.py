"""Bytes and hashes: Keccak-256 (EVM event topics, selectors), XXH3-128 ids, Base58 (Solana), hex, base
conversion and UUIDv7.

Hex in and out are Spark built-ins; the hashes, Base58 and base conversion are Arrow functions over
`to_pylist()` values (the libraries hash one value per call, so a plain loop is as fast as it gets: well under
1 µs per 32-byte value). Functions that take text or bytes declare ``any`` and say which type they got
when it is neither."""

from __future__ import annotations

import binascii
import re
from functools import cache, lru_cache
from typing import Any, ClassVar

import pyarrow as pa
import xxhash
from based58 import b58decode
from sha3 import keccak_256
from uuid_utils import uuid7

from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction

FAMILY = "Bytes and hashes"


def _texts_or_bytes(function: str, values: pa.Array) -> tuple[list[Any], bool]:
    """The values as Python objects, and whether they are text (else bytes); NULL-typed columns count as text."""
    kind = values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind):
        return values.to_pylist(), True
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return values.to_pylist(), False
    raise StreamlingError.user(f"SQL function {function}: takes text or bytes, got a {kind} argument")


def _keccak_text(text: str) -> str | None:
    if text.startswith("0x"):
        try:
            data = binascii.unhexlify(text[2:])
        except (binascii.Error, ValueError):  # not hex (or an odd number of digits): the original gives NULL
            return None
    else:
        data = text.encode()
    return "0x" + keccak_256(data).hexdigest()


class Keccak256(ArrowFunction):
    name = "_gs_keccak256"
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    doc_arguments = "text (a `0x`-prefixed text is read as hex) or bytes"
    doc_returns = "string: `0x` and 64 lower-case hex digits"
    nulls = "NULL → NULL; `0x` then anything but an even number of hex digits → NULL; another type fails"
    example = "_gs_keccak256('Transfer(address,address,uint256)') → '0xddf252ad…b3ef'"

    def __call__(self, values: pa.Array) -> pa.Array:
        items, text = _texts_or_bytes(self.name, values)
        if text:
            return pa.array([None if v is None else _keccak_text(v) for v in items], pa.string())
        return pa.array([None if v is None else "0x" + keccak_256(v).hexdigest() for v in items], pa.string())


class XxHash(ArrowFunction):
    name = "_gs_xxhash"
    aliases: ClassVar = ("xxhash",)
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    doc_arguments = "text (hashed as UTF-8) or bytes"
    doc_returns = "string: XXH3-128 as 32 lower-case hex digits (not cryptographic)"
    nulls = "NULL → NULL; another type fails"
    example = "xxhash(concat(transaction_hash, '_', log_index::VARCHAR)) AS id"

    def __call__(self, values: pa.Array) -> pa.Array:
        items, text = _texts_or_bytes(self.name, values)
        digest = xxhash.xxh3_128_hexdigest
        if text:
            return pa.array([None if v is None else digest(v.encode()) for v in items], pa.string())
        return pa.array([None if v is None else digest(v) for v in items], pa.string())


def _base58(text: str | None) -> bytes:
    if not text:
        return b""
    try:
        return b58decode(text.encode())
    except ValueError:
        return b""


class FromBase58(ArrowFunction):
    name = "_gs_from_base58"
    arguments: ClassVar = ("string",)
    returns = "binary"
    family = FAMILY
    doc_arguments = "text (Base58, Bitcoin/Solana alphabet)"
    doc_returns = "binary"
    nulls = "NULL or not Base58 → empty bytes (as the original)"
    example = "_gs_from_base58('3yZe7d') → bytes of 'test'"

    def __call__(self, values: pa.Array) -> pa.Array:
        return pa.array([_base58(v) for v in values.to_pylist()], pa.binary())


class ReverseBytes32(ArrowFunction):
    name = "reverse_bytes32"
    arguments: ClassVar = ("binary",)
    returns = "binary"
    family = FAMILY
    doc_arguments = "bytes (32 of them)"
    doc_returns = "binary: the 32 bytes in reverse order"
    nulls = "NULL → NULL; a value of another length fails the epoch naming it (the original takes 32 bytes only)"
    example = "reverse_bytes32(hash)"

    def __call__(self, values: pa.Array) -> pa.Array:
        out = []
        for value in values.to_pylist():
            if value is not None and len(value) != 32:
                raise StreamlingError.user(
                    f"SQL function {self.name}: takes 32 bytes, got {len(value)}: 0x{value.hex()[:80]}"
                )
            out.append(None if value is None else value[::-1])
        return pa.array(out, pa.binary())


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_BASE = re.compile(r"[+-]?[0-9]+")


@lru_cache(maxsize=256)
def _base_of(value: Any) -> int | None:
    """A base given as an integer or as decimal text; None when it is neither or outside 2 to 36."""
    if isinstance(value, str):
        value = int(value) if _BASE.fullmatch(value) else None
    elif isinstance(value, bool) or not isinstance(value, int):
        value = None
    return value if value is not None and 2 <= value <= 36 else None


@cache
def _number(base: int) -> re.Pattern[str]:
    """Digits of `base` in either case after an optional sign, ``_`` allowed between them (as Rust's BigInt
    reads them); only those digits, so int() never sees a 0x/0o/0b prefix."""
    digits = "[" + re.escape(_DIGITS[:base] + _DIGITS[10:base].upper()) + "]"
    return re.compile(f"[+-]?{digits}[{digits[1:-1]}_]*")


def _in_base(number: int, base: int) -> str:
    if base == 10:
        return str(number)
    if base in (2, 8, 16):
        return format(number, {2: "b", 8: "o", 16: "x"}[base])
    sign, number = ("-", -number) if number < 0 else ("", number)
    digits = []
    while True:
        number, digit = divmod(number, base)
        digits.append(_DIGITS[digit])
        if not number:
            return sign + "".join(reversed(digits))


def conv_base(number: str | None, from_base: Any, to_base: Any) -> str | None:
    """`number` (text in `from_base`) in `to_base`, lower case; None when any part is NULL or invalid."""
    source, target = _base_of(from_base), _base_of(to_base)
    if number is None or source is None or target is None or not _number(source).fullmatch(number):
        return None
    return _in_base(int(number.replace("_", ""), source), target)


class ConvBase(ArrowFunction):
    name = "_gs_conv_base"
    arguments: ClassVar = ("string", "any", "any")
    returns = "string"
    family = FAMILY
    doc_arguments = "number (text), from_base, to_base (2 to 36, integers or decimal text)"
    doc_returns = "string: the number in to_base, lower case, any size"
    nulls = "NULL, a digit outside from_base or a base outside 2 to 36 → NULL"
    example = "_gs_conv_base('FF', '16', '10') → '255'"

    def __call__(self, numbers: pa.Array, from_bases: pa.Array, to_bases: pa.Array) -> pa.Array:
        for bases in (from_bases, to_bases):
            kind = bases.type
            if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_null(kind)):
                raise StreamlingError.user(f"SQL function {self.name}: bases are integers or text, got a {kind}")
        rows = zip(numbers.to_pylist(), from_bases.to_pylist(), to_bases.to_pylist(), strict=True)
        return pa.array([conv_base(n, f, t) for n, f, t in rows], pa.string())


class Uuid7(ArrowFunction):
    """Spark hands a vectorised function the batch's length only through an argument, so the call is given a
    constant one (``row_argument``) that the function ignores."""

    name = "uuid7"
    arguments: ClassVar = ("any",)
    min_arguments = 0
    row_argument: ClassVar[bool] = True
    returns = "string"
    deterministic = False
    family = FAMILY
    doc_arguments = ""
    doc_returns = "string: a new UUID version 7 (time-ordered) for every row"
    nulls = "never NULL"
    example = "uuid7() AS event_id"

    def __call__(self, rows: pa.Array) -> pa.Array:
        return pa.array([str(uuid7()) for _ in range(len(rows))], pa.string())


_HEX_DIGITS = "regexp_replace({0}, '^0[xX]', '')"
HEX_TO_BYTES = f"coalesce(try_to_binary(CASE WHEN length({_HEX_DIGITS}) % 2 = 0 THEN {_HEX_DIGITS} END, 'hex'), X'')"
"""Spark's hex decoding pads an odd number of digits with a leading 0; the original refuses them."""


SPARK_FUNCTIONS: list[SparkFunction] = [
    SparkFunction(
        "_gs_hex_to_byte",
        FAMILY,
        "hex text (optional `0x`, either case)",
        "binary",
        "NULL, an odd number of digits or a non-hex character → empty bytes (as the original)",
        templates={1: HEX_TO_BYTES},
        example="_gs_hex_to_byte('0xdeadbeef')",
    ),
    SparkFunction(
        "_gs_byte_to_hex",
        FAMILY,
        "bytes (text: its UTF-8 bytes)",
        "string: lower-case hex, no `0x`",
        "NULL → NULL; empty bytes → ''",
        templates={1: "lower(hex({0}))"},
        example="_gs_byte_to_hex(_gs_hex_to_byte('deadbeef')) → 'deadbeef'",
    ),
]
ARROW_FUNCTIONS: list[type[ArrowFunction]] = [Keccak256, XxHash, FromBase58, ReverseBytes32, ConvBase, Uuid7]
