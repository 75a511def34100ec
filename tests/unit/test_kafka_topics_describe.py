"""describe_topic when Kafka does not say what a notification topic's retention is: the
answer says why instead of guessing (Apache Kafka always reports retention.ms, the
topic's own or its default: tests/integration/test_retention.py). Stub admin, no Kafka."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from memq.storage_handlers import kafka_topics

T = "memq.c.t.notifications"


class _Admin:
    def __init__(self, configs: dict[str, Any] | Exception) -> None:
        self.configs = configs

    def list_topics(self, timeout: float) -> Any:
        topic = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={T: topic})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> Any:
        fut: Future[Any] = Future()
        if isinstance(self.configs, Exception):
            fut.set_exception(self.configs)
        else:
            fut.set_result(self.configs)
        return {resources[0]: fut}


def described(monkeypatch: pytest.MonkeyPatch, configs: dict[str, Any] | Exception) -> Any:
    monkeypatch.setattr(kafka_topics, "_admin", lambda _b, _e: _Admin(configs))
    return kafka_topics.describe_topic("kafka:9092", T)


def test_kafkas_value_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    state = described(monkeypatch, {"retention.ms": SimpleNamespace(value="691200000")})
    assert (state.partitions, state.retention_ms, state.retention_note) == (2, 691_200_000, None)


def test_no_retention_in_the_answer_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    state = described(monkeypatch, {"cleanup.policy": SimpleNamespace(value="delete")})
    assert state.partitions == 2 and state.retention_ms is None
    assert "answer has no retention.ms" in (state.retention_note or "")


def test_a_value_that_is_no_number_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    state = described(monkeypatch, {"retention.ms": SimpleNamespace(value="forever")})
    assert state.retention_ms is None
    assert state.retention_note == "Kafka reported retention.ms='forever', not a number"


def test_a_refused_describe_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"))
    state = described(monkeypatch, refused)
    assert state.retention_ms is None
    assert "describe-configs failed" in (state.retention_note or "")
    assert "TOPIC_AUTHORIZATION_FAILED" in (state.retention_note or "")
