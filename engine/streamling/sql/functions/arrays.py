"""Arrays and maps: splitting, series, zipping, enumerating and filtering lists (of structs, mostly: decoded
instructions, ledger changes), maps as key/value lists.

All but one are Spark higher-order functions (`filter`, `transform`, `get`, `map_entries`), so they keep the
element types they are given (an Arrow function has one fixed result type) and run in the JVM. A field name
argument must be a string literal: it becomes a struct field access when the SQL is rewritten, and a missing
field fails at ``--validate``. Spark has one list type, so ``to_large_list`` gives its argument back."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
import pyarrow as pa
from sqlglot import exp

from streamling.errors import StreamlingError
from streamling.sql.functions.base import ArrowFunction, SparkFunction, fill

FAMILY = "Arrays and maps"
FIELD = "__sl_field"
"""Templates name the struct field given as a literal ``__e.__sl_field``."""


def _field_literal(args: list[exp.Expression]) -> str | None:
    field = args[1]
    if isinstance(field, exp.Literal) and field.is_string:
        return None
    return f"field_name must be a string literal (the struct field's name), got {field.sql(dialect='spark')}"


def _with_field(template: str) -> Any:
    """A `build` filling `template` and naming the struct field the call's second argument (a literal) names."""

    def build(args: list[exp.Expression]) -> exp.Expression:
        tree = fill(template, args)
        for name in list(tree.find_all(exp.Identifier)):
            if name.this == FIELD:
                name.replace(exp.to_identifier(args[1].name, quoted=True))
        return tree

    return build


def _split(args: list[exp.Expression]) -> exp.Expression:
    if len(args) == 1:
        return fill("split({0}, ' ', -1)", args)
    # Spark splits on a regular expression: quote the separator as java.util.regex.Pattern.quote does
    return fill(
        "split({0}, concat('\\\\Q', replace(coalesce({1}, ' '), '\\\\E', '\\\\E\\\\\\\\E\\\\Q'), '\\\\E'), -1)", args
    )


_STEP = "coalesce({2}, 1)"
GENERATE_SERIES = (
    "CASE WHEN {0} IS NULL OR {1} IS NULL THEN CAST(NULL AS ARRAY<BIGINT>) "
    f"WHEN {_STEP} = 0 THEN raise_error(concat('SQL function _gs_generate_series: step must not be 0 "
    "(start ', {0}, ', stop ', {1}, ')')) "
    f"WHEN ({_STEP} > 0 AND {{0}} > {{1}}) OR ({_STEP} < 0 AND {{0}} < {{1}}) THEN CAST(array() AS ARRAY<BIGINT>) "
    f"ELSE sequence(CAST({{0}} AS BIGINT), CAST({{1}} AS BIGINT), CAST({_STEP} AS BIGINT)) END"
)
"""Spark's `sequence` refuses a step that walks away from the stop; the original gives an empty list."""


def _zip(args: list[exp.Expression]) -> exp.Expression:
    count = len(args)
    lists = range(count)
    fields = ", ".join(f"'f{i}', " + ("__x" if i == 0 else f"get({{{i}}}, __i)") for i in lists)
    sizes = ", ".join(f"CAST(size({{{i}}}) AS STRING)" for i in lists)
    template = (
        f"CASE WHEN {' OR '.join(f'{{{i}}} IS NULL' for i in lists)} THEN array() "
        f"WHEN NOT ({' AND '.join(f'size({{{i}}}) = size({{0}})' for i in lists[1:])}) "
        f"THEN raise_error(concat('SQL function _gs_zip_arrays: the lists must have the same length, got ', "
        f"concat_ws(', ', {sizes}))) "
        f"ELSE transform({{0}}, (__x, __i) -> named_struct({fields})) END"
    )
    return fill(template, args)


KEEPS_FIRST_METADATA = "streamling_keeps_first_metadata"
"""Set in the `meta` of the expression ``coalesce_meta`` becomes: Spark's coalesce drops column metadata (a
wide-integer marker, say), so whoever marks output columns must copy the first argument's onto it."""


def _coalesce_meta(args: list[exp.Expression]) -> exp.Expression:
    node = exp.Coalesce(this=args[0], expressions=args[1:])
    node.meta[KEEPS_FIRST_METADATA] = True
    return node


_MATCH = f"__e IS NOT NULL AND __e.{FIELD} <=> {{2}}"
FILTER = f"filter({{0}}, __e -> {_MATCH})"


SPARK_FUNCTIONS: list[SparkFunction] = [
    SparkFunction(
        "_gs_split_string_to_array",
        FAMILY,
        "text[, separator (literal text)]",
        "array<string>",
        "NULL text → NULL; NULL separator → a space; an empty separator splits into characters",
        aliases=("_gs_split_string_by",),
        arity=(1, 2),
        build=_split,
        example="_gs_split_string_to_array('a-b', '-') → ['a', 'b']",
    ),
    SparkFunction(
        "_gs_generate_series",
        FAMILY,
        "start, stop[, step] (integers)",
        "array<bigint>: start to stop inclusive, by step (default 1; negative counts down)",
        "NULL start or stop → NULL; NULL step → 1; a step away from stop → []; step 0 fails the epoch",
        templates={2: GENERATE_SERIES.replace("{2}", "1"), 3: GENERATE_SERIES},
        example="_gs_generate_series(1, 5, 2) → [1, 3, 5]",
    ),
    SparkFunction(
        "_gs_zip_arrays",
        FAMILY,
        "list1, list2[, list3[, list4]]",
        "array<struct<f0, f1, …>>: the lists' elements side by side",
        "any NULL list → []; lists of different lengths fail the epoch naming the lengths",
        aliases=("zip_arrays",),
        arity=(2, 4),
        build=_zip,
        example="_gs_zip_arrays(ARRAY[1, 2], ARRAY['a', 'b']) → [{f0: 1, f1: 'a'}, {f0: 2, f1: 'b'}]",
    ),
    SparkFunction(
        "array_enumerate",
        FAMILY,
        "list",
        "array<struct<index bigint, value>>: each element with its zero-based index",
        "NULL → NULL",
        templates={1: "transform({0}, (__v, __i) -> named_struct('index', CAST(__i AS BIGINT), 'value', __v))"},
        example="array_enumerate(ARRAY['a', 'b']) → [{index: 0, value: 'a'}, {index: 1, value: 'b'}]",
    ),
    SparkFunction(
        "array_filter",
        FAMILY,
        "list of structs, field_name (string literal), value",
        "the list's type: the elements whose field equals value",
        "NULL list → NULL; NULL value matches NULL fields; NULL elements are dropped",
        arity=(3, 3),
        build=_with_field(FILTER),
        check=_field_literal,
        example="array_filter(changes, 'kind', 'transfer')",
    ),
    SparkFunction(
        "array_filter_first",
        FAMILY,
        "list of structs, field_name (string literal), value",
        "the element type: the first element whose field equals value",
        "NULL list or no match → NULL; NULL value matches a NULL field",
        arity=(3, 3),
        build=_with_field(f"get({FILTER}, 0)"),
        check=_field_literal,
        example="array_filter_first(changes, 'kind', 'transfer')",
    ),
    SparkFunction(
        "array_filter_in",
        FAMILY,
        "list of structs, field_name (string literal), values (list)",
        "the list's type: the elements whose field is one of values",
        "NULL list → NULL; NULL values → []; a NULL in values matches NULL fields; NULL elements are dropped",
        arity=(3, 3),
        build=_with_field(f"filter({{0}}, __e -> __e IS NOT NULL AND exists({{2}}, __v -> __v <=> __e.{FIELD}))"),
        check=_field_literal,
        example="array_filter_in(changes, 'kind', ARRAY['transfer', 'mint'])",
    ),
    SparkFunction(
        "array_struct_field",
        FAMILY,
        "list of structs, field_name (string literal)",
        "array of the field's type: that field of every element",
        "NULL list → NULL; a NULL element gives a NULL",
        arity=(2, 2),
        build=_with_field(f"transform({{0}}, __e -> __e.{FIELD})"),
        check=_field_literal,
        example="array_struct_field(changes, 'kind')",
    ),
    SparkFunction(
        "to_large_list",
        FAMILY,
        "list",
        "the same list: Spark has one list type",
        "NULL → NULL",
        arity=(1, 1),
        build=lambda args: args[0],
        example="to_large_list(items)",
    ),
    SparkFunction(
        "_gs_map_to_array_struct",
        FAMILY,
        "map",
        "array<struct<key, value>>: the map's entries",
        "NULL → NULL",
        templates={1: "map_entries({0})"},
        example="_gs_map_to_array_struct(params)",
    ),
    SparkFunction(
        "coalesce_meta",
        FAMILY,
        "value[, value, …]",
        "the first non-NULL value (in the arguments' common type)",
        "all NULL → NULL",
        arity=(1, None),
        build=_coalesce_meta,
        example="coalesce_meta(primary_id, fallback_id)",
    ),
]


def _clickhouse_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return orjson.dumps(value).decode()  # compact, numbers as the original prints them (past 64 bits: a float)


def clickhouse_tuples(function: str, text: str | None, keys: list[str | None] | None) -> str:
    if text is None:
        return "[]"
    try:
        objects = orjson.loads(text)
    except orjson.JSONDecodeError:
        objects = None
    if not isinstance(objects, list):
        raise StreamlingError.user(f"SQL function {function}: not a JSON array of objects: {text[:200]!r}")
    names = [k for k in keys or () if k is not None]
    rows = []
    for item in objects:
        get = item.get if isinstance(item, dict) else (lambda _key: None)
        rows.append("(" + ", ".join(_clickhouse_value(get(key)) for key in names) + ")")
    return "[" + ", ".join(rows) + "]"


class JsonObjectsToClickhouseTuples(ArrowFunction):
    name = "_gs_json_objects_to_clickhouse_tuples"
    arguments: ClassVar = ("string", pa.list_(pa.string()))
    returns = "string"
    family = FAMILY
    doc_arguments = "json (an array of objects), keys (list of text)"
    doc_returns = "string: ClickHouse array-of-tuples text, one tuple of the keys' values per object"
    nulls = (
        "NULL json → '[]'; a missing or null key → null; text is quoted (' and \\ escaped), other values as "
        "JSON; not a JSON array fails the epoch naming the value"
    )
    example = (
        '_gs_json_objects_to_clickhouse_tuples(\'[{"pubkey": "abc", "signer": true}]\', '
        "ARRAY['pubkey', 'signer']) → \"[('abc', true)]\""
    )

    def __call__(self, texts: pa.Array, keys: pa.Array) -> pa.Array:
        rows = zip(texts.to_pylist(), keys.to_pylist(), strict=True)
        return pa.array([clickhouse_tuples(self.name, text, names) for text, names in rows], pa.string())


ARROW_FUNCTIONS: list[type[ArrowFunction]] = [JsonObjectsToClickhouseTuples]
