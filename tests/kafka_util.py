"""Producing to and reading from the real test broker, with the real schema registry."""

from __future__ import annotations

import copy
import io
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient


class KafkaTestbed:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.brokers = env["STREAMLING__KAFKA_SOURCE__BROKERS"]
        self.registry_url = env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]
        self.admin = AdminClient({"bootstrap.servers": self.brokers})
        self.registry = SchemaRegistryClient({"url": self.registry_url})
        self.producer = Producer({"bootstrap.servers": self.brokers, "linger.ms": 5})

    def close(self) -> None:
        self.producer.flush(30)
        del self.producer, self.admin

    def topic(self, prefix: str = "t", partitions: int = 4) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(timeout=30)
        return name

    def register(self, topic: str, schema: Mapping[str, Any] | list[Any]) -> int:
        return self.registry.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))

    def produce_avro(
        self,
        topic: str,
        schema: Mapping[str, Any] | list[Any],
        records: Sequence[Mapping[str, Any] | None],
        *,
        schema_id: int | None = None,
        ops: Sequence[bytes | None] | None = None,
        partition_of=None,
        timestamp_ms: int | None = None,
    ) -> None:
        schema_id = schema_id if schema_id is not None else self.register(topic, schema)
        parsed = fastavro.parse_schema(copy.deepcopy(schema))  # a record, or a union such as ["null", record]
        for i, record in enumerate(records):
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, None if record is None else dict(record))
            op = ops[i] if ops is not None else b"c"
            self.send(
                topic,
                b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue(),
                key=str((record or {}).get("id", i)).encode(),
                headers=None if op is None else [("dbz.op", op)],
                partition=partition_of(i) if partition_of else i % 4,
                timestamp_ms=timestamp_ms,
            )
        self.producer.flush(30)

    def produce_json(self, topic: str, records: Iterable[Mapping[str, Any]]) -> None:
        for i, record in enumerate(records):
            self.send(topic, json.dumps(record).encode(), key=str(i).encode(), partition=i % 4)
        self.producer.flush(30)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers=None,
        partition: int = 0,
        timestamp_ms: int | None = None,
    ) -> None:
        extra = {"timestamp": timestamp_ms} if timestamp_ms else {}
        self.producer.produce(topic, value=value, key=key, headers=headers, partition=partition, **extra)
        self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush(30)

    def read_all(self, topic: str, expected: int, timeout: float = 60) -> list[dict[str, Any]]:
        """Every message of `topic` (key, headers, partition, decoded Avro value) once `expected` arrived."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.brokers,
                "group.id": f"reader-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[dict[str, Any]] = []
        writers: dict[int, Any] = {}
        deadline = time.time() + timeout
        while len(out) < expected and time.time() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                if m.error():
                    continue
                value = m.value()
                schema_id = int.from_bytes(value[1:5], "big")
                if schema_id not in writers:
                    writers[schema_id] = fastavro.parse_schema(
                        json.loads(self.registry.get_schema(schema_id).schema_str)
                    )
                out.append(
                    {
                        "key": m.key().decode(),
                        "headers": dict(m.headers() or []),
                        "partition": m.partition(),
                        "schema_id": schema_id,
                        "value": fastavro.schemaless_reader(io.BytesIO(value[5:]), writers[schema_id], None),
                    }
                )
        consumer.close()
        return out
