"""The external_http_handler section and the STREAMLING__HTTP_SECRET_* settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamling.config import load_settings
from streamling.errors import StreamlingError


def test_defaults_and_environment(tmp_path: Path) -> None:
    s = load_settings(config=str(tmp_path / "none"), environ={})
    http = s.external_http_handler
    assert (http.trigger_max_count, http.buffer_size, http.timeout_sec, http.max_retries) == (2000, 25, 30.0, 10)
    assert (http.retry_timeout_sec, http.retry_backoff_sec, http.retry_backoff_max_sec) == (300.0, 0.5, 30.0)
    env = {
        "STREAMLING__EXTERNAL_HTTP_HANDLER__TRIGGER_MAX_COUNT": "500",
        "STREAMLING__EXTERNAL_HTTP_HANDLER__TIMEOUT_SEC": "1500ms",
        "STREAMLING__HTTP_SECRET_HEADER__PARTNER_API": "X-Api-Key",
        "STREAMLING__HTTP_SECRET_VALUE__PARTNER_API": '{"looks": "like json"}',
    }
    s = load_settings(config=str(tmp_path / "none"), environ=env)
    assert s.external_http_handler.trigger_max_count == 500
    assert s.external_http_handler.timeout_sec == 1.5
    header, value = s.http_secret("Partner_API")
    assert header == "X-Api-Key"
    assert value.get_secret_value() == '{"looks": "like json"}'  # literal text, not parsed
    assert "like json" not in repr(s)
    assert s.http_secret("other") is None


def test_config_file_secret_names_are_case_insensitive(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("http_secret_header: {MyKey: Authorization}\nhttp_secret_value: {MyKey: t0k}\n")
    s = load_settings(config=str(tmp_path / "c.yaml"), environ={})
    assert s.http_secret("MYKEY")[0] == "Authorization"


def test_bad_values_never_show_a_secret(tmp_path: Path) -> None:
    env = {"STREAMLING__EXTERNAL_HTTP_HANDLER__BUFFER_SIZE": "0"}
    (tmp_path / "c.yaml").write_text("http_secret_value: {k: [hunter2]}\n")
    with pytest.raises(StreamlingError) as info:
        load_settings(config=str(tmp_path / "c.yaml"), environ=env)
    assert "hunter2" not in str(info.value)
    assert "http_secret_value.k = '***'" in str(info.value)
    assert "external_http_handler.buffer_size = '0' (from STREAMLING__EXTERNAL_HTTP_HANDLER__BUFFER_SIZE)" in str(
        info.value
    )
