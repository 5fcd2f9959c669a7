"""String functions: the original's documented examples, NULLs, and NULL where Spark would fail or differ.

The plain cases are evaluated together in one query (one Spark job) and checked one by one."""

from __future__ import annotations

from typing import Any

import pytest

from streamling.errors import StreamlingError
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query, values

URL = "'http://user:pass@example.com:8080/path?query=1&k=a%20b+c#frag'"
TEXT = "'hello world! Hello everyone!'"

CASES: list[tuple[str, Any]] = [
    # aliases of built-ins
    ("startswith('abc', 'ab')", True),
    ("StartsWith(CAST(NULL AS STRING), 'a')", None),
    ("endswith('abc', 'bc')", True),
    ("ENDSWITH('abc', 'b')", False),
    ("lowercase('0xABC')", "0xabc"),
    ("uppercase('abc')", "ABC"),
    ("UpperCase(CAST(NULL AS STRING))", None),
    ("charlength('héllo')", 5),
    ("charLength('😀a')", 2),
    ("CHARLENGTH(CAST(NULL AS STRING))", None),
    ("hex(255)", "ff"),
    ("HEX(-1)", "ffffffffffffffff"),
    ("hex(CAST(NULL AS BIGINT))", None),
    ("regexp_like('abc', '^a')", True),
    ("regexp('abc', 'B')", False),
    ("Regexp('abc', 'B', 'i')", True),
    ("similar('abc', 'c$')", True),
    ("SIMILAR(CAST(NULL AS STRING), 'a')", None),
    # locate(substring, text[, start])
    ("locate('bar', 'foobarbar', 5)", 7),
    ("LOCATE('bar', 'foobarbar')", 4),
    ("locate('bar', 'foobarbar', 0)", 0),
    ("locate('bar', 'foobarbar', -3)", 0),
    ("locate('', 'abc', 2)", 2),
    ("locate('', 'abc', 9)", 4),
    ("locate('x', 'abc', 3000000000)", 0),
    ("locate('bar', 'foobarbar', CAST(NULL AS INT))", None),
    ("locate(CAST(NULL AS STRING), 'abc')", None),
    ("locate('', CAST(NULL AS STRING), 1)", None),
    # instr(text, substring[, start[, occurrence]])
    ("instr('foobarbar', 'bar', 1, 2)", 7),
    ("INSTR('foobarbar', 'bar')", 4),
    ("instr('foobarbar', 'bar', 5)", 7),
    ("instr('foobarbar', 'bar', -1)", 7),
    ("instr('foobarbar', 'bar', -1, 2)", 4),
    ("instr('foobarbar', 'bar', -4)", 4),
    ("instr('foobarbar', 'bar', -5)", 0),
    ("instr('foobarbar', 'bar', -99)", 0),
    ("instr('aaa', 'aa', 1, 2)", 2),
    ("instr('foobarbar', 'bar', 1, 3)", 0),
    ("instr('foobarbar', 'bar', 1, 99999999999)", 0),
    ("instr('foobarbar', 'bar', 0)", 0),
    ("instr('foobarbar', 'bar', 1, 0)", None),
    ("instr('', 'a', 1)", 0),
    ("instr('abc', '', 2, 2)", 3),
    ("instr('abc', '', -1)", 3),
    ("instr('abc', '', -1, 5)", 1),
    ("instr('a😀bar😀bar', 'bar', -1)", 7),
    ("instr(CAST(NULL AS STRING), 'a')", None),
    ("instr('abc', 'a', CAST(NULL AS INT))", None),
    # bin
    ("bin(42)", "101010"),
    ("BIN(-5)", "-101"),
    ("bin(0)", "0"),
    ("bin(-9223372036854775808)", "-1" + "0" * 63),
    ("bin(CAST(NULL AS BIGINT))", None),
    # elt(index, value, ...)
    ("elt(2, 'foo', 'bar', 'baz')", "bar"),
    ("elt(4, 'foo', 'bar', 'baz')", None),
    ("elt(0, 'foo')", None),
    ("elt(-1, 'foo')", None),
    ("elt(CAST(NULL AS INT), 'foo')", None),
    ("ELT(1, 42)", "42"),
    ("elt(2, 'a', CAST(NULL AS STRING))", None),
    ("elt(10, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j')", "j"),
    # parse_url(url, part[, key])
    ("parse_url('http://user:pass@example.com/path?query=1#frag', 'QUERY', 'query')", "1"),
    (f"parse_url({URL}, 'host')", "example.com"),
    (f"PARSE_URL({URL}, 'Path')", "/path"),
    (f"parse_url({URL}, 'QUERY')", "query=1&k=a%20b+c"),
    (f"parse_url({URL}, 'QUERY', 'k')", "a b c"),
    (f"parse_url({URL}, 'QUERY', 'missing')", None),
    (f"parse_url({URL}, 'QUERY', CAST(NULL AS STRING))", "query=1&k=a%20b+c"),
    (f"parse_url({URL}, 'HOST', 'k')", "example.com"),
    ("parse_url('http://x.com/?axb=w&a.b=v', 'QUERY', 'a.b')", "v"),
    (f"parse_url({URL}, 'REF')", "frag"),
    (f"parse_url({URL}, 'PROTOCOL')", "http"),
    (f"parse_url({URL}, 'FILE')", "/path?query=1&k=a%20b+c"),
    (f"parse_url({URL}, 'AUTHORITY')", "user:pass@example.com:8080"),
    (f"parse_url({URL}, 'USERINFO')", "user:pass"),
    ("parse_url('http://example.com/', 'USERINFO')", None),
    (f"parse_url({URL}, 'BOGUS')", None),
    ("parse_url('not a url', 'HOST')", None),
    ("parse_url(CAST(NULL AS STRING), 'HOST')", None),
    # split(text, delimiter): a literal delimiter
    ("split(',123,,,123,', ',')", ["", "123", "", "", "123", ""]),
    ("SPLIT('a.b', '.')", ["a", "b"]),
    ("split('a||b|c', '||')", ["a", "b|c"]),
    ("split('a\\Eb', '\\E')", ["a", "b"]),
    ("split('abc', '')", ["a", "b", "c"]),
    ("split('', '')", []),
    ("split('', ',')", [""]),
    ("split(CAST(NULL AS STRING), ',')", None),
    ("split('a,b', CAST(NULL AS STRING))", None),
    # split_index(text, delimiter, index): 0-based
    ("split_index('a,b,c', ',', 1)", "b"),
    ("SPLIT_INDEX('a.b.c', '.', 2)", "c"),
    ("split_index('a,b,c', ',', 3)", None),
    ("split_index('a,b,c', ',', -1)", None),
    ("split_index('a,b', ',', 3000000000)", None),
    ("split_index('a,b,c', '', 0)", "a,b,c"),
    ("split_index('a,b,c', '', 1)", None),
    ("split_index('', '', 0)", None),
    ("split_index('', ',', 0)", ""),
    ("split_index(CAST(NULL AS STRING), ',', 0)", None),
    ("split_index('a', ',', CAST(NULL AS INT))", None),
    # translate / translate3
    ("translate('cat', 'at', 'o')", "co"),
    ("TRANSLATE3('cat', 'at', 'o')", "co"),
    ("translate('cat', CAST(NULL AS STRING), 'o')", "cat"),
    ("translate('cat', 'at', CAST(NULL AS STRING))", "c"),
    ("translate('abca', 'aa', 'xy')", "xbcx"),
    ("translate('a😀b', '😀', 'x')", "axb"),
    ("translate(CAST(NULL AS STRING), 'a', 'b')", None),
    # unhex, url_encode, url_decode
    ("unhex('466C696E6B')", b"Flink"),
    ("UNHEX('F')", b"\x0f"),
    ("unhex('abc')", b"\n\xbc"),
    ("unhex('zz')", None),
    ("unhex('')", b""),
    ("unhex(CAST(NULL AS STRING))", None),
    ("url_encode('a+b/c')", "a%2Bb%2Fc"),
    ("URL_ENCODE('a b*~é')", "a+b*%7E%C3%A9"),
    ("url_encode(CAST(NULL AS STRING))", None),
    ("url_decode('foo+bar')", "foo bar"),
    ("Url_Decode('a%2Fb%C3%A9')", "a/bé"),
    ("url_decode('%zz')", None),
    ("url_decode('a%4')", None),
    ("url_decode('a%FFb')", None),
    ("url_decode('%EF%BF%BD')", "\ufffd"),
    ("url_decode('\ufffd%41')", "\ufffdA"),
    ("url_decode(CAST(NULL AS STRING))", None),
    # string_to_array(text, delimiter[, null_text])
    ("string_to_array('a,b,,c', ',')", ["a", "b", "", "c"]),
    ("STRING_TO_ARRAY('abc', CAST(NULL AS STRING))", ["a", "b", "c"]),
    ("string_to_array('abc', '')", ["abc"]),
    ("string_to_array('', ',')", [""]),
    ("string_to_array('', CAST(NULL AS STRING))", []),
    ("string_to_array('a,-,b', ',', '-')", ["a", None, "b"]),
    ("string_to_array('a,-', ',', CAST(NULL AS STRING))", ["a", "-"]),
    ("string_to_list('a.b', '.')", ["a", "b"]),
    ("string_to_array(CAST(NULL AS STRING), ',')", None),
    # regexp_extract(text, pattern[, group]): group 0 by default, NULL instead of errors
    ("regexp_extract('foothebar', 'foo(.*?)(bar)', 2)", "bar"),
    ("REGEXP_EXTRACT('foothebar', 'foo(.*?)(bar)')", "foothebar"),
    ("regexp_extract('foothebar', 'foo(.*?)(bar)', 3)", None),
    ("regexp_extract('foothebar', 'foo(.*?)(bar)', -1)", None),
    ("regexp_extract('abc', '(', 1)", None),
    ("regexp_extract('abc', 'x')", None),
    ("regexp_extract('abc', '(x)?b', 1)", None),
    ("regexp_extract('abc', 'b', CAST(NULL AS INT))", "b"),
    (r"regexp_extract('a12', '\d+')", "12"),
    ("regexp_extract(CAST(NULL AS STRING), 'a')", None),
    # regexp_extract_all(text, pattern[, group]): group 1 by default
    (r"regexp_extract_all('100-200, 300-400', '(\d+)-(\d+)', 1)", ["100", "300"]),
    (r"Regexp_Extract_All('100-200, 300-400', '(\d+)-(\d+)')", ["100", "300"]),
    (r"regexp_extract_all('100-200, 300-400', '(\d+)-(\d+)', 0)", ["100-200", "300-400"]),
    (r"regexp_extract_all('100-200, 300-400', '(\d+)-(\d+)', 3)", None),
    (r"regexp_extract_all('100-200', '(\d+)', -1)", None),
    ("regexp_extract_all('abab', 'b')", None),
    ("regexp_extract_all('abab', 'b', 0)", ["b", "b"]),
    ("regexp_extract_all('abab', '(x)')", []),
    ("regexp_extract_all('ab', '(x)?b')", [None]),
    ("regexp_extract_all('ab', '(')", None),
    # regexp_substr(text, pattern)
    (r"regexp_substr('100-200, 300-400', '(\d+)-(\d+)$')", "300-400"),
    ("REGEXP_SUBSTR('abc', 'x')", None),
    ("regexp_substr('abc', '[')", None),
    # regexp_count(text, pattern)
    (r"regexp_count('a.b.c.d', '\.')", 3),
    ("REGEXP_COUNT('abc', 'x')", 0),
    ("regexp_count('abc', '(')", None),
    ("regexp_count(CAST(NULL AS STRING), 'a')", None),
    # regexp_instr(text, pattern[, start[, occurrence]])
    (f"regexp_instr({TEXT}, 'Hello')", 14),
    (f"REGEXP_INSTR({TEXT}, 'o', 6)", 8),
    (f"regexp_instr({TEXT}, 'o', 1, 2)", 8),
    (f"regexp_instr({TEXT}, 'zzz')", 0),
    ("regexp_instr('abc', '^b', 2)", 2),
    ("regexp_instr('abc', 'a', 9)", 0),
    ("regexp_instr('abc', '')", 0),
    ("regexp_instr('abc', '(')", None),
    ("regexp_instr('abc', 'b', CAST(NULL AS INT))", None),
    # regexp_replace(text, pattern, replacement): the replacement is literal
    (f"regexp_replace({TEXT}, 'Hello', 'Hi')", "hello world! Hi everyone!"),
    (r"REGEXP_REPLACE('abc', '(b)', '$1\1')", r"a$1\1c"),
    ("regexp_replace('abc', '(', 'x')", None),
    ("regexp_replace('abc', 'b', CAST(NULL AS STRING))", None),
    ("regexp_replace(CAST(NULL AS STRING), 'b', 'x')", None),
]


@pytest.fixture(scope="module")
def results(spark) -> list[Any]:
    select = ", ".join(f"{expression} AS c{i}" for i, (expression, _) in enumerate(CASES))
    (row,) = query(spark, f"SELECT {select} FROM t").collect()
    return list(row)


@pytest.mark.parametrize(("index", "expression", "expected"), [(i, e, x) for i, (e, x) in enumerate(CASES)])
def test_string_function(results: list[Any], index: int, expression: str, expected: Any) -> None:
    got = results[index]
    assert (bytes(got) if isinstance(got, bytearray) else got) == expected, expression


def test_delimiters_and_patterns_from_columns(spark) -> None:
    rows = [("x.y\\Ez", "\\E"), ("x.y\\Ez", "."), ("a1b22", "\\d+"), ("a1b22", "(")]
    source = frame(spark, rows, "s string, d string")
    assert values(spark, "split(s, d)", source) == [["x.y", "z"], ["x", "y\\Ez"], ["a1b22"], ["a1b22"]]
    assert values(spark, "split_index(s, d, 1)", source) == ["z", "y\\Ez", None, None]
    # as patterns: `\\E` is not valid (NULL), `.` is any character
    assert values(spark, "regexp_count(s, d)", source) == [None, 6, 2, None]
    assert values(spark, "regexp_extract(s, d)", source) == [None, "x", "1", None]


def _instr_reference(text: str, sub: str, start: int, occurrence: int) -> int | None:
    """The original's instr, from its description: searches may overlap; a negative start searches the
    reversed text for the reversed substring; an empty substring counts positions."""
    if occurrence < 1:
        return None
    if sub == "":
        end = len(text) + 1
        if start == 0:
            return 0
        if start > 0:
            return min(min(start, end) + occurrence - 1, end)
        return max(max(end + start, 1) - (occurrence - 1), 1)
    if text == "" or start == 0:
        return 0
    forward = start > 0
    haystack, needle = (text, sub) if forward else (text[::-1], sub[::-1])
    at = (start if forward else -start) - 1
    for _ in range(occurrence):
        at = haystack.find(needle, at) if at <= len(haystack) else -1
        if at < 0:
            return 0
        at += 1
    return at if forward else len(text) + 2 - at - len(sub)


def test_instr_and_locate_agree_with_the_originals_search(spark) -> None:
    import random

    chance = random.Random(18)
    rows = [
        (
            "".join(chance.choice("ab😀") for _ in range(chance.randint(0, 7))),
            "".join(chance.choice("ab😀") for _ in range(chance.randint(0, 2))),
            chance.randint(-9, 9),
            chance.randint(0, 4),
        )
        for _ in range(300)
    ]
    source = frame(spark, rows, "t string, s string, st bigint, oc bigint")
    got = values(spark, "struct(instr(t, s, st, oc), instr(t, s, st), locate(s, t, st))", source)
    for (text, sub, start, occurrence), (four, three, located) in zip(rows, got, strict=True):
        case = (text, sub, start, occurrence)
        assert four == _instr_reference(text, sub, start, occurrence), case
        assert three == _instr_reference(text, sub, start, 1), case
        assert located == (0 if start < 1 else _instr_reference(text, sub, start, 1)), case


def test_regexp_instr_start_below_one_fails_naming_the_value(spark) -> None:
    with pytest.raises(Exception, match="SQL function regexp_instr: start must be 1 or more, got 0"):
        values(spark, "regexp_instr('abc', 'b', 0)")
    with pytest.raises(Exception, match="SQL function regexp_instr: occurrence must be 1 or more, got -1"):
        values(spark, "regexp_instr('abc', 'b', 1, -1)")


def test_a_wrong_number_of_arguments_is_refused_naming_the_signature() -> None:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram("SELECT split_index(memo, ',') AS w FROM t", "SQL transform 'x'").rewritten
    assert str(caught.value) == (
        "SQL transform 'x': function split_index takes 3 arguments — split_index(text, delimiter, index) — "
        "got 2: split_index(memo, ',')"
    )
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram("SELECT Regexp_Instr(memo) AS w FROM t", "SQL transform 'x'").rewritten
    assert str(caught.value) == (
        "SQL transform 'x': function regexp_instr takes 2 to 4 arguments — "
        "regexp_instr(text, pattern[, start[, occurrence]]) — got 1: Regexp_Instr(memo)"
    )


DATA = [("data-1",), ("Data-2",), ("metadata",), (None,)]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("REGEXP(data, '^data')", ["data-1"]),
        ("regexp(data, '^data', 'i')", ["data-1", "Data-2"]),
        ("similar(data, 'data')", ["data-1", "metadata"]),
        ("NOT REGEXP(data, '^data')", ["Data-2", "metadata"]),
        ("data ~ '^data'", ["data-1"]),
        ("data ~* '^data'", ["data-1", "Data-2"]),
        ("data !~ '^data'", ["Data-2", "metadata"]),
        ("data !~* '^data'", ["metadata"]),
        ("data SIMILAR TO '^data'", ["data-1"]),
        ("data NOT SIMILAR TO 'data'", ["Data-2"]),
    ],
)
def test_regular_expression_filters(spark, where: str, expected: list[str]) -> None:
    source = frame(spark, DATA, "data string")
    assert [r.data for r in query(spark, f"SELECT * FROM t WHERE {where}", source).collect()] == expected
