"""The file source's YAML shape: `path`, `format` (with the original's aliases) and `mode`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from streamling.config.units import Seconds
from streamling.files.listing import SCHEMES, scheme_of
from streamling.spec import ErrorHandlingSpec, SourceSpec

FORMATS = ("parquet", "csv", "json", "avro")
ALIASES = {"ndjson": "json", "jsonl": "json", "parq": "parquet"}
"""Names the original accepted for a format; JSON is newline-delimited whatever it is called."""
SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".ndjson": "json", ".jsonl": "json", ".avro": "avro"}
DEFAULT_POLL_SEC = 5.0


class FileMode(BaseModel):
    """``{type: bounded}``: every matching file once, then the source ends; ``{type: continuous, poll_interval}``:
    the path is listed again every `poll_interval` and new or rewritten files are read."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["bounded", "continuous"] = "continuous"
    poll_interval: Seconds | None = None

    @model_validator(mode="after")
    def _poll_only_when_continuous(self) -> FileMode:
        if self.type == "bounded" and self.poll_interval is not None:
            raise ValueError("'poll_interval' applies only to mode type 'continuous'")
        if self.poll_interval is not None and self.poll_interval <= 0:
            raise ValueError("'poll_interval' must be positive")
        return self

    @property
    def poll_sec(self) -> float:
        return self.poll_interval if self.poll_interval is not None else DEFAULT_POLL_SEC


class FileSourceSpec(SourceSpec, ErrorHandlingSpec):
    type: Literal["file"]
    identity_labels: ClassVar[tuple[str, ...]] = ("path",)
    path: str = Field(min_length=1)
    """A file, a directory (read recursively) or a glob (``*`` and ``?`` match across folders too); local, or an
    ``s3://``, ``s3a://`` or ``gs://`` URL."""
    format: str | None = None
    """parquet, csv, json (newline-delimited; ``ndjson``, ``jsonl``) or avro; unset: the path's suffix."""
    mode: FileMode = Field(default_factory=FileMode)
    parallelism: int | None = Field(default=None, ge=1)
    """The most Spark tasks an epoch's files are read by; default Spark's default parallelism."""

    @field_validator("path")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        scheme = scheme_of(value)
        if scheme is not None and scheme not in SCHEMES:
            raise ValueError(f"unsupported scheme {scheme}; use a local path or an s3://, s3a:// or gs:// URL")
        return value

    @field_validator("format", mode="before")
    @classmethod
    def _canonical_format(cls, value: object) -> object:
        if value is None:
            return value
        text = str(value).strip().lower()
        text = ALIASES.get(text, text)
        if text not in FORMATS:
            raise ValueError(f"unknown format {value!r}; use one of parquet, csv, json (ndjson, jsonl), avro")
        return text

    @model_validator(mode="after")
    def _format_known(self) -> FileSourceSpec:
        if self.format is None:
            suffix = next((s for s in SUFFIXES if self.path.lower().endswith(s)), None)
            if suffix is None:
                raise ValueError("field 'format' is required (parquet, csv, json, avro): the path has no such suffix")
            self.format = SUFFIXES[suffix]
        return self

    @property
    def bounded(self) -> bool:
        return self.mode.type == "bounded"
