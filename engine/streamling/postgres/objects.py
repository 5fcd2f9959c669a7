"""A Postgres table as the control plane sees it (`Operator.reads`/`writes`): keyed by the database (dbname) of the
node's connection settings, its schema and its table, as every Postgres node names it."""

from __future__ import annotations

from streamling.plugin import ExternalObject


def table_object(database: str, schema: str, table: str) -> ExternalObject:
    return ExternalObject(
        "postgres",
        (database, schema, table),
        f"Postgres table `{schema}.{table}` in database `{database}`.",
        {"database": database, "schema": schema, "table": table},
    )
