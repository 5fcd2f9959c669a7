"""Finding pipeline files and reading them without Spark, so one broken file never breaks the others."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import dagster as dg
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from streamling import Node, Pipeline, load_pipeline, read_pipeline_text
from streamling.config import Settings, load_settings, yaml_input
from streamling.errors import StreamlingError, first_line
from streamling_dagster import nodes
from streamling_dagster.partitions import BackfillPartitions

PIPELINES_ENV = "STREAMLING_DAGSTER_PIPELINES"
DEFAULT_DIRECTORY = Path(__file__).resolve().parent.parent / "pipelines"


class Orchestration(BaseModel):
    """The pipeline file's top-level ``orchestration:`` block (the engine ignores it)."""

    model_config = ConfigDict(extra="forbid")
    backfill_schedule: str | None = None
    """A cron expression: when to run `<pipeline>__backfill`."""
    timezone: str = "UTC"
    backfill_partitions: BackfillPartitions | None = None
    """Partitioned backfills: integer ranges or time windows of the first sort key (see `partitions.py`)."""
    backfill_on_change: bool = False
    """Start the backfill sensor (bounded input advanced, or file changed) with the code location."""
    keep_streaming: bool = False
    """Start the stream keeper sensor with the code location: the stream is (re)started when not running."""
    application_id: str | None = None
    """The state-backend namespace; default `<application_id setting>.<pipeline>`, so pipelines never share
    positions. Set it to the CLI's application id to continue a run started with `streamling`."""
    restart_backoff_sec: float = Field(default=30.0, gt=0)
    """The stream keeper's wait after the first failure; it doubles with each consecutive one."""
    restart_backoff_max_sec: float = Field(default=900.0, gt=0)
    stream_max_lag: int = Field(default=100_000, ge=0)
    """Stream health check: at most this many records waiting after the committed positions."""
    stream_max_staleness_sec: float = Field(default=600.0, gt=0)
    """Stream health check: the last committed epoch is at most this old (while records are waiting)."""

    @field_validator("backfill_schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        from dagster._utils.schedules import is_valid_cron_string

        if value is not None and not is_valid_cron_string(value):
            raise ValueError(f"'{value}' is not a cron expression")
        return value


@dataclass
class PipelineFile:
    name: str
    path: Path
    text: str
    pipeline: Pipeline | None
    errors: list[str] = field(default_factory=list)
    backfill_errors: list[str] = field(default_factory=list)
    """Why the pipeline cannot run in job mode (no bounded sources), empty when it can."""
    orchestration: Orchestration = field(default_factory=lambda: Orchestration())
    asset_keys: dict[str, dg.AssetKey] = field(default_factory=dict)
    """Each node's asset key, as the translator made it (filled when the definitions are built)."""
    embedded_clickhouse: tuple[str | None, str | None] = (None, None)
    """The embedded ClickHouse data path its runs open in their own process, (when backfilling, when streaming):
    any ClickHouse table it reads or writes, resp. only a ClickHouse sink's (a stream reads bounded ClickHouse
    phases once, and a backfill-then-stream releases the path after its backfill); None with a server `url`, or
    with a warm engine (`engine_url`: the engine's process holds the path for all its runs)."""

    def asset_key(self, node: str) -> dg.AssetKey:
        return self.asset_keys.get(node) or node_key(self.name, node)

    @property
    def can_backfill(self) -> bool:
        return self.pipeline is not None and not self.backfill_errors

    @cached_property
    def can_stream(self) -> bool:
        """Some source never ends (`nodes.streams`: Kafka without `ending_offsets`, a generator without `rows`, a
        hybrid with a Kafka phase): only then are a stream job and its keeper worth having."""
        return self.pipeline is not None and any(nodes.streams(s) for s in self.pipeline.sources)

    def node_yaml(self, node: Node) -> str:
        """The node's own definition as the user wrote it (for asset descriptions), as YAML; URLs and headers
        as the spec shows them (no credentials). A plugin node's options show under ``options``, and not at all
        when all are defaults; a built-in's show as its fields, also on the Arrow level (`plugins/specs.py`)."""
        body = node.spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
        if body.get("options") == {}:
            del body["options"]
        return yaml.safe_dump({node.name: body}, sort_keys=False, allow_unicode=True, default_flow_style=False)


def pipelines_directory() -> Path:
    return Path(os.environ.get(PIPELINES_ENV) or DEFAULT_DIRECTORY)


def asset_name(text: str) -> str:
    """Dagster names allow letters, digits and underscores only."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def node_key(pipeline: str, node: str) -> dg.AssetKey:
    return dg.AssetKey([pipeline, asset_name(node)])


def discover(directory: Path, settings: Settings | None = None) -> list[PipelineFile]:
    settings = settings if settings is not None else load_settings()
    paths = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    return [read_pipeline_file(path, settings) for path in paths]


def read_pipeline_file(path: Path, settings: Settings | None = None) -> PipelineFile:
    """A pipeline file, structurally validated (no Spark); `errors` says what is wrong when it is invalid.

    `settings` are the code location's (default: the environment's, as a run's `StreamlingResource` reads them):
    their ``plugin`` section loads the plugins on ``STREAMLING__PLUGIN__PATH`` and runs the preprocessors, as a
    run does, so the control plane sees the pipeline a run will run. A plugin that cannot be loaded, or a type
    no plugin defines, makes the file invalid with the loader's message; it never breaks the other files."""
    settings = settings if settings is not None else load_settings()
    try:
        text = read_pipeline_text(path)
    except StreamlingError as exc:  # unreadable, or not UTF-8: shown like any invalid file
        return PipelineFile(asset_name(path.stem), path, "", None, [exc.message])
    pipeline, report = load_pipeline(text, name=path.stem, path=path, settings=settings)
    backfill_errors: list[str] = []
    orchestration = Orchestration()
    errors = list(report.errors)
    if pipeline is not None:
        errors += unbuildable(pipeline, settings)
        pipeline = None if errors else pipeline
    if pipeline is not None:
        _, job_report = load_pipeline(text, name=path.stem, path=path, job_mode=True, settings=settings)
        backfill_errors = job_report.errors
        try:
            orchestration = Orchestration.model_validate(yaml_input.load(text).get("orchestration") or {})
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(["orchestration", *(str(p) for p in problem["loc"])])
            errors.append(f"{where}: {problem['msg'].removeprefix('Value error, ')}")
            pipeline = None
        plan = orchestration
        if plan.backfill_partitions is not None and plan.backfill_schedule and pipeline is not None:
            errors.append(
                f"orchestration.backfill_schedule: '{plan.backfill_schedule}' cannot launch a partitioned "
                "backfill (backfill_partitions is set): launch ranges from the partition view instead"
            )
            pipeline = None
        for wanted in ("backfill_schedule", "backfill_on_change", "backfill_partitions"):
            if getattr(orchestration, wanted) and backfill_errors and pipeline is not None:
                errors.append(f"orchestration.{wanted}: the pipeline cannot backfill: {backfill_errors[0]}")
                pipeline = None
    embedded = embedded_paths(pipeline, settings) if pipeline is not None else (None, None)
    return PipelineFile(
        asset_name(path.stem), path, text, pipeline, errors, backfill_errors, orchestration, {}, embedded
    )


def embedded_paths(pipeline: Pipeline, settings: Settings) -> tuple[str | None, str | None]:
    """`PipelineFile.embedded_clickhouse`, from what each node's operator reads and writes."""
    if settings.engine_url:
        return None, None
    read = written = False
    for node in pipeline.nodes.values():
        operator = nodes.operator_of(node, settings)
        read = read or any(o.system == "clickhouse" for o in operator.reads())
        written = written or any(o.system == "clickhouse" for o in operator.writes())
    chosen = settings.clickhouse_sink if written else settings.clickhouse_source
    if not (read or written) or chosen.url:
        return None, None
    path = str(Path(chosen.path).resolve())
    return path, path if written else None


def unbuildable(pipeline: Pipeline, settings: Settings | None = None) -> list[str]:
    """Nodes whose operator cannot tell the control plane what it reads and writes (a plugin whose constructor,
    `reads` or `writes` raises, or whose identity labels break the label rules): the definitions ask every
    operator that, so such a file is shown as invalid rather than failing the others."""
    errors = []
    for node in pipeline.nodes.values():
        try:
            op = nodes.operator_of(node, settings)
            op.reads()
            op.writes()
        except StreamlingError as exc:
            errors.append(exc.message if exc.user_facing else f"{node.label}: {first_line(exc)}")
        except Exception as exc:
            errors.append(f"{node.label}: cannot build its operator: {first_line(exc)}")
    return errors


KIND_OF = {"sources": "source", "transforms": "transform", "sinks": "sink"}


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of each top-level key and each node name in the pipeline's sections."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):  # the validator's message already says where, or cannot
        return {}
    found: dict[tuple[str, ...], int] = {}
    if not isinstance(root, yaml.MappingNode):
        return found
    for key, value in root.value:
        found[(str(key.value),)] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for child, _ in value.value:
                found[(str(key.value), str(child.value))] = child.start_mark.line + 1
    return found


def _label(where: tuple[str, ...]) -> str:
    section, name = where
    return f"{KIND_OF[section]} '{name}'" if section in KIND_OF else "\0"  # "\0": never a message's start


def _names_node(error: str, where: tuple[str, ...]) -> bool:
    """The error is about that node: it starts with the node's label, or (a plugin's error) with
    ``plugin '<id>' (node '<name>')``."""
    if error.startswith(_label(where)):
        return True
    head = error.split(": ", 1)[0]
    return where[0] in KIND_OF and head.startswith("plugin '") and head.endswith(f"(node '{where[1]}')")


def located_errors(pf: PipelineFile) -> list[str]:
    """`file:line: message` for each problem, the line of the node or block it names (when it names one), so
    an operator can go straight to it."""
    lines = _key_lines(pf.text)
    out = []
    for error in pf.errors:
        line = next((n for where, n in lines.items() if len(where) == 2 and _names_node(error, where)), None)
        if line is not None:
            pass
        elif error.startswith("orchestration"):
            line = lines.get(("orchestration",))
        elif match := re.search(r"at line (\d+)", error):
            line = int(match[1])
        out.append(f"{pf.path}:{line}: {error}" if line else f"{pf.path}: {error}")
    return out
