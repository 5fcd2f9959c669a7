"""A Kafka topic as the control plane sees it (`Operator.reads`/`writes`): the source, the sink and a hybrid's
stream phase name the same topic the same way, so one topic is one asset."""

from __future__ import annotations

from streamling.plugin import ExternalObject


def topic_object(topic: str) -> ExternalObject:
    return ExternalObject("kafka", (topic,), f"Kafka topic `{topic}`.", {"topic": topic})
