"""Postgres plumbing shared by the Postgres sinks, dynamic tables and the state backend."""

from streamling.postgres.connection import connect, is_transient, reason, with_retries

__all__ = ["connect", "is_transient", "reason", "with_retries"]
