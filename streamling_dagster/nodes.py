"""What the control plane asks a node's operator — what it reads and writes, whether it streams, whether it can tell
its lag, which object its positions are in — through the operator interface every built-in and plugin implements,
never by its type name. Operators are built as the engine builds them; their constructors do no I/O, so this is
cheap and needs no service."""

from __future__ import annotations

from typing import Any

from streamling import Node
from streamling.config import Settings
from streamling.plugin import ExternalObject, Operator, Source


def operator_of(node: Node, settings: Settings | None = None) -> Operator[Any]:
    """The node's operator, built as a run builds it; `settings` default to the embedded defaults (enough for what
    does not name a database: whether a source streams, knows its lag or counts its rows)."""
    return node.optype.operator(node.name, node.spec, settings if settings is not None else Settings())


def source_of(node: Node, settings: Settings | None = None) -> Source[Any]:
    """The source's operator as a stream builds it (outside job mode, so every phase is there)."""
    base = settings if settings is not None else Settings()
    source = operator_of(node, base.model_copy(update={"job_mode": False, "backfill_range": None}))
    assert isinstance(source, Source), f"{node.label} is no source"
    return source


def stream_phase(source: Source[Any]) -> Source[Any]:
    """The part of a source a stream ends in: its last phase (a hybrid's stream), else the source itself."""
    phases = source.phases()
    return phases[-1] if phases else source


def overrides(op: Operator[Any], method: str) -> bool:
    """Whether `op`'s class implements `method` itself rather than inheriting `Source`'s default."""
    return getattr(type(op), method) is not getattr(Source, method)


def streams(node: Node, settings: Settings | None = None) -> bool:
    """The source never ends outside job mode (its last phase is unbounded)."""
    source = source_of(node, settings)
    return not stream_phase(source).spec.bounded


def reports_lag(node: Node, settings: Settings | None = None) -> bool:
    """The source's stream reads external objects and says how far behind them it is (`Source.backlog`): lag is
    measured against something outside the pipeline, so a generator, with nothing outside, has none."""
    source = source_of(node, settings)
    phase = stream_phase(source)
    return bool(phase.reads()) and overrides(phase, "backlog")


def counts_rows(node: Node, settings: Settings | None = None) -> bool:
    """The source tells the rows of each epoch from its positions (`Source.rows_between`), every phase of it."""
    source = source_of(node, settings)
    return all(overrides(phase, "rows_between") for phase in source.phases() or [source])


def phase_label(node: Node, phase: int, settings: Settings | None = None) -> str:
    """A phased (hybrid) source's phase as an operator reads it: ``2 of 2: kafka orders (stream)``."""
    phases = source_of(node, settings).phases()
    if not 0 <= phase < len(phases):
        return f"{phase + 1} (unknown: the source has {len(phases)} phases)"
    part = phases[phase]
    read = part.reads()
    what = f"{read[-1].system} {'.'.join(read[-1].path)}" if read else part.spec.type
    return f"{phase + 1} of {len(phases)}: {what} ({'bounded' if part.spec.bounded else 'stream'})"


def position_object(node: Node, phase: int | None = None, settings: Settings | None = None) -> ExternalObject | None:
    """The object a source's positions are in at `phase` (unknown: the stream's): the last one that part reads."""
    source = source_of(node, settings)
    phases = source.phases()
    part = phases[phase] if phases and phase is not None and 0 <= phase < len(phases) else stream_phase(source)
    read = part.reads()
    return read[-1] if read else None
