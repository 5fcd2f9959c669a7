"""State backends behind one interface; `open_state_backend` picks one from settings."""

from __future__ import annotations

from streamling.config.model import StateBackendSettings
from streamling.state.base import Fence, JsonDoc, LeaseHolder, StateBackend, epoch_key, phase_key
from streamling.state.memory import InMemoryStateBackend


def open_state_backend(settings: StateBackendSettings, namespace: str) -> StateBackend:
    if settings.backend_type == "Sqlite":
        from streamling.state.sqlite import SqliteStateBackend

        return SqliteStateBackend(namespace, settings.sqlite.database_path)
    if settings.backend_type == "Postgres":
        from streamling.state.postgres import PostgresStateBackend

        return PostgresStateBackend(namespace, settings.postgres)
    return InMemoryStateBackend(namespace)


__all__ = [
    "Fence",
    "InMemoryStateBackend",
    "JsonDoc",
    "LeaseHolder",
    "StateBackend",
    "epoch_key",
    "open_state_backend",
    "phase_key",
]
