"""String functions with the original's (Flink-compatible) meaning, and its aliases of built-ins.

Most are Spark built-ins wrapped so that their edge cases give what the original gives: NULL where Spark's ANSI
mode would fail the query (``elt`` and ``split_index`` out of range, an unparseable URL or escape), a literal
delimiter where Spark's ``split`` takes a regular expression, a ``-`` sign where Spark's ``bin`` prints two's
complement. Positions are 1-based characters and results of position functions are ``bigint``, as in the
original.

The ``regexp_*`` functions other than ``regexp_like`` differ from Spark's in ways no template can bridge (an
invalid pattern, an unmatched group or a group out of range gives NULL instead of failing or ``''``; the
replacement text is literal; ``regexp_instr`` takes a start and an occurrence), so they are Arrow functions
using Python's ``re``. Its syntax is the original's (Rust ``regex``) for everything but two things: it also
knows look-around and back-references (the original rejects them: NULL), and named groups are written
``(?P<name>…)`` only. ``regexp_like`` (``regexp``, ``similar``) is Spark's, with Java's syntax.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import ClassVar

import pyarrow as pa
from sqlglot import exp

from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction, fill

FAMILY = "Strings"
NULL_NULL = "NULL → NULL"
POSITIVE_INT = 2147483647
"""Spark's position arguments are ``int``: a larger ``bigint`` is capped (no string is that long)."""


# --- literal delimiters in Spark's regular-expression functions ----------------------------------------------

_JAVA_SPECIAL = frozenset("\\^$.|?*+()[]{}")


def java_literal(text: str) -> str:
    """A Java regular expression matching exactly `text` (a single character stays one, which Java's
    ``String.split`` matches without compiling a pattern)."""
    return "".join("\\" + c if c in _JAVA_SPECIAL else c for c in text)


def quoted(node: exp.Expression) -> exp.Expression:
    """A Java regular expression matching `node`'s text literally: worked out now for a string literal, else
    ``\\Q…\\E`` around the text (each ``\\E`` in it closed, escaped and reopened, as Java's Pattern.quote)."""
    if isinstance(node, exp.Literal) and node.is_string:
        return exp.Literal.string(java_literal(node.this))
    inner = exp.Anonymous(
        this="replace", expressions=[node.copy(), exp.Literal.string("\\E"), exp.Literal.string("\\E\\\\E\\Q")]
    )
    return exp.Concat(expressions=[exp.Literal.string("\\Q"), inner, exp.Literal.string("\\E")], safe=False)


def _filled(template: str) -> Callable[[list[exp.Expression]], exp.Expression]:
    """A builder filling `template`, whose ``{n}`` (n = argument count) is the quoted second argument."""

    def build(args: list[exp.Expression]) -> exp.Expression:
        return fill(template, [*args, quoted(args[1])])

    return build


# --- instr: the original's search, occurrences may overlap, a negative start searches from the end ----------


def _nth(text: str, sub: str, start: str, occurrence: str) -> str:
    """SQL for the 1-based position of the `occurrence`-th `sub` in `text` at or after `start` (≥ 1), else 0:
    each later search starts one character after the previous match. Never more than length + 1 rounds."""
    if occurrence == "1":
        return f"locate({sub}, {text}, CAST(least({start}, {POSITIVE_INT}) AS INT))"
    return (
        f"aggregate(sequence(1, least({occurrence}, char_length({text}) + 1)), 0, (__acc, __i) -> "
        f"CASE WHEN __i = 1 THEN locate({sub}, {text}, CAST(least({start}, {POSITIVE_INT}) AS INT)) "
        f"WHEN __acc = 0 THEN 0 ELSE locate({sub}, {text}, __acc + 1) END)"
    )


def _instr(occurrence: str) -> str:
    t, s, st, oc = "{0}", "{1}", "{2}", occurrence
    length = f"char_length({t})"
    backward = _nth(f"reverse({t})", f"reverse({s})", f"least(-({st} + 1), {length}) + 1", oc)
    return (
        f"CAST(CASE WHEN {t} IS NULL OR {s} IS NULL OR {st} IS NULL OR {oc} IS NULL OR {oc} < 1 THEN NULL "
        f"WHEN {s} = '' THEN CASE WHEN {st} = 0 THEN 0 "
        f"WHEN {st} > 0 THEN least(least({st}, {length} + 1) + least({oc} - 1, {length} + 1), {length} + 1) "
        f"ELSE greatest(greatest({length} + 1 + greatest({st}, -{length} - 1), 1) - ({oc} - 1), 1) END "
        f"WHEN {t} = '' OR {st} = 0 THEN 0 "
        f"WHEN {st} > 0 THEN {_nth(t, s, st, oc)} "
        f"ELSE CASE WHEN ({backward}) = 0 THEN 0 ELSE {length} + 2 - ({backward}) - char_length({s}) END "
        f"END AS BIGINT)"
    )


# --- elt: the index-th value as text; any other index NULL -----------------------------------------------------


def _elt(args: list[exp.Expression]) -> exp.Expression:
    index, *values = args
    return exp.Case(
        this=index.copy(),
        ifs=[
            exp.If(this=exp.Literal.number(i), true=exp.cast(v.copy(), exp.DataType.build("STRING")))
            for i, v in enumerate(values, start=1)
        ],
    )


# --- split and string_to_array: a literal delimiter ------------------------------------------------------------

_EMPTY_LIST = "CAST(array() AS ARRAY<STRING>)"
_SPLIT = "CASE WHEN {1} = '' THEN IF({0} = '', " + _EMPTY_LIST + ", split({0}, '')) ELSE split({0}, {2}, -1) END"
_SPLIT_INDEX = (
    "CASE WHEN {2} < 0 OR {2} >= " + str(POSITIVE_INT) + " THEN NULL "
    "WHEN {1} = '' THEN IF({2} = 0 AND {0} != '', {0}, NULL) "
    "ELSE try_element_at(split({0}, {3}, -1), CAST({2} + 1 AS INT)) END"
)
_TO_ARRAY = (
    "CASE WHEN {0} IS NULL THEN NULL "
    "WHEN {1} IS NULL THEN IF({0} = '', " + _EMPTY_LIST + ", split({0}, '')) "
    "WHEN {1} = '' THEN array({0}) ELSE split({0}, {2}, -1) END"
)
_TO_ARRAY_NULLS = "transform(" + _TO_ARRAY.replace("{2}", "{3}") + ", __x -> IF(__x = {2}, NULL, __x))"


def _split_index(args: list[exp.Expression]) -> exp.Expression:
    return fill(_SPLIT_INDEX, [*args, quoted(args[1])])


def _string_to_array(args: list[exp.Expression]) -> exp.Expression:
    if len(args) == 2:
        return fill(_TO_ARRAY, [*args, quoted(args[1])])
    return fill(_TO_ARRAY_NULLS, [*args, quoted(args[1])])


# --- parse_url ---------------------------------------------------------------------------------------------------

_PARSE_URL_KEY = (
    "CASE WHEN upper({1}) = 'QUERY' AND {2} IS NOT NULL "
    "THEN try_url_decode(try_parse_url({0}, 'QUERY', {3})) ELSE try_parse_url({0}, upper({1})) END"
)


def _parse_url(args: list[exp.Expression]) -> exp.Expression:
    if len(args) == 2:
        return fill("try_parse_url({0}, upper({1}))", args)
    # Spark reads the key as a regular expression: quote it
    return fill(_PARSE_URL_KEY, [*args, quoted(args[2])])


_URL_DECODE = (
    # Java decodes bytes that are not UTF-8 as U+FFFD: one the text did not spell is such bytes
    "CASE WHEN contains(try_url_decode({0}), '\ufffd') AND NOT contains({0}, '\ufffd') "
    "AND NOT contains(upper({0}), '%EF%BF%BD') THEN NULL ELSE try_url_decode({0}) END"
)

SPARK_FUNCTIONS: list[SparkFunction] = [
    SparkFunction(
        "startswith",
        FAMILY,
        "text, prefix",
        "boolean: `text` begins with `prefix`",
        NULL_NULL,
        templates={2: "startswith({0}, {1})"},
        example="SELECT startswith(topic, '0xddf2')",
    ),
    SparkFunction(
        "endswith",
        FAMILY,
        "text, suffix",
        "boolean: `text` ends with `suffix`",
        NULL_NULL,
        templates={2: "endswith({0}, {1})"},
        example="SELECT endswith(name, '.eth')",
    ),
    SparkFunction(
        "lowercase",
        FAMILY,
        "text",
        "string: `lower(text)`",
        NULL_NULL,
        templates={1: "lower({0})"},
        example="SELECT lowercase('0xABC') -- '0xabc'",
    ),
    SparkFunction(
        "uppercase",
        FAMILY,
        "text",
        "string: `upper(text)`",
        NULL_NULL,
        templates={1: "upper({0})"},
        example="SELECT uppercase('abc') -- 'ABC'",
    ),
    SparkFunction(
        "charlength",
        FAMILY,
        "text",
        "int: the number of characters (`char_length`)",
        NULL_NULL,
        templates={1: "char_length({0})"},
        example="SELECT charLength('héllo') -- 5",
    ),
    SparkFunction(
        "hex",
        FAMILY,
        "integer (or string, binary)",
        "string: lower-case hex digits; a negative integer as its 64-bit two's complement",
        NULL_NULL,
        templates={1: "lower(hex({0}))"},
        example="SELECT hex(255) -- 'ff'",
    ),
    SparkFunction(
        "regexp_like",
        FAMILY,
        "text, pattern[, flags]",
        "boolean: `pattern` (a Java regular expression) matches somewhere in `text`; `flags` such as `'i'` "
        "are applied as `(?flags)`",
        "NULL → NULL; an invalid pattern fails the query",
        templates={2: "regexp_like({0}, {1})", 3: "regexp_like({0}, concat('(?', {2}, ')', {1}))"},
        aliases=("regexp", "similar"),
        example="SELECT * FROM logs WHERE REGEXP(data, '^0x')",
    ),
    SparkFunction(
        "locate",
        FAMILY,
        "substring, text[, start]",
        "bigint: 1-based position of the first `substring` at or after `start` (default 1); 0 when not found",
        "NULL → NULL; `start` below 1 → 0; an empty `substring` → `start` (at most length + 1)",
        templates={
            2: "CAST(locate({0}, {1}) AS BIGINT)",
            3: "CAST(CASE WHEN {0} IS NULL OR {1} IS NULL OR {2} IS NULL THEN NULL WHEN {2} < 1 THEN 0 "
            "WHEN {0} = '' THEN least({2}, char_length({1}) + 1) "
            f"ELSE locate({{0}}, {{1}}, CAST(least({{2}}, {POSITIVE_INT}) AS INT)) END AS BIGINT)",
        },
        example="SELECT locate('bar', 'foobarbar', 5) -- 7",
    ),
    SparkFunction(
        "instr",
        FAMILY,
        "text, substring[, start[, occurrence]]",
        "bigint: 1-based position of the `occurrence`-th (default 1; they may overlap) `substring`, searching "
        "from `start` (default 1); a negative `start` searches backward from that position from the end",
        "NULL → NULL; `occurrence` below 1 → NULL; `start` 0 or not found → 0",
        templates={2: "CAST(instr({0}, {1}) AS BIGINT)", 3: _instr("1"), 4: _instr("{3}")},
        example="SELECT instr('foobarbar', 'bar', 1, 2) -- 7",
    ),
    SparkFunction(
        "bin",
        FAMILY,
        "integer",
        "string: binary digits; a negative value as `-` and the digits of its magnitude",
        NULL_NULL + "; a fraction is truncated",
        templates={1: "conv(CAST(CAST({0} AS BIGINT) AS STRING), 10, -2)"},
        example="SELECT bin(42) -- '101010'",
    ),
    SparkFunction(
        "elt",
        FAMILY,
        "index, value1[, value2, …]",
        "string: the `index`-th value (1-based) as text",
        "a NULL or out-of-range `index` → NULL; a NULL value → NULL",
        build=_elt,
        arity=(2, None),
        example="SELECT elt(2, 'foo', 'bar', 'baz') -- 'bar'",
    ),
    SparkFunction(
        "parse_url",
        FAMILY,
        "url, part[, key]",
        "string: the `part` of `url` — `HOST`, `PATH`, `QUERY` (with `key`: that parameter's decoded value), "
        "`REF`, `PROTOCOL`, `FILE`, `AUTHORITY` or `USERINFO` (any case); as written (Java's URI: host case kept, "
        "no `/` added to an empty path)",
        "NULL → NULL (a NULL `key`: the whole query); an unparseable URL, unknown part or absent component → NULL",
        build=_parse_url,
        arity=(2, 3),
        example="SELECT parse_url('http://user:pass@example.com/path?query=1#frag', 'QUERY', 'query') -- '1'",
    ),
    SparkFunction(
        "split",
        FAMILY,
        "text, delimiter",
        "array<string>: `text` split at each occurrence of `delimiter` (literal text, not a pattern), empty "
        "tokens kept; an empty `delimiter` splits into characters",
        NULL_NULL,
        build=_filled(_SPLIT),
        arity=(2, 2),
        example="SELECT split(',123,,,123,', ',') -- ['', '123', '', '', '123', '']",
    ),
    SparkFunction(
        "split_index",
        FAMILY,
        "text, delimiter, index",
        "string: the `index`-th (0-based) token of `split(text, delimiter)`; an empty `delimiter` leaves "
        "`text` one token",
        "NULL → NULL; a negative or out-of-range `index` → NULL",
        build=_split_index,
        arity=(3, 3),
        example="SELECT split_index('a,b,c', ',', 1) -- 'b'",
    ),
    SparkFunction(
        "translate",
        FAMILY,
        "text, from, to",
        "string: each character of `from` in `text` replaced by the character at its position in `to`, or "
        "removed when `to` is shorter; a repeated `from` character keeps its first position",
        "NULL `text` → NULL; NULL `from` → `text`; NULL `to` removes every `from` character",
        templates={3: "CASE WHEN {1} IS NULL THEN {0} ELSE translate({0}, {1}, coalesce({2}, '')) END"},
        aliases=("translate3",),
        example="SELECT translate('cat', 'at', 'o') -- 'co'",
    ),
    SparkFunction(
        "unhex",
        FAMILY,
        "hex",
        "binary: the bytes the hex digits spell (either case; an odd count gets a leading 0)",
        NULL_NULL + "; a non-hex character → NULL",
        templates={1: "unhex({0})"},
        example="SELECT unhex('466C696E6B') -- bytes of 'Flink'",
    ),
    SparkFunction(
        "url_encode",
        FAMILY,
        "text",
        "string: form URL encoding of the UTF-8 bytes: space → `+`, all but `A-Z a-z 0-9 - _ . *` → `%XX`",
        NULL_NULL,
        templates={1: "url_encode({0})"},
        example="SELECT url_encode('a+b/c') -- 'a%2Bb%2Fc'",
    ),
    SparkFunction(
        "url_decode",
        FAMILY,
        "text",
        "string: `+` → space and `%XX` escapes decoded as UTF-8",
        NULL_NULL + "; a malformed `%` escape or bytes that are not UTF-8 → NULL",
        templates={1: _URL_DECODE},
        example="SELECT url_decode('foo+bar') -- 'foo bar'",
    ),
    SparkFunction(
        "string_to_array",
        FAMILY,
        "text, delimiter[, null_text]",
        "array<string>: `text` split at each `delimiter` (literal), empty tokens kept; an empty `delimiter` "
        "gives `[text]`, a NULL one the characters; tokens equal to `null_text` become NULL",
        "NULL `text` → NULL",
        build=_string_to_array,
        arity=(2, 3),
        aliases=("string_to_list",),
        example="SELECT string_to_array('a,b,,c', ',') -- ['a', 'b', '', 'c']",
    ),
]


# --- the regexp_* family (Arrow, Python `re`) ---------------------------------------------------------------------

REGEX_NULLS = "NULL → NULL; an invalid pattern → NULL"


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> re.Pattern[str] | None:
    """`pattern` compiled, or None when it is not a valid regular expression (the original gives NULL)."""
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def _rows(*arrays: pa.Array) -> zip:
    return zip(*(a.to_pylist() for a in arrays), strict=True)


def _strings(values: Sequence[str | None]) -> pa.Array:
    return pa.array(values, pa.string())


def _longs(values: Sequence[int | None]) -> pa.Array:
    return pa.array(values, pa.int64())


def _group(match: re.Match[str], index: int) -> str | None:
    return match.group(index) if index <= match.re.groups else None


def extract(text: str | None, pattern: str | None, group: int | None) -> str | None:
    if text is None or pattern is None or group is None or group < 0:
        return None
    regex = compiled(pattern)
    match = regex.search(text) if regex is not None else None
    return None if match is None else _group(match, group)


class RegexpExtract(ArrowFunction):
    name = "regexp_extract"
    spark_name = "streamling_regexp_extract"
    arguments: ClassVar = ("string", "string", "bigint")
    min_arguments = 2
    returns = "string"
    family = FAMILY
    doc_arguments = "text, pattern[, group]"
    doc_returns = "string: capture `group` of the first match; group 0 (the default) is the whole match"
    nulls = (
        "NULL `text`/`pattern` → NULL (a NULL `group`: 0); no match, an invalid pattern, a negative or "
        "out-of-range group, or a group that took no part in the match → NULL"
    )
    example = "SELECT regexp_extract('foothebar', 'foo(.*?)(bar)', 2) -- 'bar'"

    def __call__(self, text: pa.Array, pattern: pa.Array, group: pa.Array | None = None) -> pa.Array:
        if group is None:
            return _strings([extract(t, p, 0) for t, p in _rows(text, pattern)])
        return _strings([extract(t, p, 0 if g is None else g) for t, p, g in _rows(text, pattern, group)])


def extract_all(text: str | None, pattern: str | None, group: int) -> list[str | None] | None:
    if text is None or pattern is None or group < 0:
        return None
    regex = compiled(pattern)
    if regex is None or group > regex.groups:
        return None
    return [m.group(group) for m in regex.finditer(text)]


class RegexpExtractAll(ArrowFunction):
    name = "regexp_extract_all"
    spark_name = "streamling_regexp_extract_all"
    arguments: ClassVar = ("string", "string", "bigint")
    min_arguments = 2
    returns = pa.list_(pa.string())
    family = FAMILY
    doc_arguments = "text, pattern[, group]"
    doc_returns = (
        "array<string>: capture `group` (default 1; 0 is the whole match) of every match, NULL where the group "
        "took no part; `[]` when nothing matches"
    )
    nulls = (
        "NULL `text`/`pattern` → NULL (a NULL `group`: 1); an invalid pattern, a negative or out-of-range group → NULL"
    )
    example = "SELECT regexp_extract_all('100-200, 300-400', '(\\d+)-(\\d+)', 1) -- ['100', '300']"

    def __call__(self, text: pa.Array, pattern: pa.Array, group: pa.Array | None = None) -> pa.Array:
        if group is None:
            values = [extract_all(t, p, 1) for t, p in _rows(text, pattern)]
        else:
            values = [extract_all(t, p, 1 if g is None else g) for t, p, g in _rows(text, pattern, group)]
        return pa.array(values, pa.list_(pa.string()))


class RegexpSubstr(ArrowFunction):
    name = "regexp_substr"
    spark_name = "streamling_regexp_substr"
    arguments: ClassVar = ("string", "string")
    returns = "string"
    family = FAMILY
    doc_arguments = "text, pattern"
    doc_returns = "string: the first match"
    nulls = "NULL → NULL; no match or an invalid pattern → NULL"
    example = "SELECT regexp_substr('100-200, 300-400', '(\\d+)-(\\d+)$') -- '300-400'"

    def __call__(self, text: pa.Array, pattern: pa.Array) -> pa.Array:
        return _strings([extract(t, p, 0) for t, p in _rows(text, pattern)])


def count(text: str | None, pattern: str | None) -> int | None:
    if text is None or pattern is None:
        return None
    regex = compiled(pattern)
    return None if regex is None else len(regex.findall(text))


class RegexpCount(ArrowFunction):
    name = "regexp_count"
    spark_name = "streamling_regexp_count"
    arguments: ClassVar = ("string", "string")
    returns = "bigint"
    family = FAMILY
    doc_arguments = "text, pattern"
    doc_returns = "bigint: the number of non-overlapping matches"
    nulls = REGEX_NULLS
    example = "SELECT regexp_count('a.b.c.d', '\\.') -- 3"

    def __call__(self, text: pa.Array, pattern: pa.Array) -> pa.Array:
        return _longs([count(t, p) for t, p in _rows(text, pattern)])


def position(text: str | None, pattern: str | None, start: int | None, occurrence: int | None) -> int | None:
    if text is None or pattern is None:
        return None
    if pattern == "":
        return 0
    if start is None or occurrence is None:
        return None
    if start < 1:
        raise StreamlingError.user(f"SQL function regexp_instr: start must be 1 or more, got {start!r}")
    if occurrence < 1:
        raise StreamlingError.user(f"SQL function regexp_instr: occurrence must be 1 or more, got {occurrence!r}")
    if start > len(text):
        return 0
    regex = compiled(pattern)
    if regex is None:
        return None
    # the original searches the text from `start` on as a string of its own (`^` matches there)
    for seen, match in enumerate(regex.finditer(text[start - 1 :]), start=1):
        if seen == occurrence:
            return start + match.start()
    return 0


class RegexpInstr(ArrowFunction):
    name = "regexp_instr"
    spark_name = "streamling_regexp_instr"
    arguments: ClassVar = ("string", "string", "bigint", "bigint")
    min_arguments = 2
    returns = "bigint"
    family = FAMILY
    doc_arguments = "text, pattern[, start[, occurrence]]"
    doc_returns = (
        "bigint: 1-based position of the `occurrence`-th match (default 1), searching from `start` (default 1); "
        "0 when there is none (or `pattern` is empty)"
    )
    nulls = REGEX_NULLS + "; `start` or `occurrence` below 1 fails the epoch naming the value"
    example = "SELECT regexp_instr('hello world! Hello everyone!', 'Hello') -- 14"

    def __call__(self, text: pa.Array, pattern: pa.Array, *more: pa.Array) -> pa.Array:
        if not more:
            return _longs([position(t, p, 1, 1) for t, p in _rows(text, pattern)])
        if len(more) == 1:
            return _longs([position(t, p, s, 1) for t, p, s in _rows(text, pattern, more[0])])
        return _longs([position(t, p, s, o) for t, p, s, o in _rows(text, pattern, *more)])


def replace(text: str | None, pattern: str | None, replacement: str | None) -> str | None:
    if text is None or pattern is None:
        return None
    regex = compiled(pattern)
    if regex is None or replacement is None:
        return None
    return regex.sub(replacement.replace("\\", "\\\\"), text)  # every backslash doubled: taken literally


class RegexpReplace(ArrowFunction):
    name = "regexp_replace"
    spark_name = "streamling_regexp_replace"
    arguments: ClassVar = ("string", "string", "string")
    returns = "string"
    family = FAMILY
    doc_arguments = "text, pattern, replacement"
    doc_returns = "string: every match replaced by `replacement`, taken literally (`$1`, `\\1` are not groups)"
    nulls = REGEX_NULLS
    example = "SELECT regexp_replace('hello world! Hello everyone!', 'Hello', 'Hi') -- 'hello world! Hi everyone!'"

    def __call__(self, text: pa.Array, pattern: pa.Array, replacement: pa.Array) -> pa.Array:
        return _strings([replace(t, p, r) for t, p, r in _rows(text, pattern, replacement)])


ARROW_FUNCTIONS: list[type[ArrowFunction]] = [
    RegexpExtract,
    RegexpExtractAll,
    RegexpSubstr,
    RegexpCount,
    RegexpInstr,
    RegexpReplace,
]
