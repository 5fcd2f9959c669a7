"""The Kafka benchmark data: the original's 9-field Avro event, its payloads, topics and producers.

Shared by the single-system script (kafka_avro_sql_blackhole.py) and the suite against peers (suite.py), so every
figure is taken on the same records. Payloads carry the 5-byte Confluent framing and the schema registered under
``<topic>-value``; every record has the Debezium header ``dbz.op: c`` (an insert).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path

from streamling.kafka.avro_block import varint

REPO = Path(__file__).resolve().parent.parent
SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user_id", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "device", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
        {"name": "ts", "type": "long"},
        {"name": "sel_key", "type": "int"},
    ],
}
POOL = 1000
"""Distinct payloads the topics cycle through; record ``i`` is pool entry ``i % POOL`` (so ``sel_key = i % 10``)."""
PRODUCER = {
    "linger.ms": 20,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "lz4",
}


def services_env(*services: str) -> dict[str, str]:
    """Start the local services (idempotent) and return their ``STREAMLING__…`` connection environment."""
    names = services or ("kafka", "registry")
    subprocess.run([sys.executable, str(REPO / "infra" / "services"), "up", *names], check=True)
    out = subprocess.run(
        [sys.executable, str(REPO / "infra" / "services"), "env", *names],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())


def pool_record(i: int) -> dict:
    """Pool entry ``i``: the field values every topic cycles through."""
    countries, devices = ["US", "DE", "FR", "BR", "IN"], ["ios", "android", "web"]
    return {
        "id": 1_000_000 + i,
        "user_id": f"user_{i:05d}",
        "email": f"user{i}@example.com",
        "country": countries[i % 5],
        "device": devices[i % 3],
        "amount": round(i * 3.7, 2),
        "price": Decimal(f"{i}.{(i * 37) % 10000:04d}"),
        "ts": 1_700_000_000_000 + i,
        "sel_key": i % 10,
    }


def _avro(record: dict) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(), record)
    return out.getvalue()


_PARSED: list = []


def _parsed():  # type: ignore[no-untyped-def]
    import fastavro

    if not _PARSED:
        _PARSED.append(fastavro.parse_schema(SCHEMA))
    return _PARSED[0]


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def payload_pool(schema_id: int) -> list[bytes]:
    """The 1,000 distinct framed payloads the blackhole topic cycles through (ids repeat every 1,000 records)."""
    return [framed(schema_id, _avro(pool_record(i))) for i in range(POOL)]


def keyed_payloads(schema_id: int, key_space: int | None = None) -> Callable[[int], bytes]:
    """Payload of record ``i`` with ``id = i % key_space`` (or ``i``): `id` is the first field, so the pool entry's
    tail is reused as is. With a key space that is a multiple of 10, each id always has the same ``sel_key``."""
    tails = [_avro({**pool_record(j), "id": 0})[1:] for j in range(POOL)]  # id 0 encodes as one byte
    prefix = framed(schema_id, b"")
    if key_space:
        return lambda i: prefix + varint(i % key_space) + tails[i % POOL]
    return lambda i: prefix + varint(i) + tails[i % POOL]


def timed_payload(schema_id: int, i: int, ts_ms: int) -> bytes:
    """Record ``i`` with ``id = i`` and ``ts`` = the produce time in ms (the latency scenario)."""
    return framed(schema_id, _avro({**pool_record(i % POOL), "id": i, "ts": ts_ms}))


def create_topic(env: dict[str, str], topic: str, partitions: int) -> int:
    """Create the topic and register the schema; returns the schema id."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    admin = AdminClient({"bootstrap.servers": env["STREAMLING__KAFKA_SOURCE__BROKERS"]})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(timeout=30)
    registry = SchemaRegistryClient({"url": env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]})
    return registry.register_schema(f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO"))


def producer(env: dict[str, str], **overrides: object):  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": env["STREAMLING__KAFKA_SOURCE__BROKERS"], **PRODUCER, **overrides})


def send_all(prod, topic: str, payloads: Iterable[bytes], partitions: int) -> int:  # type: ignore[no-untyped-def]
    """Produce in order, record ``i`` to partition ``i % partitions``, waiting out a full local queue."""
    n = 0
    for i, value in enumerate(payloads):
        while True:
            try:
                prod.produce(topic, value, partition=i % partitions, headers=[("dbz.op", b"c")])
                break
            except BufferError:
                prod.poll(0.1)
        if i % 10000 == 0:
            prod.poll(0)
        n += 1
    prod.flush(120)
    return n


def produce(
    env: dict[str, str], topic: str, records: int, partitions: int, *, keyed: bool = False, key_space: int | None = None
) -> None:
    """A new topic of ``records`` records: the pool cycled (ids repeat every 1,000), or ``keyed``
    (``id = i % key_space``, or ``i``)."""
    schema_id = create_topic(env, topic, partitions)
    if keyed:
        encode = keyed_payloads(schema_id, key_space)
        payloads: Iterable[bytes] = (encode(i) for i in range(records))
    else:
        pool = payload_pool(schema_id)
        payloads = (pool[i % POOL] for i in range(records))
    send_all(producer(env), topic, payloads, partitions)


def paced(
    env: dict[str, str], topic: str, schema_id: int, rate: float, seconds: float, first_id: int = 0, tick: float = 0.01
) -> tuple[int, float]:
    """Produce ``rate`` records/s for ``seconds`` (``id`` counting up from ``first_id``, ``ts`` = produce time in
    ms) to partition 0, in small steps on a fixed schedule; returns (records sent, achieved rate)."""
    prod = producer(env, **{"linger.ms": 1, "compression.type": "none"})
    started = time.time()
    sent = 0
    i = first_id
    while (now := time.time()) < started + seconds:
        due = int((now - started) * rate)
        while sent < due:
            ts = int(time.time() * 1000)
            try:
                prod.produce(topic, timed_payload(schema_id, i, ts), partition=0, headers=[("dbz.op", b"c")])
            except BufferError:
                prod.poll(0.05)
                continue
            sent += 1
            i += 1
        prod.poll(0)
        time.sleep(max(0.0, started + (sent + rate * tick) / rate - time.time()))
    prod.flush(30)
    return sent, sent / (time.time() - started)
