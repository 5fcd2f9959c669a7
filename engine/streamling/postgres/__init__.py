"""Postgres plumbing shared by the Postgres sinks, dynamic tables, dead letters and the state backend."""

from streamling.postgres.connection import connection, is_transient, reason, transact, with_retries

__all__ = ["connection", "is_transient", "reason", "transact", "with_retries"]
