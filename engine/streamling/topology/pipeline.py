"""Loading a pipeline definition into a validated graph of typed node specs.

Everything here is structural and needs no Spark: YAML shape, node types and fields, references,
cycles, orphans, telemetry labels, job-mode boundedness. Schema-level checks (SQL analysis, primary
keys) run afterwards in `streamling.runtime.plan`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from streamling.config import yaml_input
from streamling.core.labels import label_errors
from streamling.core.messages import quoted, shown
from streamling.errors import StreamlingError
from streamling.plugins import loader
from streamling.plugins.registry import REGISTRY, OperatorType
from streamling.spec import NodeSpec

if TYPE_CHECKING:
    from streamling.config.model import Settings

SECTIONS = {"sources": "source", "transforms": "transform", "sinks": "sink"}
CONTROL_PLANE_KEYS = ("orchestration",)
"""Top-level blocks for the control plane (schedules); the engine accepts and ignores them."""


def ignored_top_level_key(key: str, value: Any) -> str:
    """The warning for a top-level key other than the sections (``name``, ``version``, ``description``…): the
    original read only the three sections and ignored the rest, so its pipelines may carry such keys. A key that
    looks like a misspelt section stays an error (`_parse`): ignoring it would drop the nodes under it."""
    return (
        f"top-level key {quoted(key)} = {shown(value)} has no effect here: as in the original, a pipeline is its "
        "sources, transforms and sinks, and other top-level keys are ignored"
    )


@dataclass
class ValidationReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def is_valid(self) -> bool:
        return not self.errors

    def to_json(self, success: bool = True) -> str:
        """`success` false: validation could not finish (an internal error, or a service it needs stayed
        unreachable), so whether the pipeline is valid is unknown and `is_valid` is null."""
        is_valid = self.is_valid if success else None
        return json.dumps({"success": success, "is_valid": is_valid, "errors": self.errors, "warnings": self.warnings})


@dataclass(frozen=True)
class Node:
    name: str
    kind: str
    spec: NodeSpec
    optype: OperatorType

    @property
    def label(self) -> str:
        return f"{self.kind} '{self.name}'"

    @property
    def identity_keys(self) -> tuple[str, ...]:
        """The identity tag keys of this node's kind (``topic``, ``table``…; ``type`` for a plugin): its labels may
        not use them."""
        spec_identity = self.spec.identity_labels
        spec_type = type(self.spec)
        shows_options = getattr(spec_type, "shows_options", lambda: "options" in spec_type.model_fields)()
        if self.optype.type_name.count(".") or shows_options:
            return (*spec_identity, "type")
        return spec_identity


@dataclass
class Pipeline:
    name: str
    nodes: dict[str, Node]
    inputs: dict[str, list[str]]
    path: Path | None = None
    text: str = ""
    after: dict[str, list[str]] = field(default_factory=dict)
    """Ordering-only parents (`NodeSpec.after_names`): evaluated first in an epoch, never read as input."""

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == kind]

    @property
    def sources(self) -> list[Node]:
        return self.of_kind("source")

    @property
    def transforms(self) -> list[Node]:
        return self.of_kind("transform")

    @property
    def sinks(self) -> list[Node]:
        return self.of_kind("sink")

    def consumers(self, name: str) -> list[str]:
        return [n for n, ins in self.inputs.items() if name in ins]

    def parents(self, name: str) -> list[str]:
        """Inputs first, then ordering-only parents."""
        return [*self.inputs.get(name, []), *self.after.get(name, [])]

    def topological_order(self) -> list[str]:
        order: list[str] = []
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for parent in self.parents(name):
                visit(parent)
            order.append(name)

        for name in self.nodes:
            visit(name)
        return order

    def downstream(self, source: str) -> list[str]:
        """Transforms and sinks reachable from `source`, in topological order."""
        reach = {source}
        for name in self.topological_order():
            if any(parent in reach for parent in self.inputs.get(name, [])):
                reach.add(name)
        return [n for n in self.topological_order() if n in reach and n != source]


def read_pipeline_text(location: str | Path) -> str:
    path = Path(location)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StreamlingError.user(f"pipeline file '{location}' cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StreamlingError.user(
            f"pipeline file '{location}' is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
            f"({exc.reason})"
        ) from None


def load_pipeline(
    text: str,
    *,
    name: str = "pipeline",
    path: Path | None = None,
    job_mode: bool = False,
    settings: Settings | None = None,
) -> tuple[Pipeline | None, ValidationReport]:
    """Parse and structurally validate; returns the pipeline only when there are no errors.

    With `settings`, the plugins its ``plugin`` section names are loaded first (installed ones always are)
    and its preprocessors rewrite the definition before anything else looks at it."""
    report = ValidationReport()
    try:
        REGISTRY.ensure_loaded()
        preprocessors = []
        if settings is not None:
            loader.configure(REGISTRY, settings.plugin)
            preprocessors = loader.preprocessors(REGISTRY, settings.plugin)
    except StreamlingError as exc:
        if not exc.user_facing:
            raise
        report.errors.append(exc.message)
        return None, report
    raw = _parse(text, report, preprocessors)
    if raw is None:
        return None, report
    if settings is not None and settings.plugin.side_output_ids:
        _attach_side_outputs(raw, settings.plugin.side_output_ids, settings.plugin.side_output_options, report)
    nodes = _build_nodes(raw, report)
    declared = {form for section in SECTIONS for name in raw[section] for form in (str(name), str(name).strip())}
    inputs = _resolve_inputs(nodes, declared, report)
    after = _resolve_after(nodes, report) if report.is_valid else {}  # an invalid node would be reported twice
    pipeline = Pipeline(name=name, nodes=nodes, inputs=inputs, path=path, text=text, after=after)
    if report.errors:
        return None, report
    _check_cycles(pipeline, report)
    if report.errors:
        return None, report
    _check_orphans(pipeline, report)
    for node in nodes.values():
        report.errors += label_errors(node.label, node.spec.labels(), node.identity_keys)
    if job_mode:
        unbounded = [n.name for n in pipeline.sources if not getattr(n.spec, "bounded", False)]
        if unbounded:
            report.errors.append(
                f"job mode needs bounded sources, but these sources are unbounded: {', '.join(unbounded)}"
            )
    return (pipeline if report.is_valid else None), report


def _parse(text: str, report: ValidationReport, preprocessors: list[tuple[str, Any]] = ()) -> dict[str, Any] | None:
    try:
        raw = yaml_input.load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        report.errors.append(f"pipeline is not valid YAML{where}: {problem}")
        return None
    for plugin_id, preprocessor in preprocessors:
        raw = _preprocessed(plugin_id, preprocessor, raw, report)
        if raw is None:
            return None
    if not isinstance(raw, dict):
        report.errors.append("pipeline must be a mapping with 'sources', 'transforms' and 'sinks'")
        return None
    for key in raw:
        if key in SECTIONS or key in CONTROL_PLANE_KEYS:
            continue
        if difflib.get_close_matches(str(key).lower(), SECTIONS, n=1, cutoff=0.75):
            report.errors.append(f"unknown top-level key '{key}'; expected sources, transforms, sinks")
        else:
            report.warnings.append(ignored_top_level_key(str(key), raw[key]))
    for section in SECTIONS:
        value = raw.get(section)
        if value is None:
            raw[section] = {}
        elif not isinstance(value, dict):
            report.errors.append(f"'{section}' must be a mapping of node name to node definition")
            raw[section] = {}
    if not raw["sources"]:
        report.errors.append("pipeline must define at least one source")
    if not raw["sinks"]:
        report.errors.append("pipeline must define at least one sink")
    return raw


def _preprocessed(plugin_id: str, preprocessor: Any, raw: Any, report: ValidationReport) -> Any:
    """The definition as preprocessor `plugin_id` rewrote it; None (and an error) when it failed."""
    try:
        out = preprocessor.process(raw)
    except Exception as exc:
        message = exc.message if isinstance(exc, StreamlingError) else f"{type(exc).__name__}: {exc}"
        report.errors.append(f"preprocessor '{plugin_id}': {_shortened(message)}")
        return None
    if not isinstance(out, dict):
        report.errors.append(f"preprocessor '{plugin_id}' returned {type(out).__name__}, not a mapping")
        return None
    return out


def side_output_node(source: str, plugin_id: str) -> str:
    """The name of the node a configured side output gets on `source` (a dot, so its state keys, ``<node>:…``,
    never fall under the source's own ``<source>:`` prefix)."""
    return f"{source}.{plugin_id}"


def _attach_side_outputs(
    raw: dict[str, Any], ids: list[str], options: Mapping[str, Mapping[str, Any]], report: ValidationReport
) -> None:
    """``plugin.side_output_ids``: one node per side output and source, observing the source's batches."""
    for plugin_id in ids:
        for source in raw["sources"]:
            name = side_output_node(str(source), plugin_id)
            if name in raw["transforms"]:
                report.errors.append(
                    f"transform {quoted(name)}: the name is taken by the side output '{plugin_id}' that "
                    f"plugin.side_output_ids attaches to source {quoted(str(source))}; rename the transform"
                )
                continue
            raw["transforms"][name] = {
                "type": plugin_id,
                "from": str(source),
                "options": dict(options.get(plugin_id, {})),
            }


def _build_nodes(raw: Mapping[str, Any], report: ValidationReport) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    for section, kind in SECTIONS.items():
        for name, body in raw[section].items():
            name = str(name)
            label = f"{kind} {quoted(name)}"
            problem = _name_problem(name)
            if problem:
                report.errors.append(f"{label}: the node name {problem}")
                continue
            if name in nodes:
                report.errors.append(f"{label}: the name '{name}' is already used by {nodes[name].label}")
                continue
            if not isinstance(body, dict) or not isinstance(body.get("type"), str):
                report.errors.append(f"{label}: must be a mapping with a 'type'")
                continue
            optype = REGISTRY.lookup(kind, body["type"])
            if optype is None:
                report.errors.append(f"{label}: {_unknown_type(kind, body['type'])}")
                continue
            try:
                spec = optype.spec.model_validate(body)
            except ValidationError as exc:
                report.errors += [
                    f"{label} (type '{body['type']}'): {_field_problem(_as_written(e, body))}" for e in exc.errors()
                ]
                continue
            except StreamlingError as exc:  # raised by a check inside the spec (a plugin's, say)
                report.errors.append(f"{label} (type '{body['type']}'): {_shortened(exc.message)}")
                continue
            nodes[name] = Node(name, kind, spec, optype)
    return nodes


def _unknown_type(kind: str, type_name: str) -> str:
    """Which types of `kind` are loaded, and for a plugin id whose namespace none of them has, where plugins
    come from."""
    loaded = REGISTRY.types(kind)
    message = f"operator type {quoted(type_name)} is not available; loaded {kind} types: {', '.join(loaded)}"
    namespace = type_name.split(".", 1)[0] if "." in type_name else None
    if namespace and not any(t.startswith(namespace + ".") for k in SECTIONS.values() for t in REGISTRY.types(k)):
        message += (
            f" (no plugin with namespace {quoted(namespace)} is loaded: set STREAMLING__PLUGIN__PATH or install a "
            "package with a 'streamling.plugins' entry point)"
        )
    return message


def _as_written(err: Any, body: Mapping[str, Any]) -> Any:
    """A plugin option given as a top-level field is named as such, not as ``options.<field>``."""
    loc = tuple(err.get("loc", ()))
    options = body.get("options")
    in_options = isinstance(options, dict) and len(loc) > 1 and loc[1] in options
    if len(loc) > 1 and loc[0] == "options" and loc[1] in body and not in_options:
        return {**err, "loc": loc[1:]}
    return err


def _name_problem(name: str) -> str | None:
    """Why `name` cannot name a node (references strip spaces, and messages and logs must stay readable)."""
    if not name.strip():
        return "is empty"
    if name != name.strip():
        return "starts or ends with whitespace"
    if not name.isprintable():
        return "holds a control or other non-printable character"
    return None


def _shortened(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else f"{text[: limit - 40]}… ({len(text)} characters)"


def _field_problem(err: Mapping[str, Any]) -> str:
    """One pydantic error as ``field 'a.b': reason (got value)``; long values and names are shortened."""
    where = ".".join(str(p) for p in err["loc"])
    reason = _shortened(str(err["msg"]).removeprefix("Value error, "))
    if not where:  # a check across fields
        return reason
    if err["type"] == "missing":
        return f"missing required field {quoted(where)}"
    if err["type"] == "extra_forbidden":
        return f"unknown field {quoted(where)}"
    return f"field {quoted(where)}: {reason} (got {shown(err.get('input'))})"


def _resolve_inputs(nodes: Mapping[str, Node], declared: set[str], report: ValidationReport) -> dict[str, list[str]]:
    """Each node's parents; a parent that is declared but itself invalid is not reported again."""
    inputs: dict[str, list[str]] = {}
    for node in nodes.values():
        try:
            names = node.spec.input_names()
        except StreamlingError as exc:
            report.errors.append(f"{node.label}: {exc.message.split(': ', 1)[-1]}")
            continue
        if node.kind == "source":
            inputs[node.name] = []
            continue
        if not names and not node.spec.side_output:
            report.errors.append(f"{node.label}: has no input; set 'from'")
        via = "SQL" if node.spec.type == "sql" and not getattr(node.spec, "from_", None) else "'from'"
        for parent in names:
            if parent not in nodes:
                if parent in declared:
                    continue
                report.errors.append(f"{node.label}: {via} references unknown node {quoted(parent)}")
            elif nodes[parent].kind == "sink":
                report.errors.append(
                    f"{node.label}: {via} references sink '{parent}'; only sources and transforms produce data"
                )
            elif nodes[parent].spec.side_output:
                report.errors.append(
                    f"{node.label}: {via} references {nodes[parent].spec.type} '{parent}', which produces no rows; "
                    f"look values up with dynamic_table_check('{parent}', value) instead"
                )
        inputs[node.name] = names
    return inputs


def _resolve_after(nodes: Mapping[str, Node], report: ValidationReport) -> dict[str, list[str]]:
    """Each node's ordering-only parents, after the node-specific graph checks (`NodeSpec.graph_errors`)."""
    specs = {name: node.spec for name, node in nodes.items()}
    after: dict[str, list[str]] = {}
    for node in nodes.values():
        try:
            report.errors += [f"{node.label}: {problem}" for problem in node.spec.graph_errors(specs)]
            after[node.name] = [name for name in node.spec.after_names() if name in nodes]
        except StreamlingError:
            continue  # the node's own definition is broken; _resolve_inputs already said why
    return after


def _check_cycles(pipeline: Pipeline, report: ValidationReport) -> None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> bool:
        state[name] = 1
        path.append(name)
        for parent in pipeline.parents(name):
            if state.get(parent) == 1:
                cycle = [*path[path.index(parent) :], parent]
                report.errors.append(f"pipeline has a cycle: {' -> '.join(reversed(cycle))}")
                return True
            if parent not in state and visit(parent):
                return True
        path.pop()
        state[name] = 2
        return False

    for name in pipeline.nodes:
        if name not in state and visit(name):
            return


def _check_orphans(pipeline: Pipeline, report: ValidationReport) -> None:
    orphans = [
        n.name
        for n in pipeline.nodes.values()
        if n.kind != "sink" and not n.spec.side_output and not pipeline.consumers(n.name)
    ]
    if orphans:
        report.errors.append(
            f"Source(s) and/or transform(s) have no consumers: {', '.join(orphans)}. "
            "Remove them or connect them to a transform or sink."
        )
