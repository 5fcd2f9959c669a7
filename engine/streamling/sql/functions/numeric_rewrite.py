"""Wide numbers in SQL operators: once a value is a u256, an i256 or a ``decimal(p,s)`` — a call of one of
their functions, or an input column whose schema marks it so (Avro ``decimal(78,0)``, a ClickHouse
``UInt256``, an upstream transform's ``to_u256`` column) — ``+ - * / %``, ``-x``, comparisons, ``BETWEEN``
and ``IN`` on it become the exact functions, as in the original; ``CAST(x AS TEXT)`` gives its digits, and
the output columns that hold such values get the marker sinks read.

Runs when a transform's SQL is rendered (the input schemas are known then), over each SELECT innermost
first, resolving columns by name through CTEs and subqueries. The other operand of an operator is converted:
a literal at render time (so a bad one fails ``--validate``), an integer column with ``to_u256``/a cast, a
``decimal(p,s)`` column with ``to_decimal_arb``. Equality between values of one scale compares their text
(equal numbers have equal text), which Spark does without Python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from streamling.core.markers import DECIMAL, I256, U256, WIDE_DECIMAL_KEY, WideType, decimal_type
from streamling.core.markers import wide_type as marker_type
from streamling.errors import StreamlingError
from streamling.sql.functions import decimals
from streamling.sql.functions.wide_integers import to_int

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T

U256_TYPE, I256_TYPE = WideType(U256), WideType(I256)
_INTEGER_RESULT = {
    **{name: U256_TYPE for name in ("to_u256", "u256_add", "u256_sub", "u256_mul", "u256_div", "u256_mod")},
    **{
        name: I256_TYPE
        for name in ("to_i256", "i256_add", "i256_sub", "i256_mul", "i256_div", "i256_mod", "i256_neg", "i256_abs")
    },
}
_INTEGER_ARGUMENTS = {name: kind for name, kind in _INTEGER_RESULT.items() if not name.startswith("to_")}
_INTEGER_ARGUMENTS |= {"u256_to_string": U256_TYPE, "i256_to_string": I256_TYPE}
_DECLARED = ("to_decimal_arb", "to_decimal_arb_from_string", "try_to_decimal_arb_from_string")
_DECLARED += ("to_decimal_arb_from_int", "decimal_arb_rescale", "decimal_arb_to_decimal256")
_DECLARED += ("to_decimal_arb_from_str", "to_decimal_arb_from_float")
_FROM_ARROW_DECIMAL = {"to_decimal_arb_from_decimal128": 38, "to_decimal_arb_from_decimal256": 76}
"""Their value alone keeps its own precision and scale (read from its type here); a declaration rounds to it."""
_DECLARED += tuple(_FROM_ARROW_DECIMAL)
_ROUND = "decimal_arb_round"
_TO_PLAIN = ("decimal_arb_to_int64", "decimal_arb_to_float64")
"""Their result is a Spark bigint or double."""
_LISTS = ("decimal_arb_array_min", "decimal_arb_array_max", "decimal_arb_array_sort")
"""Their argument is an array of decimal_arb; the result has the elements' marker."""
_RESTAMP, _LEGACY = "decimal_arb_restamp", "legacy_wide_int_to_decimal_arb"
_TO_DECIMAL128 = "decimal_arb_to_decimal128"
"""Its result is a Spark decimal: the function gives the rounded text, which the rewriting casts to
``DECIMAL(p,s)`` (a Python UDF's result type is fixed when it is registered, the declaration is per call)."""
_SORT_KEY = "decimal_arb_to_sort_key"
_LITERAL_TAIL = (*_DECLARED, _TO_DECIMAL128, _ROUND, "decimal_arb_array_sort")
"""Functions whose arguments after the first are literals they read once (precision, scale, kind)."""
_DECIMAL_BINARY = {f"decimal_arb_{op}": op for op in ("add", "sub", "mul", "div", "mod")}
_DECIMAL_UNARY = ("decimal_arb_neg", "decimal_arb_abs")
_EXTREMES = ("decimal_arb_greatest", "decimal_arb_least")
_COMPARISONS = {
    exp.EQ: "eq",
    exp.NEQ: "neq",
    exp.LT: "lt",
    exp.LTE: "lte",
    exp.GT: "gt",
    exp.GTE: "gte",
}
_DECIMAL_COMPARISONS = tuple(f"decimal_arb_{op}" for op in _COMPARISONS.values())
_TO_STRING = ("u256_to_string", "i256_to_string", "decimal_arb_to_string")
_ARITHMETIC = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div", exp.Mod: "mod"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}
NAMES = frozenset(
    {*_INTEGER_RESULT, *_INTEGER_ARGUMENTS, *_DECLARED, *_DECIMAL_BINARY, *_DECIMAL_UNARY, *_EXTREMES}
    | {*_DECIMAL_COMPARISONS, *_TO_STRING, "to_int64", _TO_DECIMAL128, _SORT_KEY}
    | {_ROUND, *_TO_PLAIN, *_LISTS, _RESTAMP, _LEGACY}
)
"""Spark names of the functions on wide numbers: a query calling none of them and reading no marked column
is left alone."""
_TEXT_TYPES = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR}
_TEXT_TYPES |= {exp.DataType.Type.NVARCHAR, exp.DataType.Type.NCHAR}


@functools.cache
def _integer_types() -> dict[exp.DataType.Type, T.DataType]:
    from pyspark.sql import types as T

    return {
        exp.DataType.Type.TINYINT: T.ByteType(),
        exp.DataType.Type.SMALLINT: T.ShortType(),
        exp.DataType.Type.INT: T.IntegerType(),
        exp.DataType.Type.BIGINT: T.LongType(),
    }


@functools.cache
def _integer_digits() -> dict[type[T.DataType], int]:
    from pyspark.sql import types as T

    return {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}


@dataclass(frozen=True)
class Info:
    """What is known of a column or expression: its wide type and/or its Spark type."""

    wide: WideType | None = None
    spark: T.DataType | None = None


UNKNOWN = Info()
WIDE = "streamling_wide"
"""Meta key on a literal the rewriting computed: the marker of its type."""
GUARD = "streamling_guard"
"""Meta key on an ``IF(<branch taken>, arg, NULL)`` the rewriting put around an argument (`guard_branches`)."""


@dataclass
class Result:
    markers: dict[str, str | None] = field(default_factory=dict)
    """Output columns whose type is known: the marker for wide ones, None for others."""
    called: set[str] = field(default_factory=set)
    """Functions the rewriting called (Spark names)."""


def rewrite(
    tree: exp.Expression,
    schemas: Mapping[str, T.StructType],
    input_name: Callable[[exp.Table], str | None],
    where: str,
) -> Result:
    """Rewrite `tree` in place; `schemas` are the input nodes' by name, `input_name` names the input node a
    table reads (None for a CTE)."""
    if not _relevant(tree, schemas):
        return Result()
    return _Rewriter(schemas, input_name, where).run(tree)


def _relevant(tree: exp.Expression, schemas: Mapping[str, T.StructType]) -> bool:
    if any(call.name.lower() in NAMES for call in tree.find_all(exp.Anonymous)):
        return True
    return any(_marked(schema) for schema in schemas.values())


def _marked(data: T.DataType) -> bool:
    from pyspark.sql import types as T

    if isinstance(data, T.StructType):
        return any(WIDE_DECIMAL_KEY in (f.metadata or {}) or _marked(f.dataType) for f in data.fields)
    if isinstance(data, T.ArrayType):
        return _marked(data.elementType)
    if isinstance(data, T.MapType):
        return _marked(data.valueType)
    return False


def field_info(struct_field: T.StructField) -> Info:
    return Info(marker_type((struct_field.metadata or {}).get(WIDE_DECIMAL_KEY)), struct_field.dataType)


def mark(df: DataFrame, markers: Mapping[str, str | None]) -> DataFrame:
    """Put each output column's marker on `df` (and take a stale one off a column that holds text)."""
    for column in df.schema.fields:
        if column.name not in markers:
            continue
        marker = markers[column.name]
        have = (column.metadata or {}).get(WIDE_DECIMAL_KEY)
        if marker is not None and have != marker:
            df = df.withMetadata(column.name, {**(column.metadata or {}), WIDE_DECIMAL_KEY: marker})
        elif marker is None and have is not None:
            rest = {k: v for k, v in column.metadata.items() if k != WIDE_DECIMAL_KEY}
            df = df.withMetadata(column.name, rest)
    return df


def typed_literal(text: str, kind: WideType) -> exp.Literal:
    """A wide value computed at render time: its text, remembering its type (``to_u256('5')`` → ``'5'``)."""
    literal = exp.Literal.string(text)
    literal.meta[WIDE] = kind.marker
    return literal


def call(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _text(node: exp.Expression) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build("STRING"))


def _literal_text(node: exp.Expression) -> str | None:
    """The text of a number or string literal (``-5`` included), else None."""
    if isinstance(node, exp.Paren):
        return _literal_text(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name
    if isinstance(node, exp.Literal):
        return node.name
    return None


def _is_null(node: exp.Expression) -> bool:
    return isinstance(node, exp.Null) or (isinstance(node, exp.Paren) and _is_null(node.this))


class _Rewriter:
    def __init__(
        self, schemas: Mapping[str, T.StructType], input_name: Callable[[exp.Table], str | None], where: str
    ) -> None:
        self.schemas = schemas
        self.input_name = input_name
        self.where = where
        self.outputs: dict[int, dict[str, Info]] = {}
        self.result = Result()

    def fail(self, detail: str) -> StreamlingError:
        return StreamlingError.user(f"{self.where}: {detail}")

    def run(self, tree: exp.Expression) -> Result:
        try:
            scopes = list(traverse_scope(tree))
        except Exception:  # SQL sqlglot cannot scope: rewrite operators on calls only, columns unresolved
            scopes = []
        if not scopes:
            for node in reversed(list(tree.walk(bfs=False))):
                replacement = self._rewritten(node, None)
                if replacement is not None and replacement is not node:
                    node.replace(replacement)
                guard_branches(replacement or node)
            return self.result
        for scope in scopes:
            if isinstance(scope.expression, exp.Select):
                self._visit(scope.expression, scope, root=scope.expression)
            self.outputs[id(scope)] = self._outputs(scope)
        root = scopes[-1]
        for name, info in self.outputs[id(root)].items():
            self.result.markers[name] = info.wide.marker if info.wide else None
        return self.result

    # -- scopes and columns ------------------------------------------------------------------------

    def _outputs(self, scope: Scope) -> dict[str, Info]:
        node = scope.expression
        if isinstance(node, exp.SetOperation):
            first = scope.set_operation_scopes[0] if scope.set_operation_scopes else None
            return self.outputs.get(id(first), {}) if first is not None else {}
        if not isinstance(node, exp.Select):
            return {}
        out: dict[str, Info] = {}
        for projection in node.expressions:
            if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
                qualifier = projection.table if isinstance(projection, exp.Column) else ""
                for alias, source in scope.sources.items():
                    if not qualifier or alias.lower() == qualifier.lower():
                        out.update({k: v for k, v in self._source_columns(source).items() if k not in out})
                continue
            if isinstance(projection, exp.Alias | exp.Column) and projection.alias_or_name:
                # an unaliased expression's column is named by Spark, which we do not guess
                out[projection.alias_or_name] = self._info(projection, scope)
        return out

    def _source_columns(self, source: exp.Expression | Scope) -> dict[str, Info]:
        if isinstance(source, Scope):
            return self.outputs.get(id(source), {})
        if isinstance(source, exp.Table):
            node = self.input_name(source)
            schema = self.schemas.get(node) if node is not None else None
            if schema is not None:
                return {f.name: field_info(f) for f in schema.fields}
        return {}

    def _column(self, column: exp.Column, scope: Scope | None) -> Info:
        if scope is None or column.is_star:
            return UNKNOWN
        parts = [p.name for p in column.parts]
        sources = {alias.lower(): source for alias, source in scope.sources.items()}
        if len(parts) > 1 and parts[0].lower() in sources:
            candidates = [sources[parts[0].lower()]]
            parts = parts[1:]
        else:
            candidates = list(sources.values())
        for source in candidates:
            columns = {k.lower(): v for k, v in self._source_columns(source).items()}
            info = columns.get(parts[0].lower())
            if info is not None:
                return _path(info, parts[1:])
        return UNKNOWN

    # -- typing ------------------------------------------------------------------------------------

    def _info(self, node: exp.Expression, scope: Scope | None) -> Info:
        from pyspark.sql import types as T

        node = _unguarded(node)
        if WIDE in node.meta:
            return Info(marker_type(node.meta[WIDE]), T.StringType())
        if isinstance(node, exp.Alias | exp.Paren):
            return self._info(node.this, scope)
        if isinstance(node, exp.Column):
            return self._column(node, scope)
        if isinstance(node, exp.Dot):
            return _path(self._info(node.this, scope), [node.name]) if node.name else UNKNOWN
        if isinstance(node, exp.Anonymous):
            return Info(self._call_type(node, scope), None)
        if isinstance(node, exp.Literal):
            return Info(None, _literal_spark_type(node))
        if isinstance(node, exp.Cast):
            return Info(None, _spark_type(node.to))
        if isinstance(node, exp.Case | exp.If | exp.Coalesce):
            return Info(self._branches_type(node, scope), None)
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod | exp.Neg):
            parts = [self._info(child, scope).spark for child in (node.this, node.args.get("expression")) if child]
            if parts and all(isinstance(p, T.IntegralType) for p in parts):
                return Info(None, T.LongType())
        return UNKNOWN

    def _type(self, node: exp.Expression, scope: Scope | None) -> WideType | None:
        return self._info(node, scope).wide

    def _branches(self, node: exp.Expression) -> list[exp.Expression]:
        if isinstance(node, exp.Case):
            return [w.args["true"] for w in node.args.get("ifs") or []] + [node.args.get("default") or exp.Null()]
        if isinstance(node, exp.If):
            return [node.args["true"], node.args.get("false") or exp.Null()]
        return [node.this, *node.expressions]

    def _branches_type(self, node: exp.Expression, scope: Scope | None) -> WideType | None:
        """The common wide type of the branches when every one is wide, NULL or a literal of that type (which
        `_branches_converted` makes that type's text); None when one is text such as ``'n/a'``."""
        branches = [b for b in self._branches(node) if not _is_null(b)]
        literals = [text for b in branches if (text := _literal_text(b)) is not None and WIDE not in b.meta]
        types = [self._type(b, scope) for b in branches if _literal_text(b) is None or WIDE in b.meta]
        if not types or any(t is None for t in types):
            return None
        common = _common([t for t in types if t is not None])
        if common is None or not all(_converts(text, common) for text in literals):
            return None
        return common

    def _call_type(self, node: exp.Anonymous, scope: Scope | None) -> WideType | None:
        name = node.name.lower()
        args = node.expressions
        if name in _INTEGER_RESULT:
            return _INTEGER_RESULT[name]
        if name in _DECLARED and len(args) >= 3:
            precision, scale = decimals.literal_int(args[1]), decimals.literal_int(args[2])
            if precision is None or scale is None:
                return None
            if len(args) > 3 and scale == 0 and (_literal_text(args[3]) or "").lower() in (U256, I256):
                return WideType((_literal_text(args[3]) or "").lower())
            return decimal_type(precision, scale)
        if name in _DECIMAL_BINARY and len(args) == 2:
            left, right = (self._operand_type(a, scope) for a in args)
            if left is None or right is None:
                return None
            return _widen(_DECIMAL_BINARY[name], left, right)
        if name in _DECIMAL_UNARY and len(args) == 1:
            return self._operand_type(args[0], scope)
        if name == _ROUND and len(args) == 2:
            have, target = self._operand_type(args[0], scope), decimals.literal_int(args[1])
            if have is None or target is None:
                return None
            return decimal_type(max(have.precision, have.precision - have.scale + target), target)
        if name in _FROM_ARROW_DECIMAL and len(args) == 1:
            return self._arrow_decimal(node, scope)
        if name in _LISTS and len(args) >= 1:
            return self._type(args[0], scope)
        if name == _RESTAMP and len(args) == 2:
            return self._type(args[1], scope)
        if name == _LEGACY:
            return decimal_type(78, 0)
        if name in _EXTREMES and args:
            types = [self._operand_type(a, scope) for a in args if not _is_null(a)]
            return _common([t for t in types if t is not None]) if types and None not in types else None
        return None

    def _arrow_decimal(self, node: exp.Anonymous, scope: Scope | None) -> WideType | None:
        """The type ``to_decimal_arb_from_decimal128(x)``/``…256(x)`` keeps: x's own decimal(p,s) (a Spark
        decimal, or for ``…256`` a decimal_arb of at most 76 digits, Spark having no 256-bit decimal)."""
        from pyspark.sql import types as T

        most = _FROM_ARROW_DECIMAL[node.name.lower()]
        arg = _unguarded(node.expressions[0])
        have = self._type(arg, scope)
        if have is not None and have.kind == DECIMAL and have.precision <= most:
            return have
        spark = self._info(arg, scope).spark
        if isinstance(spark, T.DecimalType) and spark.precision <= most:
            return decimal_type(spark.precision, spark.scale)
        return None

    def _operand_type(self, node: exp.Expression, scope: Scope | None) -> WideType | None:
        """The decimal type of a decimal function's operand: a wide value's, or that of what `_to_decimal`
        converts operands into (a literal's digits, an integer cast to text)."""
        from pyspark.sql import types as T

        node = _unguarded(node)
        have = self._type(node, scope)
        if have is not None:
            return _as_decimal(have)
        literal = _literal_text(node)
        if literal is not None:
            try:
                return _literal_decimal(literal)[1]
            except StreamlingError:
                return None
        if isinstance(node, exp.Cast) and node.to.this in _TEXT_TYPES:
            spark = self._info(node.this, scope).spark
            if isinstance(spark, T.IntegralType):
                return decimal_type(_integer_digits().get(type(spark), 19), 0)
        return None

    # -- rewriting ---------------------------------------------------------------------------------

    def _visit(self, node: exp.Expression, scope: Scope | None, root: exp.Expression) -> None:
        """Rewrite `node`'s subtree inside its scope, children first (nested scopes were done before)."""
        for child in list(node.iter_expressions()):
            if child is not root and isinstance(
                child, exp.Subquery | exp.Select | exp.SetOperation | exp.With | exp.From | exp.Join | exp.Lateral
            ):
                continue
            self._visit(child, scope, root)
        replacement = self._rewritten(node, scope)
        if replacement is not None and replacement is not node:
            node.replace(replacement)
        guard_branches(replacement or node)

    def _rewritten(self, node: exp.Expression, scope: Scope | None) -> exp.Expression | None:
        if isinstance(node, exp.Anonymous) and node.name.lower() in NAMES:
            return self._function(node, scope)
        operation = _ARITHMETIC.get(type(node))
        if operation is not None:
            return self._arithmetic(operation, node.this, node.expression, node, scope)
        if isinstance(node, exp.Neg):
            return self._negation(node, scope)
        comparison = _COMPARISONS.get(type(node))
        if comparison is not None:
            return self._comparison(comparison, node.this, node.expression, node, scope)
        if isinstance(node, exp.Between):
            return self._between(node, scope)
        if isinstance(node, exp.In):
            return self._in(node, scope)
        if isinstance(node, exp.Cast | exp.TryCast) and node.to.this in _TEXT_TYPES:
            if self._type(node.this, scope) is not None:
                return _text(node.this)
        if isinstance(node, exp.Case | exp.If | exp.Coalesce):
            return self._branches_converted(node, scope)
        return None

    def _called(self, name: str, *args: exp.Expression) -> exp.Anonymous:
        self.result.called.add(name)
        return call(name, *args)

    def _function(self, node: exp.Anonymous, scope: Scope | None) -> exp.Expression | None:
        name = node.name.lower()
        args = list(node.expressions)
        if name in _FROM_ARROW_DECIMAL and len(args) == 1:
            return self._from_arrow_decimal(node, scope)
        if name == _RESTAMP and len(args) == 2:
            kind = self._type(args[1], scope)
            value = exp.Paren(this=args[0])
            if kind is not None:
                value.meta[WIDE] = kind.marker
            return value
        if name in (_ROUND, *_TO_PLAIN) and args:
            converted, _ = self._to_decimal(args[0], scope, node, loose=True)
            node.set("expressions", [converted, *args[1:]])
            return None
        if name in _LITERAL_TAIL:  # its literal precision and scale were checked with the call (`decimals.check`)
            if (
                name in ("decimal_arb_rescale", "decimal_arb_to_decimal256", _TO_DECIMAL128, *_FROM_ARROW_DECIMAL)
                and args
            ):
                # rounding to the declared scale, the narrowing casts take a value of any scale
                converted, _ = self._to_decimal(args[0], scope, node, loose=name != "decimal_arb_rescale")
                node.set("expressions", [converted, *args[1:]])
            if name == _TO_DECIMAL128 and len(args) == 3:
                precision, scale = decimals.literal_int(args[1]), decimals.literal_int(args[2])
                if precision is not None and scale is not None:
                    text = call(node.name, *node.expressions)
                    return exp.Cast(this=text, to=exp.DataType.build(f"DECIMAL({precision}, {scale})"))
            return None
        if name in _INTEGER_ARGUMENTS:
            kind = _INTEGER_ARGUMENTS[name]
            node.set("expressions", [self._to_integer(kind, a, scope, name) for a in args])
            if name in _TO_STRING:
                return _text(node.expressions[0]) if len(node.expressions) == 1 else None
            return None
        if name in _LISTS:
            return None
        if name in (
            *_DECIMAL_BINARY,
            *_DECIMAL_UNARY,
            *_EXTREMES,
            *_DECIMAL_COMPARISONS,
            "decimal_arb_to_string",
            _SORT_KEY,
        ):
            loose = name in _DECIMAL_COMPARISONS or name in ("decimal_arb_to_string", _SORT_KEY)
            node.set("expressions", [a if _is_null(a) else self._to_decimal(a, scope, node, loose)[0] for a in args])
            if name == "decimal_arb_to_string" and len(args) == 1 and self._type(node.expressions[0], scope):
                return _text(node.expressions[0])
            if name in _EXTREMES:
                self._common_scale(node, scope)
        return None

    def _from_arrow_decimal(self, node: exp.Anonymous, scope: Scope | None) -> exp.Expression:
        """``to_decimal_arb_from_decimal128(x)`` of a decimal(p,s): x as a decimal_arb of that type (a Spark
        decimal converted by ``to_decimal_arb``, a decimal_arb as it is); another value is refused here."""
        kind = self._arrow_decimal(node, scope)
        arg = node.expressions[0]
        if _is_null(arg):
            return arg
        if kind is None:
            most = _FROM_ARROW_DECIMAL[node.name.lower()]
            raise self.fail(
                f"function {node.name.lower()} takes a decimal(p,s) with p ≤ {most}, got {_sql(arg)}; give its "
                f"precision and scale as {node.name.lower()}(value, precision, scale)"
            )
        if self._type(_unguarded(arg), scope) is not None:
            value = exp.Paren(this=arg)
            value.meta[WIDE] = kind.marker
            return value
        precision, scale = exp.Literal.number(kind.precision), exp.Literal.number(kind.scale)
        return self._called("to_decimal_arb", arg, precision, scale)

    def _common_scale(self, node: exp.Anonymous, scope: Scope | None) -> None:
        """The arguments of greatest/least at one scale (that of the result), so the result's text has it."""
        common = self._call_type(node, scope)
        if common is None:
            return
        args = []
        for arg in node.expressions:
            kind = self._operand_type(arg, scope)
            literal = _literal_text(arg)
            if kind is None or kind.scale == common.scale:
                pass
            elif literal is not None:
                value = decimals.parse(literal, "to_decimal_arb")
                arg = exp.Literal.string(decimals.fit(value, common.precision, common.scale, "", literal))
            else:
                scale = exp.Literal.number(common.scale)
                arg = self._called("decimal_arb_rescale", arg, exp.Literal.number(common.precision), scale)
            args.append(arg)
        node.set("expressions", args)

    def _to_integer(self, kind: WideType, node: exp.Expression, scope: Scope | None, function: str) -> exp.Expression:
        """`node` as text of a `kind` integer: unchanged when it is one, a literal converted now, else a call."""
        from pyspark.sql import types as T

        have = self._type(node, scope)
        if _is_null(node) or (have is not None and have.kind == DECIMAL and have.scale == 0):
            return node  # the function reads an integral decimal's text as it is, checking its range
        if have == kind:
            try:
                folded = _folded(node, kind)
            except StreamlingError as exc:
                raise self.fail(f"{exc.message} in {_sql(node)}") from None
            return node if folded is None else typed_literal(folded, kind)
        literal = _literal_text(node)
        if literal is not None and have is None:
            try:
                return exp.Literal.string(str(to_int(literal, kind.kind == I256, f"to_{kind.kind}")))
            except StreamlingError as exc:
                raise self.fail(f"{exc.message} in {_sql(node.parent or node)}") from None
        spark = self._info(node, scope).spark
        if kind.kind == I256 and have is None and isinstance(spark, T.IntegralType):
            return _text(node)
        return self._called(f"to_{kind.kind}", node)

    def _to_decimal(
        self, node: exp.Expression, scope: Scope | None, context: exp.Expression, loose: bool = False
    ) -> tuple[exp.Expression, WideType | None]:
        """`node` as decimal text with its type. A value that is not a number, or (unless `loose`, as for
        comparisons, where the scale does not matter) whose scale is unknown, is an error."""
        from pyspark.sql import types as T

        have = self._type(node, scope)
        if have is not None:
            folded = _folded_decimal(node, have)
            return (node if folded is None else typed_literal(folded, have)), _as_decimal(have)
        literal = _literal_text(node)
        if literal is not None:
            try:
                text, kind = _literal_decimal(literal)
            except StreamlingError:
                raise self.fail(f"{literal!r} is not a number, in {_sql(context)}") from None
            return exp.Literal.string(text), kind
        spark = self._info(node, scope).spark
        if isinstance(spark, T.IntegralType):
            return _text(node), decimal_type(_integer_digits().get(type(spark), 19), 0)
        if isinstance(spark, T.DecimalType):
            converted = self._called(
                "to_decimal_arb", node, exp.Literal.number(spark.precision), exp.Literal.number(spark.scale)
            )
            return converted, decimal_type(spark.precision, spark.scale)
        if loose:
            return (node if isinstance(spark, T.StringType) else _text(node)), None
        raise self.fail(
            f"{_sql(node)} is used with decimal_arb values in {_sql(context)} but is not an integer or decimal of "
            "known scale; convert it with to_decimal_arb(value, precision, scale)"
        )

    def _arithmetic(
        self, operation: str, left: exp.Expression, right: exp.Expression, node: exp.Expression, scope: Scope | None
    ) -> exp.Expression | None:
        types = [self._type(left, scope), self._type(right, scope)]
        present = [t for t in types if t is not None]
        if not present:
            return None
        kinds = {t.kind for t in present if t.integer}
        if not kinds or any(t.kind == DECIMAL and t.scale > 0 for t in present):
            (a, _), (b, _) = self._to_decimal(left, scope, node), self._to_decimal(right, scope, node)
            return self._called(f"decimal_arb_{operation}", a, b)
        if len(kinds) > 1:
            raise self.fail(f"{_sql(node)} mixes u256 and i256 values; convert one side with to_i256(…) or to_u256(…)")
        kind = WideType(kinds.pop())  # an integral decimal(p,0) (Avro's 256-bit numbers) joins it
        name = f"{kind.kind}_{operation}"
        return self._called(name, self._to_integer(kind, left, scope, name), self._to_integer(kind, right, scope, name))

    def _negation(self, node: exp.Neg, scope: Scope | None) -> exp.Expression | None:
        kind = self._type(node.this, scope)
        if kind is None:
            return None
        if kind.kind == U256:
            raise self.fail(f"{_sql(node)}: a u256 cannot be negative; convert it with to_i256(…) first")
        return self._called("i256_neg" if kind.kind == I256 else "decimal_arb_neg", node.this)

    def _comparison(
        self, operation: str, left: exp.Expression, right: exp.Expression, node: exp.Expression, scope: Scope | None
    ) -> exp.Expression | None:
        types = [self._type(left, scope), self._type(right, scope)]
        if types == [None, None]:
            return None
        (a, left_type), (b, right_type) = (
            self._to_decimal(left, scope, node, loose=True),
            self._to_decimal(right, scope, node, loose=True),
        )
        if operation in ("eq", "neq") and left_type and right_type and left_type.scale == right_type.scale:
            text = exp.EQ(this=a, expression=b)
            return text if operation == "eq" else exp.NEQ(this=a, expression=b)
        return self._called(f"decimal_arb_{operation}", a, b)

    def _between(self, node: exp.Between, scope: Scope | None) -> exp.Expression | None:
        value, low, high = node.this, node.args["low"], node.args["high"]
        if all(self._type(n, scope) is None for n in (value, low, high)):
            return None
        lower = self._comparison("gte", value, low, node, scope) or exp.GTE(this=value, expression=low)
        upper = self._comparison("lte", value.copy(), high, node, scope) or exp.LTE(this=value, expression=high)
        return exp.Paren(this=exp.And(this=lower, expression=upper))

    def _in(self, node: exp.In, scope: Scope | None) -> exp.Expression | None:
        value, options = node.this, node.expressions
        if node.args.get("query") or not options:
            return None
        if all(self._type(n, scope) is None for n in (value, *options)):
            return None
        checks = [self._comparison("eq", value.copy(), option, node, scope) for option in options]
        combined: exp.Expression = checks[0] or exp.EQ(this=value.copy(), expression=options[0])
        for check, option in zip(checks[1:], options[1:], strict=True):
            combined = exp.Or(this=combined, expression=check or exp.EQ(this=value.copy(), expression=option))
        return exp.Paren(this=combined)

    def _branches_converted(self, node: exp.Expression, scope: Scope | None) -> exp.Expression | None:
        """CASE/IF/COALESCE mixing wide values with plain literals: the literals become text of the wide
        type (``coalesce(amount, 0)``), so the result is that type."""
        common = self._branches_type(node, scope)
        if common is None:
            return None
        for branch in self._branches(node):
            literal = _literal_text(branch)
            if _is_null(branch) or literal is None or WIDE in branch.meta:
                continue
            if common.integer:
                text = str(to_int(literal, common.kind == I256))
            else:
                text = decimals.fit(decimals.parse(literal, ""), common.precision, common.scale, "", literal)
            branch.replace(typed_literal(text, common))
        return None


def guard_branches(node: exp.Expression) -> None:
    """Spark evaluates a Python function for every row, also in a CASE/IF branch the row does not take, so
    ``CASE WHEN b > a THEN b - a ELSE 0 END`` would fail on the rows where ``b - a`` underflows. Each call of
    these functions in a branch gets its arguments as ``IF(<the branch is taken>, arg, NULL)``: NULL, so no
    error, where the branch is not taken (as the original, which evaluates only the branch taken)."""
    if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
        return  # a WHEN of a CASE: the CASE guards it
    for branch, guard in _branch_guards(node):
        calls = [c for c in branch.find_all(exp.Anonymous) if c.name.lower() in NAMES]
        for call in calls:
            declared = call.name.lower() in _LITERAL_TAIL
            call.set(
                "expressions",
                [
                    arg
                    if _is_null(arg)
                    or (declared and index > 0)  # precision, scale, kind: literals the function reads once
                    or (isinstance(arg, exp.Anonymous) and arg.name.lower() in NAMES)  # guarded itself
                    else _guarded(arg, guard)
                    for index, arg in enumerate(call.expressions)
                ],
            )


def _guarded(arg: exp.Expression, guard: exp.Expression) -> exp.If:
    node = exp.If(this=guard.copy(), true=arg, false=exp.Null())
    node.meta[GUARD] = True
    return node


def _unguarded(node: exp.Expression) -> exp.Expression:
    while GUARD in node.meta:
        node = node.args["true"]
    return node


def _branch_guards(node: exp.Expression) -> list[tuple[exp.Expression, exp.Expression]]:
    """Each branch of a CASE/IF with the condition under which it is the one taken."""
    if isinstance(node, exp.If) and node.args.get("true") is not None:
        out = [(node.args["true"], node.this)]
        if node.args.get("false") is not None:
            out.append((node.args["false"], _not_taken(node.this)))
        return out
    if not isinstance(node, exp.Case):
        return []
    subject = node.this
    out, earlier = [], []
    for when in node.args.get("ifs") or []:
        condition = when.this if subject is None else exp.EQ(this=subject.copy(), expression=when.this.copy())
        guard = exp.and_(condition.copy(), *[_not_taken(c) for c in earlier], copy=False)
        out.append((when.args["true"], guard))
        earlier.append(condition)
    if node.args.get("default") is not None and earlier:
        out.append((node.args["default"], exp.and_(*[_not_taken(c) for c in earlier], copy=False)))
    return out


def _not_taken(condition: exp.Expression) -> exp.Expression:
    return exp.not_(exp.Coalesce(this=exp.paren(condition.copy()), expressions=[exp.false()]))


def _converts(text: str, kind: WideType) -> bool:
    """Whether a literal is a value of `kind`."""
    try:
        if kind.integer:
            to_int(text, kind.kind == I256)
        else:
            decimals.fit(decimals.parse(text, ""), kind.precision, kind.scale, "", text)
    except StreamlingError:
        return False
    return True


def _literal_decimal(text: str) -> tuple[str, WideType]:
    """A number literal's decimal text and type (its own digits and scale)."""
    unscaled, scale = decimals.parse(text, "to_decimal_arb")
    return decimals.render(unscaled, scale), decimal_type(max(decimals.digit_count(unscaled), scale, 1), scale)


def _folded(node: exp.Expression, kind: WideType) -> str | None:
    """The text of ``to_u256(<literal>)``/``to_i256(<literal>)`` (computed once here, not per row)."""
    if not (isinstance(node, exp.Anonymous) and node.name.lower() == f"to_{kind.kind}" and len(node.expressions) == 1):
        return None
    literal = _literal_text(node.expressions[0])
    return None if literal is None else str(to_int(literal, kind.kind == I256, f"to_{kind.kind}"))


def _folded_decimal(node: exp.Expression, kind: WideType) -> str | None:
    """The text of ``to_decimal_arb('1.5', 10, 1)`` and the like with a literal value (computed once here)."""
    if not (isinstance(node, exp.Anonymous) and node.name.lower() in _DECLARED[:2] and kind.kind == DECIMAL):
        return None
    literal = _literal_text(node.expressions[0]) if node.expressions else None
    if literal is None or len(node.expressions) != 3:
        return None
    value = decimals.scaled_of(literal, node.name.lower())
    return decimals.fit(value, kind.precision, kind.scale, node.name.lower(), literal)


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect="spark")


def _path(info: Info, parts: list[str]) -> Info:
    """A struct member's info, following `parts` from a column's."""
    from pyspark.sql import types as T

    for part in parts:
        data = info.spark
        if not isinstance(data, T.StructType):
            return UNKNOWN
        match = next((f for f in data.fields if f.name.lower() == part.lower()), None)
        if match is None:
            return UNKNOWN
        info = field_info(match)
    return info


def _literal_spark_type(node: exp.Literal) -> T.DataType | None:
    from pyspark.sql import types as T

    if node.is_string:
        return T.StringType()
    text = node.name
    if text.isdigit():
        return T.IntegerType() if int(text) < 2**31 else T.LongType()
    return None


def _spark_type(data: exp.DataType) -> T.DataType | None:
    from pyspark.sql import types as T

    if data.this in _integer_types():
        return _integer_types()[data.this]
    if data.this in _TEXT_TYPES:
        return T.StringType()
    if data.this == exp.DataType.Type.DECIMAL:
        params = [int(p.name) for p in data.expressions if p.name.isdigit()]
        return T.DecimalType(*params[:2]) if params else T.DecimalType(10, 0)
    return None


def _as_decimal(kind: WideType | None) -> WideType | None:
    if kind is None or kind.kind == DECIMAL:
        return kind
    return decimal_type(78, 0)


def _widen(operation: str, left: WideType, right: WideType) -> WideType:
    """The type of a decimal operation's result (the usual SQL rules, precision capped at 65535)."""
    p1, s1, p2, s2 = left.precision, left.scale, right.precision, right.scale
    if operation in ("add", "sub"):
        scale = max(s1, s2)
        return decimal_type(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if operation == "mul":
        return decimal_type(p1 + p2 + 1, s1 + s2)
    if operation == "div":
        scale = max(s1, decimals.DIVISION_SCALE)
        return decimal_type(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)
    return decimal_type(min(p1 - s1, p2 - s2) + scale, scale)


def _common(types: list[WideType]) -> WideType | None:
    """One type holding each of `types`: the type when all are the same integer kind, else a decimal."""
    if not types:
        return None
    if all(t == types[0] for t in types):
        return types[0]
    if all(t.integer for t in types):
        return None  # u256 with i256: no common type
    as_decimals = [_as_decimal(t) for t in types]
    scale = max(t.scale for t in as_decimals if t)
    digits = max(t.precision - t.scale for t in as_decimals if t)
    return decimal_type(digits + scale, scale)
