"""Kafka producer keys memq.Producer has no field for (issue 43): each is honoured under
MemQ's name, accepted as a no-op, or refused with one line saying what to do; none is an
"unknown key" (enable.idempotence=true was, though MemQ is always idempotent)."""

from __future__ import annotations

import pytest

from memq.errors import ConfigError
from memq.formats.compression import Compression
from memq.producer import ProducerConfig
from memq.producer.config import KAFKA_PRODUCER_KEYS
from memq.protocol import Ack


def refused(conf: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as e:
        ProducerConfig.from_mapping(conf)
    text = str(e.value)
    assert "\n" not in text and "unknown key" not in text, text
    return text


@pytest.mark.parametrize("value", [True, "true", "TRUE", 1, "1"])
def test_enable_idempotence_true_is_accepted_and_changes_nothing(value: object) -> None:
    assert ProducerConfig.from_mapping({"enable.idempotence": value}) == ProducerConfig()
    assert ProducerConfig.from_mapping(enable_idempotence=value) == ProducerConfig()


@pytest.mark.parametrize("value", [False, "false", 0])
def test_enable_idempotence_false_is_refused_in_one_line(value: object) -> None:
    text = refused({"enable.idempotence": value})
    assert text.startswith(f"invalid ProducerConfig setting enable.idempotence={value!r}: ")
    assert "always idempotent" in text and "remove the key" in text


def test_kafka_spellings_of_memq_keys_work() -> None:
    cfg = ProducerConfig.from_mapping(
        {"bootstrap.servers": "b:1", "acks": -1, "linger.ms": 5, "client.id": "app",
         "compression.type": "lz4", "retries": 3, "delivery.timeout.ms": 30_000}
    )  # fmt: skip
    assert (cfg.acks, cfg.linger_ms, cfg.client_id) == (Ack.ALL, 5, "app")
    assert (cfg.compression_type, cfg.retries) == (Compression.LZ4, 3)
    assert ProducerConfig.from_mapping({"acks": "all"}).acks == Ack.ALL
    # librdkafka's names of the same settings
    cfg = ProducerConfig.from_mapping(
        {"queue.buffering.max.ms": 7, "queue.buffering.max.kbytes": 65536,
         "message.timeout.ms": 9000, "request.required.acks": "1",
         "compression.codec": "gzip", "message.send.max.retries": 2,
         "metadata.broker.list": "b:2"}
    )  # fmt: skip
    assert (cfg.linger_ms, cfg.buffer_memory, cfg.delivery_timeout_ms) == (7, 64 << 20, 9000)
    assert (cfg.acks, cfg.compression_type, cfg.retries) == (Ack.LEADER, Compression.GZIP, 2)
    assert cfg.bootstrap_servers == "b:2"


def test_a_setting_given_under_both_names_is_refused() -> None:
    text = refused({"linger.ms": 5, "queue.buffering.max.ms": 10})
    assert "queue.buffering.max.ms" in text and "give one of them" in text


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("max.in.flight.requests.per.connection", 5, "max.in.flight"),
        ("max.request.size", 1 << 20, "set batch.size"),
        ("transactional.id", "tx-1", "no transactions"),
        ("key.serializer", "StringSerializer", "serialize keys before produce()"),
        ("partitioner", "murmur2", "no producer-side partitions"),
        ("batch.num.messages", 10_000, "set batch.size"),
        ("queue.buffering.max.messages", 100_000, "set buffer.memory"),
        ("sasl.mechanism", "PLAIN", "auth.token"),
        ("sasl.password", "x", "auth.token"),
    ],
)
def test_kafka_keys_memq_does_not_have_say_what_to_do(key: str, value: object, says: str) -> None:
    text = refused({key: value})
    assert text.startswith(f"invalid ProducerConfig setting {key}=") and says in text


def test_sasl_security_protocols_name_the_token() -> None:
    text = refused({"security.protocol": "SASL_SSL"})
    assert "has no SASL" in text and "auth.token" in text


def test_every_entry_is_reachable_and_says_something() -> None:
    for key, spec in KAFKA_PRODUCER_KEYS.items():
        assert spec.says and key not in ProducerConfig.model_fields, key
        assert spec.to is None or spec.to in {f.alias for f in ProducerConfig.model_fields.values()}
