"""The settings reference, docs/settings.md, rendered from the settings model so it cannot drift from it.

Every field of `Settings` becomes one row: its dotted key (as a config file spells it), its type, its default (the
embedded defaults, ``default_config.yaml``, over the model's own), its ``STREAMLING__…`` variable and its
description, which is the field's attribute docstring. ``python -m streamling.config.reference`` prints the page,
``--write`` writes it into docs/settings.md; a unit test keeps the committed page equal to this output.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from streamling.config.layers import ENV_PREFIX, ENV_SEPARATOR, embedded_defaults, settings_from_document, synonyms
from streamling.config.model import Settings
from streamling.config.units import _to_ms, _to_sec

DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"
REGENERATE = "python -m streamling.config.reference --write"

MAPS = {"postgres_sink_connections": "node", "http_secret_header": "name", "http_secret_value": "name"}
"""Mappings keyed by a name the user picks: their entries are one row, the key shown as ``<node>`` or ``<name>``."""
OPTIONS = {"preprocessor_options": "id", "side_output_options": "id"}
LAYERED = {"dynamic_table_backend.postgres": "postgres_sink", "postgres_sink_connections.<node>": "postgres_sink"}
"""Sections whose fields left out are taken from another section rather than from the model's defaults."""

HEADER = f"""# Settings reference

<!-- Generated from the settings model (engine/streamling/config/model.py) by `{REGENERATE}`; do not edit. -->

Every setting of the engine, with its type, its default and its environment variable. How settings are layered
(embedded defaults < config file < `STREAMLING__…` variables), how values are written (durations such as `500ms`,
`5s`, `2m`; JSON for a value starting with `{{` or `[`) and what an invalid one reports are in
[Configuration](configuration.md#settings). The defaults are those of
[`default_config.yaml`](../engine/streamling/default_config.yaml); "unset" is no value (`null`).

A key is written as a config file nests it (`state_backend.postgres.host` is `host` under `postgres` under
`state_backend`); its variable joins the same names with `__` after the prefix `STREAMLING`, in any case.
"""


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def _section_model(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _unwrap(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _unit(metadata: list[Any]) -> str | None:
    for item in metadata:
        func = getattr(item, "func", None)
        if func is _to_sec:
            return "s"
        if func is _to_ms:
            return "ms"
    return None


def _bounds(metadata: list[Any]) -> str:
    low = high = None
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            low = f"> {item.gt}"
        elif isinstance(item, annotated_types.Ge):
            low = f"≥ {item.ge}"
        elif isinstance(item, annotated_types.Le):
            high = f"≤ {item.le}"
        elif isinstance(item, annotated_types.MinLen) and item.min_length:
            low = "not empty"
    return ", ".join(b for b in (low, high) if b)


def _type(field: FieldInfo) -> str:
    inner, _ = _unwrap(field.annotation)
    metadata = list(field.metadata)
    if typing.get_origin(inner) is typing.Annotated:
        base, *extra = typing.get_args(inner)
        inner, metadata = base, [*metadata, *extra]
    unit = _unit(metadata)
    if unit is not None:
        text = "duration, seconds" if unit == "s" else "duration, milliseconds"
    elif typing.get_origin(inner) is Literal:
        text = " \\| ".join(f"`{v}`" for v in typing.get_args(inner))
    elif inner is SecretStr:
        text = "secret string"
    elif typing.get_origin(inner) is list:
        text = "list of strings"
    elif typing.get_origin(inner) is dict:
        text = "mapping"
    elif inner is bool:
        text = "boolean"
    elif inner is int:
        text = "integer"
    elif inner is float:
        text = "number"
    elif inner is str:
        text = "string"
    else:
        names = [getattr(a, "__name__", str(a)) for a in typing.get_args(inner)] or [getattr(inner, "__name__", "")]
        text = " or ".join("date-time" if n == "datetime" else "integer" if n == "int" else n for n in names)
    bounds = _bounds(metadata)
    return text + (f" ({bounds})" if bounds else "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _default(value: Any, field: FieldInfo) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        # A page that is committed and published never carries a secret, even a default one: only whether it is set.
        return "set" if value.get_secret_value() else "empty"
    unit = _unit(list(field.metadata))
    if unit is not None and isinstance(value, int | float) and not isinstance(value, bool):
        return f"`{_number(value)}{'ms' if unit == 'ms' else 's'}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{_number(value)}`"
    if value == "":
        return "empty"
    if isinstance(value, list | dict):
        return f"`{value!r}`".replace("'", '"') if value else ("`[]`" if isinstance(value, list) else "`{}`")
    return f"`{value}`"


def _describe(text: str | None) -> str:
    return " ".join(inspect.cleandoc(text).split()).replace("``", "`").replace("|", "\\|") if text else ""


def _env(parts: list[str]) -> str:
    return "`" + ENV_SEPARATOR.join([ENV_PREFIX, *(p.upper() for p in parts)]) + "`"


def _spellings(parts: list[str]) -> dict[str, str]:
    """The section's other spellings of its keys, by the section's own (``{"database": "db"}``): the inverse of
    `layers.synonyms`, which maps the other way for reading a layer."""
    return {canonical: other for other, canonical in synonyms(tuple(parts)).items()}


def _keys(section: str) -> set[str]:
    """The keys of a top-level section, as a config file spells them."""
    model = _section_model(Settings.model_fields[section].annotation)
    return {field.alias or name for name, field in model.model_fields.items()} if model else set()


class _Row(typing.NamedTuple):
    key: str
    type: str
    default: str
    env: str
    description: str

    def line(self) -> str:
        return f"| `{self.key}` | {self.type} | {self.default} | {self.env} | {self.description} |"


class _Section(typing.NamedTuple):
    """A nested section waiting for its table: its key's parts, its model, the field holding it (whose description
    introduces it) and its default values (None under a map, whose entries have none)."""

    parts: list[str]
    model: type[BaseModel]
    field: FieldInfo
    values: Any


def _rows(model: type[BaseModel], values: Any, parts: list[str], sections: list[_Section]) -> list[_Row]:
    rows = []
    dotted = ".".join(parts)
    spellings = _spellings(["*" if p.startswith("<") else p for p in parts])
    for name, field in model.model_fields.items():
        key = field.alias or name
        sub = _section_model(field.annotation)
        if sub is not None:
            sections.append(_Section([*parts, key], sub, field, getattr(values, name) if values is not None else None))
            continue
        value = getattr(values, name) if values is not None else field.get_default(call_default_factory=True)
        default = "required" if field.is_required() else _default(value, field)
        if dotted in LAYERED and key in _keys(LAYERED[dotted]):
            default = f"`{LAYERED[dotted]}.{key}`"
        description = _describe(field.description)
        other = spellings.get(key)
        if other:
            description += f" Also spelled `{other}`."
        inner, _ = _unwrap(field.annotation)
        if key in MAPS and typing.get_origin(inner) is dict:
            value_type = typing.get_args(inner)[1]
            placeholder = f"<{MAPS[key]}>"
            if isinstance(value_type, type) and issubclass(value_type, BaseModel):
                rows.append(
                    _Row(
                        f"{'.'.join([*parts, key, placeholder])}.<field>",
                        f"the fields of `{LAYERED[f'{key}.{placeholder}']}`",
                        "unset",
                        _env([*parts, key, placeholder.upper(), "<FIELD>"]),
                        description,
                    )
                )
            else:
                value_name = "secret string" if value_type is SecretStr else "string"
                rows.append(
                    _Row(
                        ".".join([*parts, key, placeholder]),
                        value_name,
                        "unset",
                        _env([*parts, key, "<NAME>"]),
                        description,
                    )
                )
            continue
        if key in OPTIONS:
            placeholder = f"<{OPTIONS[key]}>"
            rows.append(
                _Row(".".join([*parts, key, placeholder]), "mapping", "unset", _env([*parts, key]), description)
            )
            continue
        rows.append(_Row(".".join([*parts, key]), _type(field), default, _env([*parts, key]), description))
    return rows


def _section_text(model: type[BaseModel], field: FieldInfo | None) -> str:
    """The section's field description, else its class docstring."""
    if field is not None and field.description:
        return _describe(field.description)
    return _describe(model.__doc__) if model.__doc__ and model.__doc__ is not BaseModel.__doc__ else ""


def markdown() -> str:
    """The whole docs/settings.md page."""
    # The embedded defaults alone: `load_settings` would also read a config.yaml in the current directory, whose
    # values (a password among them) do not belong on the page.
    defaults = settings_from_document(embedded_defaults())
    pending: list[_Section] = []
    out = [HEADER, "## Top level", "", *_table(Settings, defaults, [], pending)]
    while pending:
        section = pending.pop(0)
        nested: list[_Section] = []
        out += ["", f"## `{'.'.join(section.parts)}`", ""]
        intro = _section_text(section.model, section.field)
        if intro:
            out += [intro, ""]
        out += _table(section.model, section.values, section.parts, nested)
        pending[:0] = nested
    return "\n".join(out) + "\n"


def _table(model: type[BaseModel], values: Any, parts: list[str], sections: list[_Section]) -> list[str]:
    rows = _rows(model, values, parts, sections)
    if not rows:
        return []
    return [
        "| key | type | default | variable | description |",
        "|---|---|---|---|---|",
        *(row.line() for row in rows),
    ]


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        DOC.write_text(markdown())
        print(f"wrote {DOC}")
        return 0
    if argv:
        print(f"usage: {REGENERATE.removesuffix(' --write')} [--write]", file=sys.stderr)
        return 2
    print(markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
