"""The notification consumer's librdkafka settings: latency defaults, user overrides."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer

from memq.consumer.config import ConsumerConfig
from memq.consumer.membership import notification_consumer_conf
from memq.errors import ConfigError


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


def test_the_classic_group_protocol_by_default_with_the_clients_session() -> None:
    conf = notification_consumer_conf(ConsumerConfig.model_validate({"group.id": "g"}), "k:9092")
    assert conf["group.protocol"] == "classic"
    assert (conf["session.timeout.ms"], conf["heartbeat.interval.ms"]) == (45_000, 3000)


def test_the_consumer_group_protocol_leaves_session_and_heartbeat_to_the_broker() -> None:
    cfg = ConsumerConfig.model_validate({"group.id": "g", "group.protocol": "consumer"})
    conf = notification_consumer_conf(cfg, "k:9092")
    assert conf["group.protocol"] == "consumer"
    assert "session.timeout.ms" not in conf and "heartbeat.interval.ms" not in conf
    # librdkafka accepts exactly this (it refuses a consumer given either of them).
    Consumer(conf).close()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"session.timeout.ms": 6000}, "session.timeout.ms"),
        ({"heartbeat.interval.ms": 500}, "heartbeat.interval.ms"),
        ({"kafka": {"session.timeout.ms": 6000}}, "session.timeout.ms"),
        ({"kafka": {"partition.assignment.strategy": "cooperative-sticky"}},
         "partition.assignment.strategy"),
    ],
)  # fmt: skip
def test_classic_group_settings_with_the_consumer_protocol_are_a_config_error(
    given: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as e:
        ConsumerConfig.from_mapping({"group.id": "g", "group.protocol": "consumer", **given})
    (line,) = [x for x in str(e.value).splitlines() if named in x]
    assert "group.protocol=consumer" in line and "broker" in line


def test_the_group_protocol_is_set_once_as_a_consumer_setting() -> None:
    with pytest.raises(ConfigError, match=r"set group\.protocol as a consumer setting"):
        ConsumerConfig.from_mapping({"group.id": "g", "kafka": {"group.protocol": "consumer"}})
    with pytest.raises(ConfigError, match=r"group\.protocol"):
        ConsumerConfig.from_mapping({"group.id": "g", "group.protocol": "eager"})


def test_the_local_stacks_short_session_is_not_added_to_the_consumer_protocol() -> None:
    from memq.consumer.session import local_group_session

    cfg = local_group_session(
        ConsumerConfig.model_validate({"group.id": "g", "group.protocol": "consumer"})
    )
    conf = notification_consumer_conf(cfg, "k:9092")
    assert "session.timeout.ms" not in conf and "heartbeat.interval.ms" not in conf
    Consumer(conf).close()
