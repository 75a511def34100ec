"""The notification consumer's librdkafka settings: latency defaults, user overrides."""

from __future__ import annotations

from memq.consumer.config import ConsumerConfig
from memq.consumer.membership import notification_consumer_conf


def test_short_fetch_wait_by_default() -> None:
    conf = notification_consumer_conf(ConsumerConfig.model_validate({"group.id": "g"}), "k:9092")
    assert conf["fetch.wait.max.ms"] == 100
    assert conf["topic.metadata.refresh.interval.ms"] == 10_000  # grown partitions: 10 s
    assert conf["bootstrap.servers"] == "k:9092"
    assert conf["group.id"] == "g"
    assert conf["client.id"] == "memq-consumer"  # the member's name in group listings
    assert conf["enable.auto.commit"] is False


def test_user_kafka_settings_win() -> None:
    cfg = ConsumerConfig.model_validate(
        {"group.id": "g", "kafka": {"fetch.wait.max.ms": 500, "security.protocol": "SSL"}}
    )
    conf = notification_consumer_conf(cfg, "k:9092")
    assert conf["fetch.wait.max.ms"] == 500
    assert conf["security.protocol"] == "SSL"
