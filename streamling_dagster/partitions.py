"""Partitioned backfills: the ``orchestration.backfill_partitions`` block as Dagster partitions, and a
partition as the engine's `backfill_range`.

Integer ranges (``{start, end, step}``) become static partitions named ``<low>-<high>``; time windows
(``{every, start}``) become Dagster time-window partitions. A partition run reads its range from scratch in a
state namespace of its own, ``<namespace>.partition.<key>``, so ranges never share positions with each other or
with the pipeline's stream."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dagster as dg
from pydantic import BaseModel, ConfigDict, PositiveInt, field_validator, model_validator

from streamling.config import BackfillRange

MAX_PARTITIONS = 10_000
"""More static partitions than this make the UI's partition view slow: take a larger step."""
TIME_FORMATS = {"hour": "%Y-%m-%d-%H:%M", "day": "%Y-%m-%d", "week": "%Y-%m-%d", "month": "%Y-%m-%d"}


class BackfillPartitions(BaseModel):
    """Integer ranges of the first sort key (or Kafka offsets): ``start``, ``end``, ``step``; or time windows
    of a date/date-time first sort key (or Kafka message time): ``every``, ``start``, optional ``end``."""

    model_config = ConfigDict(extra="forbid")
    column: str | None = None
    """The first sort key the ranges are meant for; a ClickHouse source sorted by another column fails."""
    start: int | date | datetime
    end: int | date | datetime | None = None
    step: PositiveInt | None = None
    every: Literal["hour", "day", "week", "month"] | None = None
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone '{value}' is not a known time zone") from None
        return value

    @model_validator(mode="after")
    def _shape(self) -> BackfillPartitions:
        if self.every is None:
            if not isinstance(self.start, int) or not isinstance(self.end, int):
                raise ValueError(
                    f"integer ranges need integer start and end (got start {self.start}, end {self.end}); "
                    "for time windows give 'every'"
                )
            if self.step is None:
                raise ValueError("integer ranges need 'step'")
            if self.end <= self.start:
                raise ValueError(f"end {self.end} must be greater than start {self.start}")
            count = -(-(self.end - self.start) // self.step)
            if count > MAX_PARTITIONS:
                raise ValueError(f"step {self.step} makes {count} partitions, more than {MAX_PARTITIONS}")
            return self
        if self.step is not None:
            raise ValueError(f"'step' ({self.step}) is for integer ranges, not time windows (every: {self.every})")
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, int):
                raise ValueError(f"time windows need a date or date-time {name}, not {value}")
        return self

    def definition(self) -> dg.PartitionsDefinition:
        if self.every is None:
            return dg.StaticPartitionsDefinition([f"{low}-{high}" for low, high in self.ranges()])
        kind = {
            "hour": dg.HourlyPartitionsDefinition,
            "day": dg.DailyPartitionsDefinition,
            "week": dg.WeeklyPartitionsDefinition,
            "month": dg.MonthlyPartitionsDefinition,
        }[self.every]
        fmt = TIME_FORMATS[self.every]
        end = self.end.strftime(fmt) if self.end is not None else None  # type: ignore[union-attr]
        return kind(start_date=self.start.strftime(fmt), end_date=end, timezone=self.timezone)  # type: ignore[union-attr]

    def ranges(self) -> list[tuple[int, int]]:
        assert isinstance(self.start, int) and isinstance(self.end, int) and self.step is not None
        return [(low, min(low + self.step, self.end)) for low in range(self.start, self.end, self.step)]

    def range_of(self, partitions: dg.PartitionsDefinition, key: str) -> BackfillRange:
        """The engine's range for partition `key`."""
        if self.every is None:
            found = {f"{low}-{high}": (low, high) for low, high in self.ranges()}.get(key)
            if found is None:
                raise dg.DagsterInvariantViolationError(f"partition '{key}' is not one of the integer ranges")
            return BackfillRange(start=found[0], end=found[1], column=self.column)
        assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
        window = partitions.time_window_for_partition_key(key)
        return BackfillRange(start=window.start, end=window.end, column=self.column)


def partition_namespace(namespace: str, key: str) -> str:
    return f"{namespace}.partition.{key}"
