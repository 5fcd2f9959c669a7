"""The Kafka source's YAML shape and the option helpers both the driver and the readers use."""

from __future__ import annotations

import logging
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from streamling.config.units import Milliseconds
from streamling.spec import ErrorHandlingSpec, SourceSpec, ignored_field
from streamling.types import check_column_types

log = logging.getLogger("streamling.kafka")


class SchemaIdOverride(BaseModel):
    """Records framed with writer schema id `from` are decoded with schema `to` instead."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: PositiveInt = Field(alias="from")
    to: PositiveInt


class KafkaSourceSpec(SourceSpec, ErrorHandlingSpec):
    type: Literal["kafka"]
    identity_labels: ClassVar[tuple[str, ...]] = ("topic",)
    topic: str = Field(min_length=1)
    data_format: Literal["avro", "json"] = "avro"
    schema_: dict[str, str] | None = Field(default=None, alias="schema")
    starting_offsets: str = "earliest"
    ending_offsets: Literal["latest"] | None = None
    on_data_loss: Literal["fail", "skip"] = "fail"
    """When records the source has not read yet were deleted by the broker (retention): fail naming them, or skip
    them with a WARNING and the `records_lost` metric."""
    filter: str | None = None
    include_metadata: bool = False
    validate_writer_schema_ordering: bool = True
    schema_id_overrides: list[SchemaIdOverride] = Field(default_factory=list)
    record_batch_size: PositiveInt | None = None
    batch_size: PositiveInt | None = None
    """The original's records per batch the source hands on: the most records per Arrow batch a reading task
    yields (default ``min(record_batch_size, 50000)``); an epoch's size stays ``record_batch_size``."""
    parallelism: PositiveInt | None = None
    """The most Spark input partitions (reading tasks) an epoch's offset ranges are split into; default Spark's
    default parallelism."""
    batch_flush_interval: Milliseconds | None = None
    """The original's longest wait before the source hands its records on: the source closes epochs at least
    this often (as a sink's ``batch_flush_interval`` makes the sources feeding it do)."""
    skip_schema_resolution: bool | None = None
    """Accepted for the original's pipelines (a warning at start when true): see `resolution_warnings`."""
    skip_schema_resolution_for_reader_schema_ids: list[PositiveInt] | None = None
    """Accepted for the original's pipelines (a warning at start): see `resolution_warnings`."""

    @field_validator("starting_offsets", mode="before")
    @classmethod
    def _offsets(cls, value: object) -> object:
        text = str(value).strip().lower() if value is not None else value
        if isinstance(text, str) and (text in ("earliest", "latest") or text.isdigit()):
            return text
        raise ValueError("must be 'earliest', 'latest' or a timestamp in epoch milliseconds")

    @field_validator("schema_")
    @classmethod
    def _types(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        check_column_types(value)
        return value

    @property
    def bounded(self) -> bool:
        return self.ending_offsets is not None

    @model_validator(mode="after")
    def _schema_matches_format(self) -> KafkaSourceSpec:
        if self.data_format == "json" and not self.schema_:
            raise ValueError("data_format 'json' requires 'schema' (column: type)")
        if self.data_format == "avro" and self.schema_:
            raise ValueError("data_format 'avro' takes its schema from the Schema Registry; remove 'schema'")
        if self.data_format != "avro" and self.schema_id_overrides:
            raise ValueError("field 'schema_id_overrides' applies only to data_format 'avro'")
        seen: set[int] = set()
        for override in self.schema_id_overrides:
            if override.from_ in seen:
                raise ValueError(f"field 'schema_id_overrides': schema id {override.from_} is overridden twice")
            seen.add(override.from_)
        return self

    def overrides(self) -> dict[int, int]:
        return {o.from_: o.to for o in self.schema_id_overrides}


SKIP_RESOLUTION_MEANING = (
    "a record is decoded with its writer schema and resolved to the reader schema by Avro's resolution rules, "
    "which ignore documentation and other metadata (what the original's skip worked around); the writer schema "
    "is used as is when it equals the reader schema"
)


def resolution_warnings(label: str, spec: KafkaSourceSpec, prefix: str = "") -> list[str]:
    """The start-up warnings for the original's ``skip_schema_resolution`` fields (`prefix`: where they sit, such
    as a hybrid source's ``unbounded_source.``). The original decoded with its own Avro reader, whose resolution
    rejected writer schemas that differ from the reader only in metadata; fastavro's does not, so there is nothing
    to skip."""
    out = []
    if spec.skip_schema_resolution:
        out.append(ignored_field(label, f"{prefix}skip_schema_resolution", True, SKIP_RESOLUTION_MEANING))
    if spec.skip_schema_resolution_for_reader_schema_ids:
        ids = spec.skip_schema_resolution_for_reader_schema_ids
        out.append(
            ignored_field(label, f"{prefix}skip_schema_resolution_for_reader_schema_ids", ids, SKIP_RESOLUTION_MEANING)
        )
    return out
