"""A ClickHouse table's name and the asset it is (`Operator.reads`/`writes`): ``db.table`` or a bare ``table`` in
the connection's database, the one rule the source, the sink, a hybrid's phases and the control plane share."""

from __future__ import annotations

from streamling.plugin import ExternalObject


def split_table_name(name: str, default_database: str) -> tuple[str, str]:
    """``"db.table"`` → ``("db", "table")``; ``"table"`` → ``(default_database, "table")``."""
    database, _, table = name.rpartition(".")
    return database or default_database, table


def table_object(database: str, table: str, connection: str | None = None) -> ExternalObject:
    """`connection`: the settings the database came from, when the pipeline named a bare table."""
    return ExternalObject(
        "clickhouse",
        (database, table),
        f"ClickHouse table `{database}.{table}`.",
        {"database": database, "table": table},
        connection=connection,
    )


def named_table_object(name: str, default_database: str, connection: str) -> ExternalObject:
    """The table a node names (``db.table``, or a bare ``table`` in `connection`'s database)."""
    return table_object(*split_table_name(name, default_database), None if "." in name else connection)
