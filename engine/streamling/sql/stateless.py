"""The stateless guard: a SQL transform sees one epoch at a time, so anything that needs rows from
other epochs (aggregates, joins, ordering, limits, distinct, windows) would be silently wrong. The
analysed Spark plan is checked against an allow-list before the pipeline runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


ALLOWED = frozenset(
    {
        "Project",
        "Filter",
        "SubqueryAlias",
        "Union",
        "Generate",
        "View",
        "LocalRelation",
        "LogicalRDD",
        "LogicalRelation",
        "OneRowRelation",
        "ResolvedHint",
        "WithCTE",
        "CTERelationDef",
        "CTERelationRef",
        "Range",
    }
)
FORBIDDEN = {
    "Aggregate": "aggregation (GROUP BY or an aggregate function)",
    "Join": "join",
    "LateralJoin": "join",
    "Sort": "ORDER BY",
    "GlobalLimit": "LIMIT",
    "LocalLimit": "LIMIT",
    "Offset": "OFFSET",
    "Tail": "LIMIT",
    "Window": "window function",
    "Distinct": "DISTINCT (a UNION without ALL is a DISTINCT too; use UNION ALL)",
    "Deduplicate": "DISTINCT",
    "Intersect": "INTERSECT",
    "Except": "EXCEPT",
    "Expand": "GROUPING SETS / ROLLUP / CUBE",
    "Sample": "TABLESAMPLE",
    "Repartition": "repartition hint",
    "RepartitionByExpression": "repartition hint",
}


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def forbidden_operations(df: DataFrame) -> list[str]:
    """User-facing names of the stateful or unsupported operations in `df`'s analysed plan."""
    found: list[str] = []
    stack = [df._jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        name = node.nodeName()
        if name not in ALLOWED:
            label = FORBIDDEN.get(name, f"operation '{name}'")
            if label not in found:
                found.append(label)
        if _seq(node.subqueries()) and "subquery expression" not in found:
            found.append("subquery expression")
        stack.extend(_seq(node.children()))
        if name == "WithCTE":
            stack.extend(_seq(node.cteDefs()))
    return found
