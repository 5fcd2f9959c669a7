"""U256/I256 conversion rules (the SQL functions' per-value logic)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from streamling.errors import StreamlingError
from streamling.sql.functions.wide_integers import I256_MIN, U256_MAX, to_int
from streamling.sql.rewrite import SqlProgram


@pytest.mark.parametrize(
    ("value", "signed", "expected"),
    [
        ("115792089237316195423570985008687907853269984665640564039457584007913129639935", False, U256_MAX),
        ("0x" + "ff" * 32, False, U256_MAX),
        (b"\xff" * 32, False, U256_MAX),
        (b"\xff" * 32, True, -1),
        (b"\x01\x00", True, 256),
        (Decimal("12345678901234567890123456789012345678"), False, 12345678901234567890123456789012345678),
        (9_007_199_254_740_993, False, 9_007_199_254_740_993),
        ("-" + str(2**255), True, I256_MIN),
        (" 1_000 ", False, 1000),
        ("1e3", False, 1000),
    ],
)
def test_accepted_inputs(value, signed: bool, expected: int) -> None:
    assert to_int(value, signed) == expected


@pytest.mark.parametrize(
    ("value", "signed", "message"),
    [
        ("-1", False, "SQL function to_u256: '-1' is out of range for u256 (0 to 2**256-1)"),
        (str(2**255), True, "SQL function to_i256: '" + str(2**255) + "' is out of range for i256"),
        ("1.5", False, "SQL function to_u256: '1.5' is not an integer"),
        ("abc", True, "SQL function to_i256: 'abc' is not an integer"),
        ("NaN", False, "SQL function to_u256: 'NaN' is not an integer"),
        (float("inf"), True, "SQL function to_i256: inf is not an integer"),
        (True, False, "SQL function to_u256: True is not an integer"),
    ],
)
def test_rejected_inputs_name_the_value(value, signed: bool, message: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        to_int(value, signed)
    expected = message.replace("2**256-1", str(U256_MAX))
    assert str(caught.value).startswith(expected)


def test_aliased_calls_mark_output_columns() -> None:
    program = SqlProgram("SELECT id, U256(raw) AS wei, i256(delta) AS change, U256(raw) FROM t", "sql")
    assert program.called == ["to_i256", "to_u256"]
    program.render({"t": "v"})
    assert program.output_types == {"id": None, "wei": "u256", "change": "i256"}
    assert SqlProgram("SELECT id FROM t", "sql").called == []
