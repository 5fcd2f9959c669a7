"""What of an HTTP request may be shown (the admin API's node list, error messages): URLs without credentials or
query values, headers without their secret-looking values. Neutral, so the telemetry that shows nodes needs no
HTTP client."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

REDACTED = "***"
SENSITIVE_HEADER = re.compile(r"auth|cookie|token|secret|key|pass|signature|session|credential", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` safe to show: no user or password, every query value replaced by ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{REDACTED}@{host}{port}" if "@" in parts.netloc else f"{host}{port}"
    query = "&".join(f"{key}={REDACTED}" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def shown_headers(headers: dict[str, str]) -> dict[str, str]:
    return {name: REDACTED if SENSITIVE_HEADER.search(name) else value for name, value in headers.items()}
