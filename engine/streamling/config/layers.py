"""Configuration layering: embedded defaults < config file < ``STREAMLING__...`` environment variables.

Each value remembers where it came from so a bad value is reported with its origin
(``STREAMLING__CHECKPOINT_INTERVAL_SEC``, ``config.yaml``) as well as the field and the value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr, ValidationError
from pydantic_core import to_jsonable_python

from streamling.config import yaml_input
from streamling.config.model import Settings
from streamling.errors import StreamlingError

ENV_PREFIX = "STREAMLING"
ENV_SEPARATOR = "__"
CONFIG_EXTENSIONS = (".yaml", ".yml", ".json")
SECRET_FIELDS = ("password", "pass", "secret", "token")
LITERAL_SECTIONS = ("http_secret_header", "http_secret_value")
"""Sections whose environment values are always literal text, even when they look like JSON."""
SECTION_ERRORS = ("model_type", "model_attributes_type", "dict_type")
"""Pydantic errors of a value given where a section or map belongs: the value is not repeated in the message."""
SYNONYMS: dict[tuple[str, ...], dict[str, str]] = {
    ("state_backend", "postgres"): {"db": "database", "pass": "password"},
    ("postgres_sink",): {"database": "db", "password": "pass"},
    ("dynamic_table_backend", "postgres"): {"database": "db", "password": "pass"},
    ("postgres_sink_connections", "*"): {"database": "db", "password": "pass"},
    ("clickhouse_source",): {"block_range": "sort_key_range"},
}
"""Keys spelled two ways: the original names the state backend's and the dynamic tables' database ``db`` with
``password``, and the sinks' ``db`` with ``pass``; ``block_range`` is its older name of ``sort_key_range``. Each
layer's spelling is turned into the section's own before layers are merged, so a later layer's ``db`` overrides an
earlier ``database``."""


def embedded_defaults() -> dict[str, Any]:
    text = resources.files("streamling").joinpath("default_config.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text) or {}


def find_config_file(name_or_path: str | os.PathLike[str] | None) -> Path | None:
    """Resolve ``--config``: the path itself, else with .yaml/.yml/.json appended; None when nothing exists."""
    base = Path(name_or_path) if name_or_path else Path("config")
    candidates = [base] if base.suffix in CONFIG_EXTENSIONS else []
    candidates += [base.with_name(base.name + ext) for ext in CONFIG_EXTENSIONS]
    return next((c for c in candidates if c.is_file()), None)


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml_input.load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise StreamlingError.user(f"config file '{path}': cannot be read: {exc}") from exc
    except RecursionError:  # JSON nested thousands of levels deep
        raise StreamlingError.user(f"config file '{path}': cannot be read: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StreamlingError.user(f"config file '{path}': expected a mapping at the top level")
    return data


def env_overrides(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Map ``STREAMLING__A__B=v`` to ``{"a.b": (v, "STREAMLING__A__B")}`` with keys lowercased."""
    prefix = ENV_PREFIX + ENV_SEPARATOR
    found: dict[str, tuple[Any, str]] = {}
    for name, raw in environ.items():
        if not name.startswith(prefix) or len(name) == len(prefix):
            continue
        path = [part.lower() for part in name[len(prefix) :].split(ENV_SEPARATOR)]
        if not all(path):
            continue
        value: Any = raw
        if raw.strip().startswith(("{", "[")) and not (len(path) > 1 and path[0] in LITERAL_SECTIONS):
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
        found[".".join(path)] = (value, name)
    return found


def otel_overrides(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """The standard OpenTelemetry variables as settings; they override the endpoint and the protocol, as in the
    original. ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` is the URL as is; the generic ``OTEL_EXPORTER_OTLP_ENDPOINT``
    is a base URL, to which the HTTP protocols add the metrics path."""
    found: dict[str, tuple[Any, str]] = {}
    protocol_var = next(
        (
            v
            for v in ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            if environ.get(v, "").strip()
        ),
        None,
    )
    if protocol_var:
        found["open_telemetry_metrics.endpoint_protocol"] = (environ[protocol_var].strip(), protocol_var)
    if environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip():
        url = environ["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"].strip()
        found["open_telemetry_metrics.ingestion_endpoint"] = (url, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    elif environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        base = environ["OTEL_EXPORTER_OTLP_ENDPOINT"].strip()
        grpc = protocol_var is not None and environ[protocol_var].strip().lower() == "grpc"
        url = base if grpc else base.rstrip("/") + "/v1/metrics"
        found["open_telemetry_metrics.ingestion_endpoint"] = (url, "OTEL_EXPORTER_OTLP_ENDPOINT")
    return found


def synonyms(section: tuple[str, ...]) -> dict[str, str]:
    """The section's other spellings of its keys, each mapped to the section's own (``{"db": "database"}``), as
    `SYNONYMS` lists them; ``*`` in a pattern matches any one name (a connection's node)."""
    for pattern, names in SYNONYMS.items():
        if len(pattern) == len(section) and all(p in ("*", s) for p, s in zip(pattern, section, strict=True)):
            return names
    return {}


def canonical_dotted(dotted: str) -> str:
    """``state_backend.postgres.db`` → ``state_backend.postgres.database`` (see `SYNONYMS`)."""
    *section, leaf = dotted.split(".")
    return ".".join([*section, synonyms(tuple(section)).get(leaf, leaf)])


def canonical_layer(data: Mapping[str, Any], origin: str, section: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data` with every connection key spelled the section's way (see `SYNONYMS`); both spellings in one layer
    are an error, since neither could be said to win."""
    names = synonyms(section)
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        name = names.get(key, key) if isinstance(key, str) else key
        if name in out:
            where = ".".join([*section, name])
            raise StreamlingError.user(
                f"invalid configuration: {where} is given twice, as '{spelled[name]}' and as '{key}' (from {origin}); "
                "give one"
            )
        spelled[name] = key
        out[name] = canonical_layer(value, origin, (*section, str(key))) if isinstance(value, Mapping) else value
    return out


def _merge(
    target: dict[str, Any], overlay: Mapping[str, Any], origin: str, origins: dict[str, str], prefix: str = ""
) -> None:
    for key, value in overlay.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value, origin, origins, dotted + ".")
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value
            origins[dotted] = origin


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = target
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def _origin_of(dotted: str, origins: Mapping[str, str]) -> str:
    """Where `dotted` was set: by itself or a parent section, else by a key inside it (an unknown section that
    only an environment variable such as ``STREAMLING__FOO__BAR`` filled)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:i]))
        if found:
            return found
    inside = sorted({origin for key, origin in origins.items() if key.startswith(dotted + ".")})
    return ", ".join(inside) if inside else "embedded defaults"


def _shown(dotted: str, value: Any) -> str:
    """` = value` for a message about setting `dotted`: secrets as ``'***'``; nothing for a value given to a whole
    section or map (a connection section given as JSON with a typo, say), which may hold a password."""
    if any(word in part for part in dotted.split(".") for word in SECRET_FIELDS):
        return " = '***'"
    if isinstance(value, str | int | float | bool) or value is None:
        return f" = {value!r}"
    return ""


def load_settings(
    config: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build validated settings; `overrides` (dotted keys) sit above the environment, for callers
    such as the CLI or the Dagster resources."""
    environ = os.environ if environ is None else environ
    origins: dict[str, str] = {}
    merged: dict[str, Any] = {}
    _merge(merged, embedded_defaults(), "embedded defaults", origins)
    path = find_config_file(config)
    notices = []
    if config and path is None:
        # As in the original, a missing config file is not an error (deployments may configure everything through
        # the environment); a file named explicitly that is not there gets a warning at start.
        notices.append(
            f"config file '{config}' not found (nor with .yaml, .yml or .json appended); running on the embedded "
            "defaults and STREAMLING__ variables"
        )
    if path is not None:
        _merge(merged, canonical_layer(read_config_file(path), str(path)), str(path), origins)
    for dotted, (value, origin) in [*sorted(env_overrides(environ).items()), *otel_overrides(environ).items()]:
        dotted = canonical_dotted(dotted)
        if isinstance(value, Mapping):
            value = canonical_layer(value, origin, tuple(dotted.split(".")))
        _set_path(merged, dotted, value)
        origins[dotted] = origin
    for dotted, value in (overrides or {}).items():
        dotted = canonical_dotted(dotted)
        _set_path(merged, dotted, value)
        origins[dotted] = "command line"
    settings = _validated(merged, origins)
    settings._notices.extend(notices)
    return settings


def resolve_location(location: str | os.PathLike[str] | None, settings: Settings) -> Path:
    """The pipeline file: the one given, else ``pipeline_definition_location``."""
    chosen = location or settings.pipeline_definition_location
    if not chosen:
        raise StreamlingError.user(
            "no pipeline given: pass PIPELINE_FILE or set STREAMLING__PIPELINE_DEFINITION_LOCATION"
        )
    return Path(chosen)


def settings_document(settings: Settings) -> dict[str, Any]:
    """The settings as a JSON document, secrets in clear: what a process running a pipeline for another one
    (`streamling serve`) reads back with `settings_from_document`. Never log it."""

    def reveal(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, dict):
            return {k: reveal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [reveal(v) for v in value]
        return value

    return to_jsonable_python(reveal(settings.model_dump(mode="python", by_alias=True)))


def settings_from_document(document: Mapping[str, Any]) -> Settings:
    return _validated(dict(document), {key: "the submitted settings" for key in document})


def _validated(merged: dict[str, Any], origins: Mapping[str, str]) -> Settings:
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            dotted = ".".join(str(p) for p in err["loc"])
            reason = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown setting '{dotted}' (from {_origin_of(dotted, origins)})")
                continue
            value = "" if err["type"] in SECTION_ERRORS else _shown(dotted, err.get("input"))
            problems.append(f"{dotted}{value} (from {_origin_of(dotted, origins)}): {reason}")
        raise StreamlingError.user("invalid configuration: " + "; ".join(problems)) from None
