"""JSON functions with the original's (Flink-compatible) meaning, as vectorised Arrow functions.

Spark's own JSON and VARIANT functions differ from the original in the details its users see: Spark writes
``1e3`` as ``1000.0`` (the original ``1000``) and ``1.0`` as ``1`` (the original ``1.0``), rejects duplicate
keys, and reads paths its own way. So every function here parses with orjson, which reads JSON exactly as
the original's parsers do (64-bit integers exact, larger ones as doubles, ``1e400`` and lone surrogates
rejected, a repeated key keeping its last value), and writes text the way the original does:

- re-serialised JSON (``json``, ``parse_json``, constructors, ``json_string``) is serde_json's: compact,
  object keys sorted, doubles as their shortest text with ``e+``/``e-`` exponents past 1e16 or under 1e-5;
- the text ``json_query`` returns keeps the document's key order and writes exponents without ``+``;
- ``json_value`` writes an integral double without a fraction (``1.0`` → ``1``) and never uses exponents.

Mode arguments (``'ERROR'``, ``'WITH CONDITIONAL ARRAY'``) and literal paths are checked at ``--validate``.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.types as pt
from sqlglot import exp

from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction

FAMILY = "JSON"
PATHS = "paths: `$`, `.key`, `[n]`, `['key']`; an invalid path is an error"
NULL_NULL = "NULL JSON or path → NULL"

# --- text the way the original writes it ------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TO_ESCAPE = re.compile('["\\\\/\b\f\n\r\t]|[^\x00-\x7f]')


def _escape(match: re.Match[str]) -> str:
    # the original writes a non-ASCII character as \u and its code point in (at least) 4 hex digits
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def quote(text: str) -> str:
    """``json_quote``: `"`, `\\`, `/` and \\b \\f \\n \\r \\t escaped, non-ASCII as ``\\uXXXX``."""
    return '"' + _TO_ESCAPE.sub(_escape, text) + '"'


_BARE_EXPONENT = re.compile(rb"[:,\[][-0-9.]+e[0-9]")
"""A number orjson wrote with a positive exponent (``1e16``), or a string that looks like one."""
_STRING_OR_EXPONENT = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<=[0-9])e(?=[0-9])')


def _plus_exponent(match: re.Match[bytes]) -> bytes:
    return match.group(0) if match.group(0).startswith(b'"') else b"e+"


def serde_text(value: Any) -> str:
    """`value` as serde_json writes it: compact, keys sorted, doubles with ``e+16`` style exponents."""
    out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if type(value) is float:
        out = out.replace(b"e", b"e+").replace(b"e+-", b"e-")
    elif _BARE_EXPONENT.search(out):
        out = _STRING_OR_EXPONENT.sub(_plus_exponent, out)
    return out.decode()


def document_text(value: Any) -> str:
    """An object or array as ``json_query`` returns it: compact, in the document's key order."""
    return orjson.dumps(value).decode()


def number_text(value: int | float) -> str:
    """A number as ``json_value`` returns it: an integral double without fraction, never an exponent."""
    if type(value) is int:
        return str(value)
    if value.is_integer():
        return str(int(value)) if value or math.copysign(1, value) > 0 else "-0"
    return format(Decimal(repr(value)), "f")


def _scalar_text(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    return number_text(value)


def _scalar_json(value: Any) -> str:
    """A scalar inside a ``json_query`` array wrapper: strings as ``json_quote`` writes them."""
    return quote(value) if isinstance(value, str) else _scalar_text(value)


_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
"""What Rust's ``str::trim`` removes (Unicode White_Space; Python's ``strip()`` also removes \\x1c-\\x1f)."""


def _shown(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


# --- paths ------------------------------------------------------------------------------------------------

Path = tuple[str | int, ...]


def parse_path(path: str) -> Path:
    """``$`` then ``.key``, ``['key']``/``["key"]`` or ``[n]`` steps; ValueError says what is wrong."""
    if not path.startswith("$"):
        raise ValueError("a path starts with '$'")
    steps: list[str | int] = []
    at, end = 1, len(path)
    while at < end:
        char = path[at]
        if char == ".":
            stop = at + 1
            while stop < end and path[stop] not in ".[":
                stop += 1
            if stop == at + 1:
                raise ValueError(f"empty key at position {at + 1}")
            steps.append(path[at + 1 : stop])
            at = stop
        elif char == "[":
            close = path.find("]", at)
            inner = path[at + 1 : close] if close > 0 else path[at + 1 :]
            if inner[:1] in ("'", '"'):
                closing = path.find(inner[0], at + 2)
                if closing < 0:
                    raise ValueError(f"unterminated quoted key at position {at + 1}")
                if path[closing + 1 : closing + 2] != "]":
                    raise ValueError(f"']' expected at position {closing + 2}")
                steps.append(path[at + 2 : closing])
                at = closing + 2
            else:
                if close < 0:
                    raise ValueError(f"']' expected after position {at + 1}")
                if not inner.isascii() or not inner.isdigit():
                    raise ValueError(f"array index {inner!r} is not a number")
                steps.append(int(inner))
                at = close + 1
        else:
            raise ValueError(f"unexpected {char!r} at position {at + 1}")
    return tuple(steps)


_MISSING = object()
_INVALID = object()


def _find(text: str, steps: Path) -> Any:
    """The value at `steps` (None for JSON null), `_MISSING`, or `_INVALID` when `text` is not JSON."""
    try:
        node = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _INVALID
    for step in steps:
        if type(step) is str:
            if type(node) is not dict or step not in node:
                return _MISSING
            node = node[step]
        elif type(node) is list and step < len(node):
            node = node[step]
        else:
            return _MISSING
    return node


class _Paths:
    """Parses each distinct path of a batch once; a bad one stops the epoch naming the function."""

    def __init__(self, function: str) -> None:
        self.function = function
        self.parsed: dict[str, Path] = {}

    def __call__(self, path: str) -> Path:
        steps = self.parsed.get(path)
        if steps is None:
            try:
                steps = self.parsed[path] = parse_path(path)
            except ValueError as exc:
                raise StreamlingError.user(f"SQL function {self.function}: invalid JSON path {path!r}: {exc}") from None
        return steps


def _rows(json: pa.Array, paths: pa.Array, function: str) -> list[tuple[str, Path] | None]:
    parse = _Paths(function)
    return [
        None if text is None or path is None else (text, parse(path))
        for text, path in zip(json.to_pylist(), paths.to_pylist(), strict=True)
    ]


# --- literal mode arguments -------------------------------------------------------------------------------

_ERROR = "ERROR"


def _squeezed(word: str) -> str:
    return " ".join(word.split()).upper()


def _unspaced(word: str) -> str:
    return "".join(word.split()).upper()


class Mode:
    """A literal argument naming one of a few words (``'ERROR'``), spelt in any case."""

    def __init__(
        self, label: str, words: Mapping[str, Any], spell: Callable[[str], str] = _squeezed, null: bool = False
    ) -> None:
        self.label = label
        self.words = dict(words)
        self.spell = spell
        self.null = null
        """Whether a NULL literal is allowed (it means the default)."""

    def allowed(self) -> str:
        return ", ".join(dict.fromkeys(f"'{w}'" for w in self.words))

    def problem(self, node: exp.Expression) -> str | None:
        literal = _literal(node)
        if literal is None or (literal == (None,) and not self.null):
            return f"{self.label} must be a string literal: one of {self.allowed()}"
        word = literal[0]
        if word is not None and self.spell(word) not in self.words:
            return f"{self.label} must be one of {self.allowed()}, not {word!r}"
        return None

    def read(self, function: str, values: pa.Array, default: Any = None) -> Any:
        """The mode a batch's (constant) argument names."""
        word = values[0].as_py() if len(values) else None
        if word is None:
            return default
        try:
            return self.words[self.spell(word)]
        except KeyError:
            raise StreamlingError.user(
                f"SQL function {function}: {self.label} must be one of {self.allowed()}, not {word!r}"
            ) from None


def _literal(node: exp.Expression) -> tuple[str | None] | None:
    """``(text,)`` for a string literal, ``(None,)`` for NULL, None for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return (None,)
    if isinstance(node, exp.Literal) and node.is_string:
        return (node.this,)
    return None


def _path_problem(args: Sequence[exp.Expression]) -> str | None:
    literal = _literal(args[1]) if len(args) > 1 else None
    if literal is None or literal[0] is None:
        return None
    try:
        parse_path(literal[0])
    except ValueError as exc:
        return f"invalid JSON path {literal[0]!r}: {exc} ({PATHS})"
    return None


def _first(values: pa.Array) -> Any:
    return values[0].as_py() if len(values) else None


def _strings(values: list[str | None]) -> pa.Array:
    return pa.array(values, pa.string())


# --- parsing and checking ---------------------------------------------------------------------------------


class JsonQuote(ArrowFunction):
    name = "json_quote"
    arguments: ClassVar = ("string",)
    returns = "string"
    family = FAMILY
    doc_arguments = "text"
    doc_returns = (
        'string: `text` as a JSON string literal (`"` `\\` `/` \\b \\f \\n \\r \\t escaped, non-ASCII as `\\uXXXX`)'
    )
    nulls = "NULL → NULL"
    example = "SELECT json_quote('a/é') -- '\"a\\/\\u00e9\"'"

    def __call__(self, text: pa.Array) -> pa.Array:
        return _strings([None if t is None else quote(t) for t in text.to_pylist()])


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        if isinstance(value, str):
            return value
    return text


class JsonUnquote(ArrowFunction):
    name = "json_unquote"
    arguments: ClassVar = ("string",)
    returns = "string"
    family = FAMILY
    doc_arguments = "text"
    doc_returns = "string: a double-quoted JSON string literal unescaped; any other text unchanged"
    nulls = "NULL → NULL; a malformed literal is returned unchanged"
    example = "SELECT json_unquote('\"a\\/b\"') -- 'a/b'"

    def __call__(self, text: pa.Array) -> pa.Array:
        return _strings([None if t is None else unquote(t) for t in text.to_pylist()])


def _canonical(function: str, text: str, strict: bool) -> str | None:
    trimmed = text.strip(_RUST_WHITESPACE)
    if not trimmed:
        return None
    try:
        return serde_text(orjson.loads(trimmed))
    except orjson.JSONDecodeError as exc:
        if not strict:
            return None
        raise StreamlingError.user(f"SQL function {function}: invalid JSON {_shown(text)}: {exc}") from None


class Json(ArrowFunction):
    name = "json"
    arguments: ClassVar = ("string",)
    returns = "string"
    family = FAMILY
    doc_arguments = "text"
    doc_returns = "string: the JSON re-serialised compactly (object keys sorted)"
    nulls = "NULL or blank → NULL; invalid JSON → the epoch fails naming the value"
    example = 'SELECT json(\'{"b": 1.0, "a": [1e3]}\') -- \'{"a":[1000.0],"b":1.0}\''
    strict: ClassVar[bool] = True

    def __call__(self, text: pa.Array, *ignored: pa.Array) -> pa.Array:
        name, strict = self.name, self.strict
        return _strings([None if t is None else _canonical(name, t, strict) for t in text.to_pylist()])


def _boolean_literal(args: list[exp.Expression]) -> str | None:
    if len(args) > 1 and not isinstance(args[1], exp.Boolean | exp.Null):
        return "allow_duplicate_keys must be TRUE or FALSE (a literal; a repeated key keeps its last value)"
    return None


class ParseJson(Json):
    name = "parse_json"
    spark_name = "streamling_parse_json"
    arguments: ClassVar = ("string", "boolean")
    min_arguments = 1
    doc_arguments = "text[, allow_duplicate_keys]"
    doc_returns = "string: as `json` (not Spark's VARIANT); `allow_duplicate_keys` is accepted and ignored"
    example = 'SELECT parse_json(\'{"b": 1, "a": 2}\', true) -- \'{"a":2,"b":1}\''

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        return _boolean_literal(args)


class TryParseJson(ParseJson):
    name = "try_parse_json"
    spark_name = "streamling_try_parse_json"
    nulls = "NULL, blank or invalid JSON → NULL"
    doc_returns = "string: as `parse_json`"
    example = "SELECT try_parse_json('{bad') -- NULL"
    strict = False


def _kind(value: Any) -> str:
    return "OBJECT" if type(value) is dict else "ARRAY" if type(value) is list else "SCALAR"


def is_json(text: str, kind: str) -> bool:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return kind == "VALUE" or _kind(value) == kind


IS_JSON_TYPE = Mode("type", {w: w for w in ("VALUE", "OBJECT", "ARRAY", "SCALAR")})


class IsJson(ArrowFunction):
    name = "is_json"
    arguments: ClassVar = ("string", "string")
    min_arguments = 1
    returns = "boolean"
    family = FAMILY
    doc_arguments = "text[, type: 'VALUE' (default), 'OBJECT', 'ARRAY' or 'SCALAR']"
    doc_returns = "boolean: whether `text` is JSON of that type"
    nulls = "NULL → false"
    example = "SELECT is_json('[1]', 'OBJECT') -- false"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        return IS_JSON_TYPE.problem(args[1]) if len(args) > 1 else None

    def __call__(self, text: pa.Array, kind: pa.Array | None = None) -> pa.Array:
        wanted = "VALUE" if kind is None else IS_JSON_TYPE.read(self.name, kind, "VALUE")
        return pa.array([t is not None and is_json(t, wanted) for t in text.to_pylist()], pa.bool_())


# --- path queries -----------------------------------------------------------------------------------------

EXISTS_ON_ERROR = Mode("on_error", {"FALSE": False, "TRUE": True, "UNKNOWN": None, "ERROR": _ERROR}, str.upper)


class JsonExists(ArrowFunction):
    name = "json_exists"
    arguments: ClassVar = ("string", "string", "string")
    min_arguments = 2
    returns = "boolean"
    family = FAMILY
    doc_arguments = "json, path[, on_error: 'FALSE' (default), 'TRUE', 'UNKNOWN' or 'ERROR']"
    doc_returns = f"boolean: whether `path` leads to a non-null value ({PATHS})"
    nulls = f"{NULL_NULL}; invalid JSON → `on_error` (UNKNOWN is NULL, ERROR fails the epoch)"
    example = "SELECT json_exists('{\"a\":1}', '$.a') -- true"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        return _path_problem(args) or (EXISTS_ON_ERROR.problem(args[2]) if len(args) > 2 else None)

    def __call__(self, json: pa.Array, path: pa.Array, on_error: pa.Array | None = None) -> pa.Array:
        invalid = False if on_error is None else EXISTS_ON_ERROR.read(self.name, on_error, False)
        out: list[bool | None] = []
        for row in _rows(json, path, self.name):
            if row is None:
                out.append(None)
                continue
            found = _find(*row)
            if found is _INVALID:
                if invalid == _ERROR:
                    raise _failed(self.name, "invalid JSON", row, "on_error")
                out.append(invalid)
            else:
                out.append(found is not _MISSING and found is not None)
        return pa.array(out, pa.bool_())


VALUE_RETURNING = Mode("returning", {w: w for w in ("STRING", "VARCHAR", "CHAR")}, str.upper, null=True)
VALUE_EMPTY = Mode("on_empty", {w: w for w in ("NULL", "ERROR", "DEFAULT")}, str.upper)
VALUE_ERROR = Mode("on_error", VALUE_EMPTY.words, str.upper)


def _default_problem(label: str, node: exp.Expression) -> str | None:
    return None if _literal(node) is not None else f"{label} must be a string literal or NULL"


class JsonValue(ArrowFunction):
    name = "json_value"
    arguments: ClassVar = ("string",) * 7
    min_arguments = 2
    returns = "string"
    family = FAMILY
    doc_arguments = (
        "json, path[, returning, on_empty, empty_default, on_error, error_default] (2 or 7 arguments;"
        " returning: 'STRING', 'VARCHAR' or 'CHAR'; on_empty, on_error: 'NULL', 'ERROR' or 'DEFAULT',"
        " which returns the default after it)"
    )
    doc_returns = f"string: the scalar at `path` (strings unquoted, `1.0` as `1`, no exponents; {PATHS})"
    nulls = (
        f"{NULL_NULL}; an object, array, JSON null or missing path → `on_empty`; invalid JSON → `on_error`"
        " (both NULL by default; ERROR fails the epoch)"
    )
    example = "SELECT json_value('{\"a\":null}', '$.a', 'STRING', 'DEFAULT', 'missing', 'NULL', NULL) -- 'missing'"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        if len(args) not in (2, 7):
            return f"takes 2 or 7 arguments ({cls.doc_arguments.split(' (')[0]}), got {len(args)}"
        if len(args) == 2:
            return _path_problem(args)
        return (
            _path_problem(args)
            or VALUE_RETURNING.problem(args[2])
            or VALUE_EMPTY.problem(args[3])
            or _default_problem("empty_default", args[4])
            or VALUE_ERROR.problem(args[5])
            or _default_problem("error_default", args[6])
        )

    def __call__(self, json: pa.Array, path: pa.Array, *options: pa.Array) -> pa.Array:
        empty = error = "NULL"
        empty_default = error_default = None
        if options:
            VALUE_RETURNING.read(self.name, options[0])
            empty, empty_default = VALUE_EMPTY.read(self.name, options[1], "NULL"), _first(options[2])
            error, error_default = VALUE_ERROR.read(self.name, options[3], "NULL"), _first(options[4])
        out: list[str | None] = []
        for row in _rows(json, path, self.name):
            if row is None:
                out.append(None)
                continue
            found = _find(*row)
            if found is _INVALID:
                if error == _ERROR:
                    raise _failed(self.name, "invalid JSON", row, "on_error")
                out.append(error_default if error == "DEFAULT" else None)
            elif found is _MISSING or found is None or type(found) in (dict, list):
                if empty == _ERROR:
                    raise _failed(self.name, "no scalar at the path", row, "on_empty")
                out.append(empty_default if empty == "DEFAULT" else None)
            else:
                out.append(_scalar_text(found))
        return _strings(out)


def _failed(function: str, what: str, row: tuple[str, Path], clause: str) -> StreamlingError:
    steps = "".join(f"[{s}]" if type(s) is int else f"[{s!r}]" for s in row[1])
    return StreamlingError.user(f"SQL function {function}: {what} ${steps} in {_shown(row[0])} ({clause} ERROR)")


QUERY_RETURNING = Mode(
    "returning",
    {"STRING": "STRING", "VARCHAR": "STRING", "ARRAY": "ARRAY", "ARRAY<STRING>": "ARRAY", "ARRAY<VARCHAR>": "ARRAY"},
    _unspaced,
)
_WRAPPERS = {"WITHOUT ARRAY": "NONE", "WITH CONDITIONAL ARRAY": "CONDITIONAL", "WITH UNCONDITIONAL ARRAY": "ALWAYS"}
QUERY_WRAPPER = Mode("wrapper", {**_WRAPPERS, **{f"{w} WRAPPER": v for w, v in _WRAPPERS.items()}})
_BEHAVIOURS = {"NULL": None, "EMPTY ARRAY": "[]", "EMPTY OBJECT": "{}", "ERROR": _ERROR}
QUERY_EMPTY = Mode("on_empty", _BEHAVIOURS)
QUERY_ERROR = Mode("on_error", _BEHAVIOURS)


class JsonQuery(ArrowFunction):
    name = "json_query"
    arguments: ClassVar = ("string",) * 6
    min_arguments = 2
    returns = "string"
    family = FAMILY
    doc_arguments = (
        "json, path[, returning, wrapper, on_empty, on_error] (2 or 6 arguments; returning: 'STRING' or"
        " 'ARRAY'; wrapper: 'WITHOUT ARRAY', 'WITH CONDITIONAL ARRAY' or 'WITH UNCONDITIONAL ARRAY';"
        " on_empty, on_error: 'NULL', 'EMPTY ARRAY', 'EMPTY OBJECT' or 'ERROR')"
    )
    doc_returns = f"string: the JSON text of the object or array at `path`, wrapped in `[…]` as asked ({PATHS})"
    nulls = (
        f"{NULL_NULL}; a scalar (unless wrapped), JSON null or missing path → `on_empty`; invalid JSON →"
        " `on_error` (both NULL by default; ERROR fails the epoch)"
    )
    example = "SELECT json_query('{\"a\":{\"b\":[1,2]}}', '$.a') -- '{\"b\":[1,2]}'"

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        if len(args) not in (2, 6):
            return f"takes 2 or 6 arguments ({cls.doc_arguments.split(' (')[0]}), got {len(args)}"
        if len(args) == 2:
            return _path_problem(args)
        problem = (
            _path_problem(args)
            or QUERY_RETURNING.problem(args[2])
            or QUERY_WRAPPER.problem(args[3])
            or QUERY_EMPTY.problem(args[4])
            or QUERY_ERROR.problem(args[5])
        )
        if problem:
            return problem
        returning = QUERY_RETURNING.words[_unspaced(_literal(args[2])[0] or "")]  # type: ignore[index]
        behaviours = {QUERY_EMPTY.spell(_literal(a)[0] or "") for a in args[4:]}  # type: ignore[index]
        if returning == "ARRAY" and "EMPTY OBJECT" in behaviours:
            return "RETURNING ARRAY does not allow 'EMPTY OBJECT' for on_empty or on_error"
        return None

    def __call__(self, json: pa.Array, path: pa.Array, *options: pa.Array) -> pa.Array:
        wrapper, empty, error = "NONE", None, None
        if options:
            QUERY_RETURNING.read(self.name, options[0])
            wrapper = QUERY_WRAPPER.read(self.name, options[1], "NONE")
            empty = QUERY_EMPTY.read(self.name, options[2])
            error = QUERY_ERROR.read(self.name, options[3])
        out: list[str | None] = []
        for row in _rows(json, path, self.name):
            if row is None:
                out.append(None)
                continue
            found = _find(*row)
            if found is _INVALID:
                if error == _ERROR:
                    raise _failed(self.name, "invalid JSON", row, "on_error")
                out.append(error)
            elif type(found) in (dict, list):
                text = document_text(found)
                out.append(text if wrapper == "NONE" or (wrapper == "CONDITIONAL" and text[0] == "[") else f"[{text}]")
            elif found is not _MISSING and found is not None and wrapper != "NONE":
                out.append(f"[{_scalar_json(found)}]")
            else:
                if empty == _ERROR:
                    raise _failed(self.name, "no object or array at the path", row, "on_empty")
                out.append(empty)
        return _strings(out)


# --- constructors: Spark values as JSON -------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = {"s": timedelta(seconds=1), "ms": timedelta(milliseconds=1), "us": timedelta(microseconds=1)}

Convert = Callable[[Any], Any]


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def _same(value: Any) -> Any:
    return value


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _embedded(text: str) -> Any:
    """A string argument holding a JSON object or array is embedded as JSON (as in the original)."""
    if text.lstrip(_RUST_WHITESPACE)[:1] in ("{", "["):
        try:
            return orjson.loads(text.strip(_RUST_WHITESPACE))
        except orjson.JSONDecodeError:
            pass
    return text


def _key_text(value: Any) -> str:
    """A map key or ``json_object`` key as object key text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"keys must be finite numbers, not {value!r}")
        return serde_text(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _timestamp_count(dtype: pa.TimestampType) -> Convert:
    unit = _UNITS.get(dtype.unit)
    epoch = _EPOCH if dtype.tz is None else _EPOCH_UTC
    suffix = "" if dtype.tz is None else f" @{dtype.tz}"

    def count(value: Any) -> str:
        raw = value.value if unit is None else (value - epoch) // unit  # nanoseconds arrive as pandas Timestamps
        return f"{raw}{suffix}"

    return count


def _iso_timestamp(dtype: pa.TimestampType) -> Convert:
    def iso(value: datetime) -> str:
        fraction = value.microsecond
        text = value.strftime("%Y-%m-%dT%H:%M:%S")
        if fraction:
            text += f".{fraction // 1000:03d}" if fraction % 1000 == 0 else f".{fraction:06d}"
        if dtype.tz is None:
            return text
        offset = value.utcoffset() or timedelta(0)
        if not offset:
            return text + "Z"
        sign, offset = ("-", -offset) if offset < timedelta(0) else ("+", offset)
        minutes = int(offset.total_seconds()) // 60
        return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"

    return iso


def _float32_text(value: float) -> float | None:
    # the original's json_string writes a float as its shortest single-precision text and reads that back
    return float(str(np.float32(value))) if math.isfinite(value) else None


def converter(dtype: pa.DataType, arrow_text: bool) -> Convert:
    """Python value of an Arrow type → the JSON value the original writes for it. `arrow_text` selects
    ``json_string``'s forms (arrow-json's: hex bytes, ISO times, decimals as numbers, strings never
    embedded) over the constructors' (base64 bytes, raw time counts, decimals as text, JSON strings embedded)."""
    if pt.is_string(dtype) or pt.is_large_string(dtype):
        return _same if arrow_text else _embedded
    if pt.is_boolean(dtype) or pt.is_integer(dtype) or pt.is_null(dtype):
        return _same
    if pt.is_floating(dtype):
        return _float32_text if arrow_text and pt.is_float32(dtype) else _finite
    if pt.is_decimal(dtype):
        if arrow_text:
            return lambda v: orjson.loads(format(v, "f"))
        return lambda v: format(v, "f")
    if pt.is_binary(dtype) or pt.is_large_binary(dtype) or pt.is_fixed_size_binary(dtype):
        if arrow_text:
            return lambda v: v.hex()
        return lambda v: base64.b64encode(v).decode()
    if pt.is_timestamp(dtype):
        return _iso_timestamp(dtype) if arrow_text else _timestamp_count(dtype)
    if pt.is_date32(dtype):
        return date.isoformat if arrow_text else lambda v: (v - _EPOCH.date()).days
    if pt.is_list(dtype) or pt.is_large_list(dtype) or pt.is_fixed_size_list(dtype):
        item = _nullable(converter(dtype.value_type, arrow_text))
        return lambda v: [item(x) for x in v]
    if pt.is_map(dtype):
        item = _nullable(converter(dtype.item_type, arrow_text))
        return lambda v: {_key_text(k): item(x) for k, x in v}
    if pt.is_struct(dtype):
        fields = [(f.name, _nullable(converter(f.type, arrow_text))) for f in dtype]
        return lambda v: {name: convert(v[name]) for name, convert in fields}
    return str


def _columns(arrays: Sequence[pa.Array], arrow_text: bool) -> list[list[Any]]:
    """Each argument's rows as JSON values (NULL as None)."""
    out = []
    for array in arrays:
        convert = converter(array.type, arrow_text)
        out.append([None if v is None else convert(v) for v in array.to_pylist()])
    return out


class JsonString(ArrowFunction):
    name = "json_string"
    arguments: ClassVar = ("any",)
    returns = "string"
    family = FAMILY
    doc_arguments = "value (any type)"
    doc_returns = (
        "string: `value` as JSON — strings quoted, numbers and decimals as numbers, structs and maps as objects"
        " (keys sorted), arrays, bytes as hex, timestamps and dates as ISO text"
    )
    nulls = "NULL → NULL"
    example = "SELECT json_string(named_struct('b', 1, 'a', 'x')) -- '{\"a\":\"x\",\"b\":1}'"

    def __call__(self, value: pa.Array) -> pa.Array:
        (rows,) = _columns([value], arrow_text=True)
        return _strings([None if v is None else serde_text(v) for v in rows])


class JsonArray(ArrowFunction):
    name = "json_array"
    arguments: ClassVar = ("any",)
    min_arguments = 0
    variadic = True
    returns = "string"
    family = FAMILY
    doc_arguments = "[value, ...] (any types)"
    doc_returns = (
        "string: a JSON array of the values — strings holding a JSON object or array embedded, other strings"
        " quoted; arrays, structs and maps nested (object keys sorted); bytes as base64; decimals as text"
    )
    nulls = "NULL values → `null`"
    example = "SELECT json_array(1, 'a', NULL, '[2]') -- '[1,\"a\",null,[2]]'"
    keep_nulls: ClassVar[bool] = True

    @classmethod
    def rewrite(cls, args: list[exp.Expression]) -> exp.Expression | None:
        return None if args else exp.Literal.string("[]")

    def __call__(self, *values: pa.Array) -> pa.Array:
        columns = _columns(values, arrow_text=False)
        if self.keep_nulls:
            return _strings([serde_text(list(row)) for row in zip(*columns, strict=True)])
        return _strings([serde_text([v for v in row if v is not None]) for row in zip(*columns, strict=True)])


class JsonArrayAbsentOnNull(JsonArray):
    name = "json_array_absent_on_null"
    nulls = "NULL values are left out"
    doc_returns = "string: as `json_array`"
    example = "SELECT json_array_absent_on_null(1, NULL) -- '[1]'"
    keep_nulls = False


class JsonObject(ArrowFunction):
    name = "json_object"
    arguments: ClassVar = ("any",)
    min_arguments = 0
    variadic = True
    returns = "string"
    family = FAMILY
    doc_arguments = "[key, value, ...] (an even number; keys text or numbers)"
    doc_returns = (
        "string: a JSON object of the pairs (keys sorted, a repeated key keeps its last value); values as in"
        " `json_array`"
    )
    nulls = "NULL values → `null`; a NULL key fails the epoch"
    example = "SELECT json_object('b', 1, 'a', 'x') -- '{\"a\":\"x\",\"b\":1}'"
    keep_nulls: ClassVar[bool] = True

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        if len(args) % 2:
            return f"takes an even number of arguments (key, value, ...), got {len(args)}"
        return None

    @classmethod
    def rewrite(cls, args: list[exp.Expression]) -> exp.Expression | None:
        return None if args else exp.Literal.string("{}")

    def __call__(self, *values: pa.Array) -> pa.Array:
        keys = [array.to_pylist() for array in values[0::2]]
        columns = _columns(values[1::2], arrow_text=False)
        out = []
        pairs = zip(zip(*keys, strict=True), zip(*columns, strict=True), strict=True)
        for row_keys, row_values in pairs:
            document: dict[str, Any] = {}
            for index, (key, value) in enumerate(zip(row_keys, row_values, strict=True)):
                if key is None:
                    raise StreamlingError.user(f"SQL function {self.name}: key (argument {2 * index + 1}) is NULL")
                try:
                    text = _key_text(key)
                except ValueError as exc:
                    raise StreamlingError.user(f"SQL function {self.name}: {exc}") from None
                if value is not None or self.keep_nulls:
                    document[text] = value
            out.append(serde_text(document))
        return _strings(out)


class JsonObjectAbsentOnNull(JsonObject):
    name = "json_object_absent_on_null"
    nulls = "pairs with a NULL value are left out; a NULL key fails the epoch"
    doc_returns = "string: as `json_object`"
    example = "SELECT json_object_absent_on_null('a', 1, 'b', NULL) -- '{\"a\":1}'"
    keep_nulls = False


_EMPTY_GROUP = "CASE WHEN count(1) = 0 THEN NULL ELSE {} END"
"""The original's JSON aggregates give NULL for an empty group (Spark's collect_list gives an empty array)."""
_PAIRS = "collect_list(named_struct('k', CAST({0} AS STRING), 'v', {1}))"
_AGGREGATE_NOTE = (
    "; values are written by Spark's to_json: strings are always quoted (json_array embeds a string holding JSON)"
)


def _json_aggregate(name: str, arguments: str, returns: str, nulls: str, template: str, example: str) -> SparkFunction:
    """The original's JSON aggregates as Spark aggregates (collect_list and to_json, in the JVM): no Python."""
    arity = arguments.count(",") + 1
    return SparkFunction(
        name=name,
        family=FAMILY,
        arguments=arguments,
        returns=returns,
        nulls=nulls + _AGGREGATE_NOTE,
        templates={arity: _EMPTY_GROUP.format(template)},
        example=example,
    )


SPARK_FUNCTIONS: list[SparkFunction] = [
    _json_aggregate(
        "json_arrayagg_null_on_null",
        "value",
        "string: aggregate, a JSON array of the group's values",
        "NULL values → `null`; an empty group → NULL",
        "to_json(transform(collect_list(named_struct('v', {0})), __s -> __s.v))",
        "SELECT owner, json_arrayagg_null_on_null(token_id) FROM t GROUP BY owner -- '[1,null,3]'",
    ),
    _json_aggregate(
        "json_arrayagg_absent_on_null",
        "value",
        "string: aggregate, as `json_arrayagg_null_on_null`",
        "NULL values are left out; an empty group → NULL",
        "to_json(collect_list({0}))",
        "SELECT owner, json_arrayagg_absent_on_null(token_id) FROM t GROUP BY owner -- '[1,3]'",
    ),
    _json_aggregate(
        "json_objectagg_null_on_null",
        "key, value",
        "string: aggregate, a JSON object of the group's key/value pairs",
        "NULL values → `null`; a NULL or repeated key fails the epoch (Spark's NULL_MAP_KEY, DUPLICATED_MAP_KEY); an "
        "empty group → NULL",
        f"to_json(map_from_entries({_PAIRS}))",
        'SELECT owner, json_objectagg_null_on_null(token_id, amount) FROM t GROUP BY owner -- \'{"a":1,"b":null}\'',
    ),
    _json_aggregate(
        "json_objectagg_absent_on_null",
        "key, value",
        "string: aggregate, as `json_objectagg_null_on_null`",
        "pairs with a NULL value are left out; a NULL or repeated key fails the epoch; an empty group → NULL",
        f"to_json(map_from_entries(filter({_PAIRS}, __e -> __e.v IS NOT NULL)))",
        "SELECT owner, json_objectagg_absent_on_null(token_id, amount) FROM t GROUP BY owner -- '{\"a\":1}'",
    ),
]
ARROW_FUNCTIONS: list[type[ArrowFunction]] = [
    JsonString,
    JsonQuote,
    JsonUnquote,
    JsonExists,
    JsonValue,
    JsonQuery,
    JsonArray,
    JsonArrayAbsentOnNull,
    JsonObject,
    JsonObjectAbsentOnNull,
    Json,
    ParseJson,
    TryParseJson,
    IsJson,
]
