"""Bytes and hashes: the original's documented results, NULL and bad input, run by Spark as a sql transform
runs them."""

from __future__ import annotations

import re

import pytest
import sha3

from streamling.errors import StreamlingError
from streamling.sql.functions.hashes import conv_base
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import evaluated, failure, frame, value, values

TRANSFER = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
DEADBEEF_KECCAK = "0x" + sha3.keccak_256(bytes.fromhex("deadbeef")).hexdigest()


KECCAK256 = [
    ("_gs_keccak256('Transfer(address,address,uint256)')", TRANSFER),
    ("_GS_Keccak256('Transfer(address,address,uint256)')", TRANSFER),
    ("_gs_keccak256('0xdeadbeef')", DEADBEEF_KECCAK),
    ("_gs_keccak256(X'deadbeef')", DEADBEEF_KECCAK),
    ("_gs_keccak256('0xdeadbee')", None),  # odd number of hex digits
    ("_gs_keccak256('0xnothex')", None),
    ("_gs_keccak256('0XDEADBEEF')", "0x" + sha3.keccak_256(b"0XDEADBEEF").hexdigest()),  # only 0x means hex
    ("_gs_keccak256(NULL)", None),
    ("_gs_keccak256(CAST(NULL AS BINARY))", None),
]


def test_keccak256(spark) -> None:
    assert evaluated(spark, KECCAK256) == KECCAK256


def test_keccak256_of_a_number_fails_naming_the_function(spark) -> None:
    assert "SQL function _gs_keccak256: takes text or bytes, got a int64 argument" in failure(spark, "_gs_keccak256(x)")


XXHASH = [
    ("_gs_xxhash('hello')", "b5e9c1ad071b3e7fc779cfaa5e523818"),
    ("xxhash('hello')", "b5e9c1ad071b3e7fc779cfaa5e523818"),
    ("XXHash(X'68656c6c6f')", "b5e9c1ad071b3e7fc779cfaa5e523818"),
    ("_gs_xxhash('')", "99aa06d3014798d86001c324468d497f"),
    ("_gs_xxhash(NULL)", None),
]


def test_xxhash_is_xxh3_128_in_hex(spark) -> None:
    assert evaluated(spark, XXHASH) == XXHASH


def test_xxhash_documented_id_expression(spark) -> None:
    """The original's docs build row ids with ``log_index::VARCHAR`` (Postgres cast syntax)."""
    source = frame(spark, [("0xabc", 7), ("0xabc", None)], "transaction_hash string, log_index bigint")
    ids = values(spark, "xxhash(concat(transaction_hash, '_', log_index::VARCHAR))", source)
    assert ids[0] == value(spark, "xxhash('0xabc_7')")
    assert ids[1] == value(spark, "xxhash('0xabc_')")  # the Postgres-like concat skips NULLs
    assert all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)


MEMO = (
    "P7S1xSLSi6hwpoDNi99khRHSNhWmm1kHixjWySCsb3REb9ydJFmDeVuNHgRJ6xiMfkgoUY97LDYbYMP12yTgk46oTuBFx8DXZe1QwCUPh3v7Ucoy"
    "J2MkZ3fHoseH1DXRpxLWcViPwUgC36Z1FLWHdRvdk3n1ce4ZA4c2rY7ErTiw9k8hv5HHGcThzuD"
)


FROM_BASE58 = [
    ("_gs_from_base58('3yZe7d')", b"test"),
    ("_GS_FROM_BASE58('StV1DL6CwTryKyV')", b"hello world"),
    ("_gs_from_base58('0OIl')", b""),  # not in the alphabet
    ("_gs_from_base58('')", b""),
    ("_gs_from_base58(NULL)", b""),
]


def test_from_base58(spark) -> None:
    assert evaluated(spark, FROM_BASE58) == FROM_BASE58


def test_from_base58_decodes_a_solana_memo(spark) -> None:
    decoded = value(spark, f"_gs_from_base58('{MEMO}')")
    assert decoded.startswith(b"BONKbot MEV-Protect transaction priority tip for 31GmGas")


HEX_BYTES = [
    ("_gs_hex_to_byte('deadbeef')", b"\xde\xad\xbe\xef"),
    ("_gs_hex_to_byte('0xDEADbeef')", b"\xde\xad\xbe\xef"),
    ("_Gs_Hex_To_Byte('0X48656c6c6f')", b"Hello"),
    ("_gs_hex_to_byte('0x')", b""),
    ("_gs_hex_to_byte('abc')", b""),  # odd length: Spark alone would pad it
    ("_gs_hex_to_byte('invalid')", b""),
    ("_gs_hex_to_byte(' ab')", b""),
    ("_gs_hex_to_byte(NULL)", b""),
    ("_gs_byte_to_hex(_gs_hex_to_byte('deadbeef'))", "deadbeef"),
    ("_gs_byte_to_hex(X'48656C6C6F')", "48656c6c6f"),
    ("_GS_BYTE_TO_HEX(X'')", ""),
    ("_gs_byte_to_hex(NULL)", None),
]


def test_hex_bytes(spark) -> None:
    assert evaluated(spark, HEX_BYTES) == HEX_BYTES


def test_reverse_bytes32(spark) -> None:
    word = bytes(range(32))
    source = frame(spark, [(word,), (None,)], "h binary")
    assert values(spark, "reverse_bytes32(h)", source) == [word[::-1], None]
    assert values(spark, "Reverse_Bytes32(reverse_bytes32(h))", source) == [word, None]


def test_reverse_bytes32_of_another_length_fails_naming_the_value(spark) -> None:
    assert "SQL function reverse_bytes32: takes 32 bytes, got 2: 0x0102" in failure(spark, "reverse_bytes32(X'0102')")


CONV_BASE = [
    ("_gs_conv_base('FF', '16', '10')", "255"),
    ("_gs_conv_base('ff', 16, 10)", "255"),
    ("_GS_CONV_BASE('1010', '2', '16')", "a"),
    ("_gs_conv_base('-255', '10', '16')", "-ff"),
    ("_gs_conv_base('zz', '36', '2')", "10100001111"),
    ("_gs_conv_base('" + "f" * 64 + "', '16', '10')", str(2**256 - 1)),  # any size
    ("_gs_conv_base('FG', '16', '10')", None),  # Spark's conv would stop at G and give 255
    ("_gs_conv_base('0x10', '16', '10')", None),
    ("_gs_conv_base('10', '1', '10')", None),
    ("_gs_conv_base('10', '10', '37')", None),
    ("_gs_conv_base('10', 'ten', '2')", None),
    ("_gs_conv_base(NULL, '16', '10')", None),
    ("_gs_conv_base('10', NULL, '10')", None),
]


def test_conv_base(spark) -> None:
    assert evaluated(spark, CONV_BASE) == CONV_BASE


@pytest.mark.parametrize(
    ("number", "source", "target", "expected"),
    [
        ("1_000", 10, 16, "3e8"),  # underscores between digits are ignored, as Rust's BigInt reads them
        ("_1", 10, 10, None),
        ("+7", "8", "2", "111"),
        ("", 10, 10, None),
        ("1", True, 10, None),
        ("10", " 16", 10, None),
    ],
)
def test_conv_base_edge_cases(number, source, target, expected) -> None:
    assert conv_base(number, source, target) == expected


def test_conv_base_per_row_bases(spark) -> None:
    source = frame(spark, [("11", 2, 10), ("11", 16, 10), ("11", 10, 40)], "n string, f int, t int")
    assert values(spark, "_gs_conv_base(n, f, t)", source) == ["3", "17", None]


def test_uuid7_is_a_fresh_version_7_uuid_per_row(spark) -> None:
    source = frame(spark, [(i,) for i in range(50)], "x bigint")
    ids = values(spark, "uuid7()", source) + values(spark, "UUID7()", source)
    assert len(set(ids)) == 100
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i) for i in ids)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT uuid7(1) AS u FROM t",
            "SQL transform 'x': function uuid7 takes 0 arguments — uuid7() — got 1: uuid7(1)",
        ),
        (
            "SELECT _gs_keccak256(a, b) AS h FROM t",
            "SQL transform 'x': function _gs_keccak256 takes 1 argument — _gs_keccak256(text (a `0x`-prefixed "
            "text is read as hex) or bytes) — got 2: _gs_keccak256(a, b)",
        ),
        (
            "SELECT _gs_hex_to_byte() AS h FROM t",
            "SQL transform 'x': function _gs_hex_to_byte takes 1 argument — _gs_hex_to_byte(hex text (optional "
            "`0x`, either case)) — got 0: _gs_hex_to_byte()",
        ),
    ],
)
def test_wrong_arity_is_refused_naming_the_function(sql: str, message: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram(sql, "SQL transform 'x'").rewritten
    assert str(caught.value) == message
