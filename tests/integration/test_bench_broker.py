"""The benchmark suite's check of what the broker already holds, against the real local broker."""

from __future__ import annotations

from tests.bench_util import load_bench_module


def test_counts_the_records_a_new_topic_adds_and_warns_above_the_limit(kafka, kafka_env, monkeypatch, capsys) -> None:
    suite = load_bench_module("suite")
    topics, records = suite.broker_records(kafka_env)
    topic = kafka.topic("bench_check", partitions=4)
    kafka.produce_json(topic, [{"n": i} for i in range(25)])

    assert suite.broker_records(kafka_env) == (topics + 1, records + 25)

    monkeypatch.setattr(suite, "BROKER_RECORDS_WARN", records + 24)
    suite.warn_if_broker_full(kafka_env)
    assert f"the broker already holds {records + 25:,} records in {topics + 1} topics" in capsys.readouterr().err

    monkeypatch.setattr(suite, "BROKER_RECORDS_WARN", records + 25)
    suite.warn_if_broker_full(kafka_env)
    assert capsys.readouterr().err == ""
