"""KafkaNotificationSink.learn_partitions: after notification.partitions grew, the producer
asks Kafka for the topic's partitions at once instead of at its next periodic metadata
refresh (5 minutes), so notifications reach the new partitions. Stub producer, no Kafka."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from memq.config import NotificationConfig
from memq.storage_handlers.kafka_sink import KafkaNotificationSink

T = "memq.c.t.notifications"


class _Producer:
    """Reports ``partitions[0]`` partitions for T on the first metadata request,
    ``partitions[1]`` on the next and so on (the last one from then on)."""

    reports: list[int] = []

    def __init__(self, conf: dict[str, Any], logger: Any = None) -> None:
        self.asked = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        assert topic == T
        n = self.reports[min(self.asked, len(self.reports) - 1)]
        self.asked += 1
        return SimpleNamespace(
            topics={T: SimpleNamespace(error=None, partitions=dict.fromkeys(range(n)))}
        )

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(confluent_kafka, "Producer", _Producer)
    s = KafkaNotificationSink(NotificationConfig(bootstrap_servers="kafka.invalid:9092"))
    yield s
    s.close(timeout=1)


def test_a_topic_first_published_to_needs_no_request(sink: Any) -> None:
    _Producer.reports = [2]
    assert sink.learn_partitions(T, 2) is None  # its first publish asks Kafka
    assert sink.learn_partitions(T, 2) is None  # the same count: nothing to learn
    assert sink._producer.asked == 0


def test_grown_partitions_are_asked_for_until_kafka_reports_them(sink: Any) -> None:
    _Producer.reports = [2, 2, 4]  # Kafka's metadata has them on the third request
    sink.learn_partitions(T, 2)
    assert sink.learn_partitions(T, 4) == 4
    assert sink._producer.asked == 3
    assert sink.learn_partitions(T, 4) is None  # learnt: no more requests
    assert sink._producer.asked == 3


def test_kafka_never_reporting_them_is_a_warning_after_the_timeout(
    sink: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _Producer.reports = [2]
    sink.learn_partitions(T, 2)
    assert sink.learn_partitions(T, 4, timeout=0.3) == 2
    assert "Kafka reports 2 partitions, 4 configured" in caplog.text
