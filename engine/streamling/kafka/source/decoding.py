"""Kafka records → Arrow: Avro through the Schema Registry (one cached decoder per worker), JSON, the
Debezium ``dbz.op`` header as ``_gs_op``, and dead letters for records that cannot be decoded."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from streamling.core.held import HELD
from streamling.core.rows import GS_OP
from streamling.dead_letters import DeadLetter
from streamling.errors import StreamlingError
from streamling.kafka.availability import Outage, patience, wait_out
from streamling.kafka.avro import AvroDecoder
from streamling.kafka.clients import registry, subject_of
from streamling.kafka.source.metadata import METADATA_NAMES

log = logging.getLogger("streamling.kafka")

DBZ_OPS = {b"c": "i", b"r": "i", b"u": "u", b"d": "d"}


def decoder_for(options: Mapping[str, str]) -> AvroDecoder:
    """One decoder per process and source's reader schema (it caches the writer schemas it met), kept while a run
    reads with it (`core/held.py`)."""
    overrides = options.get("schema_id_overrides", "{}")
    key = "/".join((options["reader_schema_id"], options["topic"], options["source"], overrides))
    return HELD.get("avro decoder", key, lambda: _decoder(options, overrides))


def _decoder(options: Mapping[str, str], overrides: str) -> AvroDecoder:
    subject = subject_of(options["topic"])
    outage = Outage(f"kafka source '{options['source']}'", "Schema Registry", patience(options))

    def fetch_writer(schema_id: int) -> tuple[str, list[tuple[str, int]]]:
        """A new writer schema id blocks this read until the registry answers (or the patience ends), so no
        position moves past records that could not be decoded."""

        def fetch() -> tuple[str, list[tuple[str, int]]]:
            client = registry(options)  # only for a writer schema other than the reader's
            schema = client.get_schema(schema_id)
            return schema.schema_str, [(v.subject, v.version) for v in client.get_schema_versions(schema_id)]

        try:
            return wait_out(fetch, outage)
        except Exception as exc:
            if getattr(exc, "http_status_code", None) == 404:  # the id is unknown: the record's fault
                raise StreamlingError.user("not in the Schema Registry") from None
            raise StreamlingError.retry(
                f"failed to fetch schema id {schema_id} from the Schema Registry: {exc}"
            ) from None

    return AvroDecoder(
        json.loads(options["reader_schema"]),
        int(options["reader_schema_version"]),
        subject,
        options["topic"],
        fetch_writer,
        validate_ordering=options.get("validate_writer_schema_ordering", "true") == "true",
        overrides={int(k): int(v) for k, v in json.loads(overrides).items()},
        reader_id=int(options["reader_schema_id"]),
    )


def op_of_headers(headers: list | None) -> str | None:  # type: ignore[type-arg]
    """``_gs_op`` from the ``dbz.op`` header; None for an unknown value."""
    if not headers:
        return "i"
    key, value = headers[0]
    if key == "dbz.op" and len(headers) == 1:  # the common case, without a loop
        return DBZ_OPS.get(value or b"")
    for key, value in headers:
        if key == "dbz.op":
            return DBZ_OPS.get(value or b"")
    return "i"


def dead_letter_of(message: Any, error: str) -> DeadLetter:
    return DeadLetter(
        error=error,
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or []),
    )


def decode_json(
    messages: list,  # type: ignore[type-arg]
    where: str,
    arrow_schema: pa.Schema,
    rejected: list[tuple[int, str]] | None = None,
) -> pa.RecordBatch:
    """JSON payloads → Arrow; a bad one raises naming it, or with `rejected` is listed there and left out."""
    import pyarrow.json as pajson

    value_fields = [f for f in arrow_schema if f.name != GS_OP and f.name not in METADATA_NAMES]
    value_schema = pa.schema(value_fields)
    options = pajson.ParseOptions(explicit_schema=value_schema, unexpected_field_behavior="ignore")
    problems: dict[int, str] = {}
    payloads: dict[int, bytes] = {}
    for i, m in enumerate(messages):
        payload = m.value()
        if not payload:
            problems[i] = f"message at {where} offset {m.offset()} has an empty payload (tombstone)"
            if rejected is None:
                break
            continue
        payloads[i] = payload.replace(b"\n", b" ").replace(b"\r", b" ")
    if problems and rejected is None:
        raise StreamlingError.user(next(iter(problems.values())))
    empty = pa.RecordBatch.from_pylist([], value_schema)
    if not payloads:
        if rejected is not None:
            rejected += sorted(problems.items())
        return empty
    try:
        table = pajson.read_json(pa.py_buffer(b"\n".join(payloads.values())), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for i, payload in payloads.items():
            try:
                pajson.read_json(pa.py_buffer(payload), parse_options=options)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                reason = str(exc).splitlines()[0]
                problem = (
                    f"message at {where} offset {messages[i].offset()} is not valid JSON for the declared schema: "
                    f"{reason}"
                )
                if rejected is None:
                    raise StreamlingError.user(problem) from None
                problems[i] = problem
        if rejected is None:
            raise
        good = [p for i, p in payloads.items() if i not in problems]
        table = pajson.read_json(pa.py_buffer(b"\n".join(good)), parse_options=options) if good else None
    if rejected is not None:
        rejected += sorted(problems.items())
    return table.combine_chunks().to_batches()[0] if table is not None and table.num_rows else empty
