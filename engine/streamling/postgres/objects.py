"""A Postgres table as the control plane sees it (`Operator.reads`/`writes`): the database (dbname) of the node's
connection settings, its schema and its table, as every Postgres node names it. The database comes from the
environment, so the object names its `connection`, and asset keys use a logical name for it."""

from __future__ import annotations

from streamling.plugin import ExternalObject


def table_object(database: str, schema: str, table: str, connection: str) -> ExternalObject:
    """`connection`: the settings the database came from (``postgres_sink``, ``postgres_sink_connections.<node>``,
    ``dynamic_table_backend.postgres``)."""
    return ExternalObject(
        "postgres",
        (database, schema, table),
        f"Postgres table `{schema}.{table}` in database `{database}`.",
        {"database": database, "schema": schema, "table": table},
        connection=connection,
    )
