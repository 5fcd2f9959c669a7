"""Identifier rules every SQL destination shares; neutral (no driver imports), so specs can validate names
without loading psycopg."""

from __future__ import annotations

from collections.abc import Sequence

from streamling.core.messages import quoted

MAX_IDENTIFIER_BYTES = 63
"""Postgres truncates longer names silently, so a table created under a long name is not found under it."""


def check_identifier(name: str, limit: int = MAX_IDENTIFIER_BYTES) -> str:
    """For spec validators: `name` as a Postgres identifier (always quoted, so any other character is fine)."""
    if "\x00" in name:
        raise ValueError("holds a NUL character, which Postgres names cannot")
    if len(name.encode()) > limit:
        raise ValueError(f"must be at most {limit} bytes (a Postgres identifier)")
    return name


def identifier_errors(
    label: str, what: str, names: Sequence[str], advice: str = "rename it in a transform"
) -> list[str]:
    """Validation errors for names of columns the sink would create."""
    errors = []
    for name in names:
        try:
            check_identifier(name)
        except ValueError as exc:
            errors.append(f"{label}: {what} {quoted(name)} {exc}; {advice}")
    return errors
