"""The request options of `handler` transforms and `webhook` sinks, and their redaction.

Secrets never sit in the pipeline file: ``secret_name`` names a header whose name and value come from the
settings (``STREAMLING__HTTP_SECRET_HEADER__<NAME>`` / ``STREAMLING__HTTP_SECRET_VALUE__<NAME>``). What is
shown of a node — errors, logs, asset descriptions (`model_dump`) — carries the URL without credentials or
query values and hides header values whose names look sensitive.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_serializer, field_validator, model_validator

from streamling.core.redaction import redact_url, shown_headers
from streamling.core.retry import RetryPolicy

if TYPE_CHECKING:
    from streamling.config import Settings
    from streamling.http.client import Endpoint
    from streamling.telemetry.tasks import NodeRecorder

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class HttpRequestOptions(BaseModel):
    """Fields both node types accept (mixed into their spec models)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    secret_name: str | None = Field(default=None, min_length=1)
    one_row_per_request: bool = False
    payload_version: Literal[0, 1] = 0
    batch_size: PositiveInt | None = None
    """Rows per request in batched mode; default `external_http_handler.trigger_max_count`."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError as exc:
            raise ValueError(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value.strip()

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out = {}
        for name, item in value.items():
            if not _HEADER_NAME.match(str(name)):
                raise ValueError(f"'{name}' is not a valid header name")
            if isinstance(item, dict | list) or item is None:
                raise ValueError(f"header '{name}' must have a single text value")
            text = str(item).lower() if isinstance(item, bool) else str(item)
            if "\n" in text or "\r" in text:
                raise ValueError(f"header '{name}' must not contain a line break")
            out[str(name)] = text
        return out

    @model_validator(mode="after")
    def _batch_size_needs_batches(self) -> HttpRequestOptions:
        if self.one_row_per_request and self.batch_size is not None:
            raise ValueError("batch_size applies only when one_row_per_request is false")
        return self

    @field_serializer("url")
    def _shown_url(self, value: str) -> str:
        return redact_url(value)

    @field_serializer("headers")
    def _shown_headers(self, value: dict[str, str]) -> dict[str, str]:
        return shown_headers(value)

    def identity_tags(self) -> dict[str, str]:
        """The URL as logs show it (no credentials, query values hidden): metric tags are as public as logs."""
        return {"url": redact_url(self.url)}

    def rows_per_request(self, settings: Settings) -> int:
        if self.one_row_per_request:
            return 1
        return self.batch_size or settings.external_http_handler.trigger_max_count

    def endpoint(
        self,
        label: str,
        what: str,
        settings: Settings,
        skip_on_error: bool = False,
        recorder: NodeRecorder | None = None,
    ) -> Endpoint:
        """Everything the executors need to send requests, resolved on the driver. Raises a user-facing error
        naming the node when `secret_name` is not configured."""
        from streamling.errors import StreamlingError
        from streamling.http.client import Endpoint
        from streamling.telemetry.tasks import NodeRecorder

        headers = {"Content-Type": "application/json", **self.headers}
        secrets: tuple[str, ...] = ()
        if self.secret_name is not None:
            secret = settings.http_secret(self.secret_name)
            if secret is None:
                env = self.secret_name.strip().upper()
                raise StreamlingError.user(
                    f"{label}: secret '{self.secret_name}' is not configured; set "
                    f"STREAMLING__HTTP_SECRET_HEADER__{env} (the header name) and "
                    f"STREAMLING__HTTP_SECRET_VALUE__{env} (its value)"
                )
            header, value = secret
            if not _HEADER_NAME.match(header):
                raise StreamlingError.user(f"{label}: secret '{self.secret_name}' has an invalid header name")
            headers = {k: v for k, v in headers.items() if k.lower() != header.lower()}
            headers[header] = value.get_secret_value()
            secrets = (value.get_secret_value(),) if value.get_secret_value() else ()
        http = settings.external_http_handler
        return Endpoint(
            label=label,
            what=what,
            url=self.url,
            headers=tuple(headers.items()),
            secrets=secrets,
            timeout_sec=http.timeout_sec,
            buffer_size=http.buffer_size,
            retry=RetryPolicy(
                max_retries=http.max_retries,
                retry_timeout_sec=http.retry_timeout_sec,
                backoff_sec=http.retry_backoff_sec,
                backoff_max_sec=http.retry_backoff_max_sec,
            ),
            skip_on_error=skip_on_error,
            operator_timeout_sec=http.operator_timeout_sec,
            recorder=recorder or NodeRecorder(label),
        )
