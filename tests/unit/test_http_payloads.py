"""Payload encoding (v0/v1, one row or batched), response decoding and conversion to Arrow, retry rules,
URL redaction, and the handler/webhook spec validation messages."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime

import pyarrow as pa
import pytest
from tenacity import RetryCallState, Retrying

from streamling.core.redaction import redact_url
from streamling.core.retry import RetryPolicy, is_retriable, retry_after
from streamling.http.payloads import PayloadError, PayloadFormat, decode_response, to_record_batch
from streamling.topology.pipeline import load_pipeline


def batch(ids: list[int], ops: list[str | None] | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "name": [f"n{i}" for i in ids],
            "_gs_op": ops or ["i"] * len(ids),
        }
    )


def bodies(fmt: PayloadFormat, *batches: pa.RecordBatch) -> list:
    return [json.loads(o.body) for o in fmt.requests(iter(batches))]


def test_v0_batched_fills_requests_across_batch_boundaries() -> None:
    fmt = PayloadFormat(version=0, rows_per_request=2, one_row=False)
    sent = bodies(fmt, batch([1, 2, 3]), batch([4, 5]))
    assert [len(b) for b in sent] == [2, 2, 1]
    assert sent[0] == [{"id": 1, "name": "n1", "_gs_op": "i"}, {"id": 2, "name": "n2", "_gs_op": "i"}]
    assert sent[2] == [{"id": 5, "name": "n5", "_gs_op": "i"}]


def test_v0_one_row_sends_objects_with_their_op() -> None:
    fmt = PayloadFormat(version=0, rows_per_request=2000, one_row=True)
    requests = list(fmt.requests(iter([batch([1, 2], ["u", "d"])])))
    assert [r.body for r in requests] == [
        b'{"id":1,"name":"n1","_gs_op":"u"}',
        b'{"id":2,"name":"n2","_gs_op":"d"}',
    ]
    assert [r.ops for r in requests] == [["u"], ["d"]]


def test_v1_envelopes_carry_the_op_in_metadata_and_not_in_data() -> None:
    one = PayloadFormat(version=1, rows_per_request=1, one_row=True)
    assert bodies(one, batch([7], ["u"])) == [{"metadata": {"op": "u"}, "data": {"id": 7, "name": "n7"}}]
    many = PayloadFormat(version=1, rows_per_request=10, one_row=False)
    assert bodies(many, batch([1, 2], [None, "d"])) == [
        [
            {"metadata": {"op": "i"}, "data": {"id": 1, "name": "n1"}},  # a NULL op is an insert
            {"metadata": {"op": "d"}, "data": {"id": 2, "name": "n2"}},
        ]
    ]


def test_values_are_json_as_elsewhere_in_the_engine() -> None:
    rows = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([datetime(2025, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
            "zero": pa.array([datetime(2025, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([datetime(2025, 1, 1, 2, 3, 4)], pa.timestamp("us")),
            "d": pa.array([date(2025, 1, 2)]),
            "price": pa.array([Decimal("12.3400")], pa.decimal128(10, 4)),
            "raw": pa.array([b"ab"]),
            "tags": pa.array([["x", "y"]]),
            "_gs_op": ["i"],
        }
    )
    fmt = PayloadFormat(version=0, rows_per_request=1, one_row=True)
    assert bodies(fmt, rows) == [
        {
            "ts": "2025-01-01T00:00:01.500000+00:00",
            "zero": "2025-01-01T00:00:00+00:00",  # as isoformat() writes it
            "ntz": "2025-01-01T02:03:04.000000",  # zone-less stays zone-less
            "d": "2025-01-02",
            "price": "12.3400",
            "raw": "YWI=",
            "tags": ["x", "y"],
            "_gs_op": "i",
        }
    ]


def test_decode_accepts_an_object_an_array_or_nothing() -> None:
    assert decode_response(b'{"id": 1}', 0, ["u"]) == ([{"id": 1}], ["u"])
    assert decode_response(b'[{"id": 1}, {"id": 2}]', 0, ["u", "d"]) == ([{"id": 1}, {"id": 2}], ["u", "d"])
    assert decode_response(b"", 0, ["i"]) == ([], [])
    assert decode_response(b"null", 0, ["i"]) == ([], [])
    assert decode_response(b"[]", 0, ["i", "i"]) == ([], [])


def test_output_ops_come_from_the_response_else_from_the_sent_rows() -> None:
    # v0: `_gs_op` of the answer wins; otherwise the sent row's, by position.
    assert decode_response(b'[{"id": 1, "_gs_op": "d"}, {"id": 2}]', 0, ["i", "u"])[1] == ["d", "u"]
    # v1: metadata.op wins.
    body = b'[{"metadata": {"op": "u"}, "data": {"id": 1}}, {"data": {"id": 2}}]'
    assert decode_response(body, 1, ["i", "d"]) == ([{"id": 1}, {"id": 2}], ["u", "d"])
    # A different number of rows: the request's single op when all its rows share one ...
    assert decode_response(b'[{"id": 1}, {"id": 2}, {"id": 3}]', 0, ["u", "u"])[1] == ["u", "u", "u"]
    # ... and an error when they do not.
    with pytest.raises(PayloadError) as info:
        decode_response(b'[{"id": 1}]', 0, ["i", "d"])
    assert str(info.value) == (
        "the response has 1 rows for 2 sent, whose ops differ, so the returned rows' ops are ambiguous; "
        'give each returned row its own op ("_gs_op")'
    )


@pytest.mark.parametrize(
    ("body", "version", "message"),
    [
        (b"<html>", 0, "the response is not JSON: <html>"),
        (b"5", 0, "the response must be a JSON object or an array of them, got 5"),
        (b"[1]", 0, "response item 0 is not a JSON object: 1"),
        (b'{"id": 1, "_gs_op": "x"}', 0, 'response item 0 has op "x"; expected "i", "u" or "d"'),
        (
            b'{"id": 1}',
            1,
            'response item 0 has no "data" object; payload_version 1 answers {"metadata": {"op": ...}, '
            '"data": {...}}: {"id":1}',
        ),
        (b'{"metadata": 3, "data": {}}', 1, 'response item 0: "metadata" is not an object: 3'),
    ],
)
def test_malformed_responses_are_named(body: bytes, version: int, message: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_response(body, version, ["i"])
    assert str(info.value) == message


SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("raw", pa.binary()),
        pa.field("_gs_op", pa.string(), nullable=False),
    ]
)
NAMES = {"id": "bigint", "amount": "double", "name": "string", "ts": "timestamp", "price": "decimal(10,2)"}


def test_responses_convert_to_the_output_schema() -> None:
    rows = [
        {"id": 1, "amount": 2, "name": "a", "ts": "2025-01-01T00:00:01.5Z", "price": "1.5", "raw": "YWI=", "x": 1},
        {"id": 2, "ts": "2025-01-01 00:00:02"},  # missing columns are NULL; a zone-less time is UTC
    ]
    out = to_record_batch(rows, ["u", "d"], SCHEMA, NAMES)
    assert out.schema == SCHEMA
    assert out.to_pylist() == [
        {
            "id": 1,
            "amount": 2.0,
            "name": "a",
            "ts": datetime(2025, 1, 1, 0, 0, 1, 500000, tzinfo=UTC),
            "price": Decimal("1.50"),
            "raw": b"ab",
            "_gs_op": "u",
        },
        {
            "id": 2,
            "amount": None,
            "name": None,
            "ts": datetime(2025, 1, 1, 0, 0, 2, tzinfo=UTC),
            "price": None,
            "raw": None,
            "_gs_op": "d",
        },
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": 1, "amount": "abc"}, "field 'amount' (double): \"abc\" does not fit (expected a number)"),
        ({"id": 1.5}, "field 'id' (bigint): 1.5 does not fit (Float value 1.500000 was truncated converting to int64)"),
        ({"id": True}, "field 'id' (bigint): true does not fit (expected a number)"),
        ({"id": 1, "name": 5}, "field 'name' (string): 5 does not fit (expected a string)"),
        (
            {"name": "x"},
            "field 'id' (bigint) is missing or null in row 0, but the output schema does not allow NULL there",
        ),
        (
            {"id": 1, "price": "1.555"},
            "field 'price' (decimal(10,2)): \"1.555\" does not fit (Rescaling Decimal value would cause data loss)",
        ),
        (
            {"id": 1, "ts": "yesterday"},
            "field 'ts' (timestamp): \"yesterday\" does not fit (Invalid isoformat string: 'yesterday')",
        ),
        ({"id": 1, "name": "x" * 200}, None),
        (
            {"id": 1, "amount": "y" * 200},
            "field 'amount' (double): \"" + "y" * 78 + "… does not fit (expected a number)",
        ),
    ],
)
def test_values_that_do_not_fit_name_the_field_and_the_value(row: dict, message: str | None) -> None:
    if message is None:
        to_record_batch([row], ["i"], SCHEMA, NAMES)  # long strings are fine where strings belong
        return
    with pytest.raises(PayloadError) as info:
        to_record_batch([{"id": 0}, row], ["i", "i"], SCHEMA, NAMES)
    assert str(info.value) == message.replace("in row 0", "in row 1")


def test_retry_rules() -> None:
    assert [s for s in (200, 400, 401, 404, 408, 409, 429, 500, 503, 599) if is_retriable(s)] == [
        408,
        429,
        500,
        503,
        599,
    ]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after("3", now) == 3.0
    assert retry_after("0.5", now) == 0.5
    assert retry_after(format_datetime(now + timedelta(seconds=7), usegmt=True), now) == 7.0
    assert retry_after(format_datetime(now - timedelta(seconds=7), usegmt=True), now) == 0.0
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None
    policy = RetryPolicy(max_retries=3, retry_timeout_sec=10, backoff_sec=1, backoff_max_sec=4)
    wait, stop = policy.wait(), policy.stop()
    for retry, (low, high) in enumerate([(0.5, 1), (1, 2), (2, 4), (2, 4), (2, 4)]):
        assert all(low <= wait(attempt(retry + 1)) <= high for _ in range(50))
    assert not stop(attempt(3, elapsed_sec=1, wait_sec=1))
    assert stop(attempt(4, elapsed_sec=1, wait_sec=1))  # 3 retries used
    assert stop(attempt(1, elapsed_sec=9, wait_sec=2))  # would start after retry_timeout_sec


def attempt(number: int, elapsed_sec: float = 0.0, wait_sec: float = 0.0) -> RetryCallState:
    """Tenacity's view of a failed attempt: its number, how long after the first one began it ended, and the wait
    before the next."""
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = number
    state.outcome_timestamp = state.start_time + elapsed_sec
    state.upcoming_sleep = wait_sec
    return state


def test_urls_are_shown_without_credentials_or_query_values() -> None:
    assert redact_url("https://user:pw@api.example.com:8443/v1/hook?token=abc&x=1") == (
        "https://***@api.example.com:8443/v1/hook?token=***&x=***"
    )
    assert redact_url("http://127.0.0.1:9000/h") == "http://127.0.0.1:9000/h"


def errors_of(body: str) -> list[str]:
    text = textwrap.dedent(f"""
        sources:
          src: {{type: generator}}
        transforms:
          h:
{textwrap.indent(textwrap.dedent(body), " " * 12)}
        sinks:
          out: {{type: print, from: h}}
        """)
    return load_pipeline(text)[1].errors


def test_handler_validation_messages() -> None:
    base = "type: handler\nfrom: src\nurl: http://localhost:1/h\n"
    assert errors_of(base + "primary_key: id\npayload_version: 2\n") == [
        "transform 'h' (type 'handler'): field 'payload_version': Input should be 0 or 1 (got 2)"
    ]
    assert errors_of(base) == ["transform 'h' (type 'handler'): missing required field 'primary_key'"]
    assert errors_of(base + "primary_key: id\nschema_override: {amount: money}\n") == [
        "transform 'h' (type 'handler'): field 'schema_override': column 'amount': unknown column type 'money'; "
        "use one of: bigint, int, smallint, tinyint, double, float, string, boolean, binary, date, timestamp, "
        "decimal(p,s) (got {'amount': 'money'})"
    ]
    assert errors_of(base + "primary_key: id\nschema_override: {_gs_op: string}\n") == [
        "transform 'h' (type 'handler'): field 'schema_override': _gs_op cannot be overridden; the handler always "
        "sets it (got {'_gs_op': 'string'})"
    ]
    assert errors_of(base + "primary_key: id\none_row_per_request: true\nbatch_size: 5\n") == [
        "transform 'h' (type 'handler'): batch_size applies only when one_row_per_request is false"
    ]
    assert errors_of("type: handler\nfrom: src\nprimary_key: id\nurl: ftp://x/y\n") == [
        "transform 'h' (type 'handler'): field 'url': must be an http:// or https:// URL with a host (got 'ftp://x/y')"
    ]
    assert errors_of(base + "primary_key: id\ncolour: red\n") == [
        "transform 'h' (type 'handler'): unknown field 'colour'"
    ]


def test_webhook_validation_and_shown_definition() -> None:
    text = """
        sources:
          src: {type: generator}
        sinks:
          w:
            type: webhook
            from: src
            url: https://bot:pw@hooks.example.com/in?sig=abc
            headers: {Authorization: Bearer xyz, X-Trace: "1"}
            payload_version: 1
            skip_on_error: true
        """
    pipeline, report = load_pipeline(textwrap.dedent(text))
    assert report.errors == []
    spec = pipeline.nodes["w"].spec
    assert spec.url == "https://bot:pw@hooks.example.com/in?sig=abc"  # the engine sends the real one
    shown = spec.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    assert shown["url"] == "https://***@hooks.example.com/in?sig=***"
    assert shown["headers"] == {"Authorization": "***", "X-Trace": "1"}
    bad = textwrap.dedent(text).replace("payload_version: 1", "payload_version: 3")
    assert load_pipeline(bad)[1].errors == [
        "sink 'w' (type 'webhook'): field 'payload_version': Input should be 0 or 1 (got 3)"
    ]
