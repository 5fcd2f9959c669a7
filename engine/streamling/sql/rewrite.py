"""Compile a transform's SQL once: parse it (the original's Postgres-like dialect first, Spark SQL as a
fallback), find the nodes it reads, and render Spark SQL for an epoch.

Rendering maps node names — dotted ones included, as in ``FROM raw.transactions`` — to the epoch's
temporary views, makes sure every SELECT carries ``_gs_op`` exactly once, pins ``now()`` to the
epoch's timestamp so every sink of an epoch sees the same value, and turns
``dynamic_table_check('t', value)`` into a call of the Spark UDF registered for dynamic table ``t``;
operators on 256-bit integers and wide decimals become exact function calls (`numeric_rewrite`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.sql.dialects import DIALECTS
from streamling.sql.functions import numeric_rewrite
from streamling.sql.functions.calls import Rewritten, rewrite_calls

if TYPE_CHECKING:
    from pyspark.sql import types as T

_RENAMED_FUNCTIONS = {"make_array": exp.Array}
DYNAMIC_TABLE_CHECK = "dynamic_table_check"
MAP_CALL = "streamling_map"
"""Meta key on each two-argument ``map(…)`` of the parsed query: its index, so a copy's call is found again."""


def spark_name(node: str) -> str:
    """A node name as part of a Spark temporary view or function name: ASCII letters, digits and underscores
    (Spark rejects others, `ö` included), plus a digest of the name so `a-b` and `a_b` never share one."""
    readable = re.sub(r"[^A-Za-z0-9_]", "_", node)[:40]
    return f"{readable}_{hashlib.sha1(node.encode()).hexdigest()[:8]}"


def undefined_dynamic_table(name: str) -> str:
    return f"dynamic table '{name}' is used in SQL transform but not defined in pipeline topology"


def table_name(table: exp.Table) -> str:
    return ".".join(part.name for part in table.parts)


class SqlProgram:
    def __init__(self, sql: str, where: str) -> None:
        self.where = where
        self.tree = self._parse(sql)
        self._cte_names = {cte.alias_or_name for cte in self.tree.find_all(exp.CTE)}
        self.references = sorted({table_name(t) for t in self.tree.find_all(exp.Table) if self._is_input(t)})
        self.dynamic_tables = sorted({self._checked_table(call) for call in self._checks(self.tree)})
        """Dynamic tables the SQL looks values up in with ``dynamic_table_check``."""
        self._rewritten: exp.Query | None = None
        self._calls = Rewritten([], [])
        self._numeric_calls: set[str] = set()
        self._pair_maps: dict[tuple[tuple[str, str], ...], frozenset[int]] = {}
        """Per set of input schemas, the ``map(…)`` calls (`MAP_CALL`) that take one key and its value."""
        self.output_types: dict[str, str | None] = {}
        """Output columns whose type the last `render` knew: the wide-number marker (``u256``, ``i256``,
        ``decimal(p,s)``) or None for a plain column; `numeric_rewrite.mark` puts them on the result."""

    @property
    def rewritten(self) -> exp.Query:
        """The query with catalogue functions rewritten for Spark (done once, on first use, so parsing a spec
        for its inputs never fails on a function call: ``--validate`` reports those naming the node)."""
        if self._rewritten is None:
            tree = self.tree.copy()
            self._calls = rewrite_calls(tree, self.where)
            for index, node in enumerate(tree.find_all(exp.Map)):
                node.meta[MAP_CALL] = index
            self._rewritten = tree
        return self._rewritten

    @property
    def calls(self) -> Rewritten:
        _ = self.rewritten
        return self._calls

    @property
    def called(self) -> list[str]:
        """Functions Spark must have registered: Arrow catalogue functions and plugins' (by Spark name);
        after a `render`, also those its rewriting of operators on wide numbers calls."""
        return sorted(set(self.calls.called) | self._numeric_calls)

    def _parse(self, sql: str) -> exp.Query:
        last: Exception | None = None
        for dialect in DIALECTS:
            try:
                statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
            except SqlglotError as exc:
                last = exc
                continue
            except RecursionError:
                raise StreamlingError.user(f"{self.where}: invalid SQL: nested too deeply to parse") from None
            if len(statements) != 1 or not isinstance(statements[0], exp.Query):
                raise StreamlingError.user(f"{self.where}: SQL must be exactly one SELECT statement")
            return statements[0]
        detail = str(last).splitlines()[0] if last else "unparseable"
        raise StreamlingError.user(f"{self.where}: invalid SQL: {detail}")

    def _input_name(self, table: exp.Table) -> str | None:
        return table_name(table) if self._is_input(table) else None

    def _is_input(self, table: exp.Table) -> bool:
        name = table_name(table)
        return bool(name) and not (len(table.parts) == 1 and name in self._cte_names)

    @staticmethod
    def _checks(tree: exp.Expression) -> list[exp.Anonymous]:
        return [call for call in tree.find_all(exp.Anonymous) if call.name.lower() == DYNAMIC_TABLE_CHECK]

    def _checked_table(self, call: exp.Anonymous) -> str:
        args = call.expressions
        if len(args) != 2 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            raise StreamlingError.user(
                f"{self.where}: dynamic_table_check takes a dynamic table name as a string literal and a value, "
                f"as in dynamic_table_check('watchlist', address); got {call.sql(dialect='spark')}"
            )
        return args[0].name

    def render(
        self,
        views: Mapping[str, str],
        epoch_ms: int | None = None,
        checks: Mapping[str, str] | None = None,
        tree: exp.Query | None = None,
        schemas: Mapping[str, T.StructType] | None = None,
    ) -> str:
        """Spark SQL reading `views` (node name → view name) with ``now()`` fixed to `epoch_ms`, and each
        ``dynamic_table_check('t', v)`` calling the UDF `checks` names for ``t`` (as ``udf(v)``). `tree` is a
        variant of `rewritten` to render instead (a diagnostic probe). `schemas` (node name → schema) tell
        which input columns hold wide numbers, whose operators become exact functions (`numeric_rewrite`);
        the output columns' types are left in `output_types`."""
        tree = (tree or self.rewritten).copy()
        numbers = numeric_rewrite.rewrite(tree, schemas or {}, self._input_name, self.where)
        self.output_types = numbers.markers
        self._numeric_calls |= numbers.called
        self._resolve_maps(tree, schemas or {})
        for call in self._checks(tree):
            table = self._checked_table(call)
            if checks is None:
                raise StreamlingError.user(f"{self.where}: dynamic_table_check is only available in SQL transforms")
            function = checks.get(table)
            if function is None:
                raise StreamlingError.user(f"{self.where}: {undefined_dynamic_table(table)}")
            call.replace(exp.Anonymous(this=function, expressions=[call.expressions[1]]))
        for table in list(tree.find_all(exp.Table)):
            if not self._is_input(table):
                continue
            name = table_name(table)
            view = views.get(name)
            if view is None:
                raise StreamlingError.user(f"{self.where}: SQL references unknown node '{name}'")
            alias = table.alias or table.name
            replacement = exp.Table(this=exp.to_identifier(view, quoted=True))
            replacement.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
            table.replace(replacement)
        for call in list(tree.find_all(exp.Anonymous)):
            target = _RENAMED_FUNCTIONS.get(call.name.lower())
            if target is not None:
                call.replace(target(expressions=list(call.expressions)))
        if epoch_ms is not None:
            moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
            for node in list(tree.find_all(exp.CurrentTimestamp)):
                node.replace(exp.cast(exp.Literal.string(moment.strftime("%Y-%m-%d %H:%M:%S.%f")), "TIMESTAMP"))
            for node in list(tree.find_all(exp.CurrentDate)):
                node.replace(exp.cast(exp.Literal.string(moment.strftime("%Y-%m-%d")), "DATE"))
            for node in list(tree.find_all(exp.CurrentTime)):
                pinned = exp.Literal.string(moment.strftime("%H:%M:%S.%f"))
                node.replace(exp.Anonymous(this="to_time", expressions=[pinned]))
        _ensure_gs_op(tree)
        return tree.sql(dialect="spark")

    def _resolve_maps(self, tree: exp.Query, schemas: Mapping[str, T.StructType]) -> None:
        """DataFusion's ``map(keys, values)`` takes two arrays, or one key and its value (``map('k', 'v')``):
        Spark's ``map_from_arrays(keys, values)`` for the first, ``map(k, v)`` for the second. The types decide,
        known once the input schemas are: a call with an argument known not to be an array (a literal, a
        column, an expression sqlglot can type) and none known to be one becomes ``map(k, v)``; the others
        stay ``map_from_arrays`` (arrays, or types nothing here can tell, as before). Decided once per set of
        schemas, as rendering runs every epoch."""
        calls = [node for node in tree.find_all(exp.Map) if MAP_CALL in node.meta]
        if not calls:
            return
        key = tuple(sorted((name, schema.simpleString()) for name, schema in schemas.items()))
        pairs = self._pair_maps.get(key)
        if pairs is None:
            pairs = self._pair_maps[key] = _pair_maps(tree, schemas, self._is_input)
        for node in calls:
            if node.meta[MAP_CALL] in pairs:
                keys, values = node.args.get("keys"), node.args.get("values")
                node.replace(exp.VarMap(keys=exp.Array(expressions=[keys]), values=exp.Array(expressions=[values])))


def _pair_maps(
    tree: exp.Query, schemas: Mapping[str, T.StructType], is_input: Callable[[exp.Table], bool]
) -> frozenset[int]:
    """The `MAP_CALL` indexes of the ``map(…)`` calls in `tree` whose arguments are a key and its value."""
    probe = tree.copy()
    tables: dict[str, dict[str, str]] = {}
    for table in list(probe.find_all(exp.Table)):
        if not is_input(table):
            continue
        name = table_name(table)
        alias = f"__sl_map_{len(tables)}"
        fields = schemas[name].fields if name in schemas else []
        tables[alias] = {f.name: _sqlglot_type(f.dataType) for f in fields}
        replacement = exp.Table(this=exp.to_identifier(alias))
        replacement.set("alias", exp.TableAlias(this=exp.to_identifier(table.alias or table.name)))
        table.replace(replacement)
    try:
        typed = qualify(probe, schema=tables, dialect="spark", validate_qualify_columns=False)
        typed = annotate_types(typed, schema=tables, dialect="spark")
    except Exception:  # a query sqlglot cannot qualify: literals and typed expressions still tell
        try:
            typed = annotate_types(tree.copy(), dialect="spark")
        except Exception:  # nor type: every call stays map_from_arrays, as before
            return frozenset()
    pairs = set()
    for node in typed.find_all(exp.Map):
        kinds = [_is_array(node.args.get(part)) for part in ("keys", "values")]
        if False in kinds and True not in kinds and MAP_CALL in node.meta:
            pairs.add(node.meta[MAP_CALL])
    return frozenset(pairs)


def _is_array(node: exp.Expression | None) -> bool | None:
    """Whether an annotated expression is an array: None when its type is unknown (or NULL)."""
    kind = node.type if node is not None else None
    if kind is None or kind.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return None
    return kind.this in (exp.DataType.Type.ARRAY, exp.DataType.Type.LIST)


def _sqlglot_type(data: T.DataType) -> str:
    """A Spark type as a type sqlglot reads (``array<string>``), or ``unknown`` for one it cannot."""
    from pyspark.sql import types as T

    try:
        exp.DataType.build(data.simpleString(), dialect="spark")
    except Exception:
        return "array<unknown>" if isinstance(data, T.ArrayType) else "unknown"
    return data.simpleString()


def _stateful(select: exp.Select) -> bool:
    if select.args.get("joins") or select.args.get("group"):
        return True
    return any(
        agg.find_ancestor(exp.Window) is None
        for projection in select.expressions
        for agg in projection.find_all(exp.AggFunc)
    )


def _is_star(projection: exp.Expression) -> bool:
    return isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star)


def _star_of(projection: exp.Expression) -> exp.Star:
    """The Star node of ``*`` or ``t.*`` (where its ``EXCEPT`` list lives)."""
    return projection if isinstance(projection, exp.Star) else projection.this


def _excludes_gs_op(star: exp.Expression) -> bool:
    return any(c.name == GS_OP for c in _star_of(star).args.get("except_") or [])


def _exclude_gs_op(star: exp.Expression) -> None:
    node = _star_of(star)
    node.set("except_", [*(node.args.get("except_") or []), exp.column(GS_OP)])


def _is_input_gs_op(projection: exp.Expression) -> bool:
    """``_gs_op``, ``t._gs_op`` or ``_gs_op AS _gs_op``: the input's own operation, not a new value."""
    inner = projection.this if isinstance(projection, exp.Alias) else projection
    return isinstance(inner, exp.Column) and inner.name == GS_OP


def _ensure_gs_op(query: exp.Expression) -> None:
    """Give every row-producing SELECT exactly one ``_gs_op``: kept from its input when the projection
    omits it, ``'i'`` when the SELECT has no input carrying one (a constant SELECT or VALUES), and an
    explicit value (``'d' AS _gs_op``) kept even next to a star, which then leaves its input's out."""
    with_ = query.args.get("with_") or query.args.get("with")
    if with_ is not None:
        for cte in with_.expressions:
            _ensure_gs_op(cte.this)
    if isinstance(query, exp.Subquery | exp.Paren):
        _ensure_gs_op(query.this)
        return
    if isinstance(query, exp.SetOperation):
        _ensure_gs_op(query.this)
        _ensure_gs_op(query.expression)
        _gs_op_last_in_star_branches(query)
        return
    if not isinstance(query, exp.Select) or _stateful(query):
        return  # rejected by the stateless guard, which gives the clearer error
    source = query.args.get("from_") or query.args.get("from")
    if source is not None:
        _ensure_gs_op(source.this)
    carries = _reads_gs_op(query)
    carrying = _carrying_stars(query)
    explicit = _explicit_gs_op(query)
    chosen = next((p for p in explicit if not (carrying and _is_input_gs_op(p))), None)
    for p in explicit:
        if p is not chosen:
            p.pop()
    if chosen is not None:
        if carrying:  # the star must not carry the input's _gs_op too: it goes, and the value comes last
            for star in carrying:
                _exclude_gs_op(star)
            chosen.pop()
            query.select(chosen, copy=False)
        return
    if carrying:
        return
    query.select(exp.column(GS_OP) if carries else exp.alias_(exp.Literal.string("i"), GS_OP), copy=False)


def _reads_gs_op(select: exp.Select) -> bool:
    """Whether the SELECT's input carries ``_gs_op``: a node, a CTE or a query (each given one), not VALUES."""
    source = select.args.get("from_") or select.args.get("from")
    inner = source.this if source is not None else None
    while isinstance(inner, exp.Subquery | exp.Paren):
        inner = inner.this
    return isinstance(inner, exp.Table | exp.Select | exp.SetOperation)


def _carrying_stars(select: exp.Select) -> list[exp.Expression]:
    """The stars that bring the input's ``_gs_op`` along."""
    if not _reads_gs_op(select):
        return []
    return [p for p in select.expressions if _is_star(p) and not _excludes_gs_op(p)]


def _explicit_gs_op(select: exp.Select) -> list[exp.Expression]:
    return [p for p in select.expressions if not _is_star(p) and p.alias_or_name == GS_OP]


def _gs_op_last_in_star_branches(query: exp.Expression) -> None:
    """Spark unions by position, and a star puts ``_gs_op`` wherever its input has it, while an explicit
    ``_gs_op`` next to a star comes last: so in a set operation every star branch takes ``_gs_op`` last."""
    if isinstance(query, exp.Subquery | exp.Paren):
        _gs_op_last_in_star_branches(query.this)
    elif isinstance(query, exp.SetOperation):
        _gs_op_last_in_star_branches(query.this)
        _gs_op_last_in_star_branches(query.expression)
    elif isinstance(query, exp.Select) and not _stateful(query):
        carrying = _carrying_stars(query)
        if carrying and not _explicit_gs_op(query):
            for star in carrying:
                _exclude_gs_op(star)
            query.select(exp.column(GS_OP), copy=False)
