"""How names and values appear in a message: quoted, escaped when they hold control characters, shortened.

Neutral (no YAML, no Spark), because every layer writes `Error:` lines naming a node, a field and a value.
"""

from __future__ import annotations


def shown(value: object, limit: int = 80) -> str:
    """`value` as repr, shortened to about `limit` characters for messages."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text)} characters)"


def quoted(text: str, limit: int = 80) -> str:
    """A name or value for a message: ``'text'``, or escaped like repr when it holds control characters or
    lone surrogates, shortened past `limit` characters."""
    if len(text) <= limit and text.isprintable() and not has_surrogate(text):
        return f"'{text}'"
    return shown(text, limit)


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)
