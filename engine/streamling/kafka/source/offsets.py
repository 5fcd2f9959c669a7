"""Partitions, watermarks and starting offsets: the broker questions both the driver (planning an epoch) and the
readers ask."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from streamling.errors import StreamlingError
from streamling.kafka.availability import describe, transient_kafka_error
from streamling.kafka.clients import kafka_config

log = logging.getLogger("streamling.kafka")

# ---------------------------------------------------------------- shared by driver and reader processes


def open_consumer(options: Mapping[str, str], purpose: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer

    group = options.get("kafka_group_id") or f"streamling-{options['app']}"
    return Consumer(
        kafka_config(
            options,
            **{
                "group.id": f"{group}-{options['source']}" if options.get("kafka_group_id") else group,
                "enable.auto.commit": False,
                "enable.partition.eof": purpose == "read",
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 16 * 1024 * 1024,
                "queued.max.messages.kbytes": 32 * 1024,
                "queued.min.messages": 20000,
                # librdkafka 2.x waits this long before the next fetch once a partition's queue passed the two
                # thresholds above (default 1 s). A broker that answers with more than asked fills it at once, and
                # a range read then waited ~1 s after each assign for its first record (measured: 125k records of
                # one partition in 1.1 s at the default, 0.12 s at 10 ms, same CPU).
                "fetch.queue.backoff.ms": 10,
                "session.timeout.ms": 45000,
            },
        )
    )


def list_partitions(consumer, topic: str, timeout: float = 10) -> list[int]:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read metadata of topic '{topic}': {exc.args[0].str()}") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        reason = info.error.str() if info is not None and info.error is not None else "not found"
        if info is not None and info.error is not None and transient_kafka_error(info.error):
            raise StreamlingError.unavailable(f"topic '{topic}' is not available: {reason}")
        raise StreamlingError.retry(f"topic '{topic}' is not available: {reason}")
    return sorted(info.partitions)


def watermarks(consumer, topic: str, partition: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The partition's earliest offset the broker still keeps (retention moves it) and its end, in one request."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    except KafkaException as exc:
        raise StreamlingError.unavailable(
            f"cannot read the end offset of topic '{topic}' partition {partition}: {describe(exc)}"
        ) from None
    return int(low), int(high)


def high_watermark(consumer, topic: str, partition: int) -> int:  # type: ignore[no-untyped-def]
    return watermarks(consumer, topic, partition)[1]


def initial_offsets(consumer, topic: str, partitions: list[int], starting: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Offsets for `starting_offsets`: earliest, latest, or the first record at/after an epoch-ms."""
    from confluent_kafka import KafkaException, TopicPartition

    out: dict[str, int] = {}
    try:
        if starting.isdigit():
            asked = [TopicPartition(topic, p, int(starting)) for p in partitions]
            for tp in consumer.offsets_for_times(asked, timeout=10):
                out[str(tp.partition)] = tp.offset if tp.offset >= 0 else high_watermark(consumer, topic, tp.partition)
            return out
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            out[str(p)] = low if starting == "earliest" else high
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read the offsets of topic '{topic}': {describe(exc)}") from None
    return out


def range_offsets(consumer, topic: str, partitions: list[int], bound: int | datetime) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Where a range bound falls in each partition: an offset clamped to the partition's offsets, or for a time
    the first record whose timestamp is at or after it (the end of the partition when none is)."""
    from confluent_kafka import KafkaException, TopicPartition

    if isinstance(bound, datetime):
        return initial_offsets(consumer, topic, partitions, str(int(bound.timestamp() * 1000)))
    out: dict[str, int] = {}
    try:
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            out[str(p)] = min(max(bound, low), high)
    except KafkaException as exc:
        raise StreamlingError.unavailable(f"cannot read the offsets of topic '{topic}': {describe(exc)}") from None
    return out
