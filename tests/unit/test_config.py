from __future__ import annotations

from pathlib import Path

import pytest

from memq.config import BrokerConfig, env_overrides, load_broker_config
from memq.errors import ConfigError
from memq.producer import ProducerConfig
from memq.protocol import Ack

DEFAULTS = {
    "storage": {"type": "s3", "s3": {"bucket": "my-bucket"}},
    "notification": {"bootstrap_servers": "kafka:9092"},
}


def test_yaml_file_defaults_and_env_overrides(tmp_path: Path) -> None:
    f = tmp_path / "broker.yaml"
    f.write_text(
        "broker_id: b1\ncluster: prod\ntopic_defaults:\n"
        "  storage: {type: s3, s3: {bucket: my-bucket}}\n"
        "  notification: {bootstrap_servers: 'kafka:9092'}\n"
        "  batch: {bytes: 4194304}\n"
        "topics:\n  - name: events\n  - name: logs\n    batch: {ms: 250}\n"
    )
    cfg = load_broker_config(
        f, env={"MEMQ__PORT": "9200", "MEMQ__TOPIC_DEFAULTS__BATCH__MS": "750", "UNRELATED": "x"}
    )
    assert cfg.port == 9200
    events, logs = cfg.topics
    assert events.batch.max_bytes == 4 << 20 and events.batch.ms == 750
    assert logs.batch.max_bytes == 4 << 20 and logs.batch.ms == 250
    assert events.notification_topic("prod") == "memq.prod.events.notifications"
    assert events.storage.public() == {
        "type": "s3",
        "bucket": "my-bucket",
        "region": None,
        "endpoint_url": None,
        "use_hash_prefix": True,
    }


def test_env_overrides_parse_yaml_scalars() -> None:
    assert env_overrides({"MEMQ__A__B": "3", "MEMQ__C": "true", "MEMQ__D": "x y"}) == {
        "a": {"b": 3},
        "c": True,
        "d": "x y",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"porrt": 1}, "porrt: unknown key; did you mean 'port'?"),
        ({"port": -1}, "port: Input should be greater than or equal to 0 (got -1)"),
        ({"topics": [{"name": "t", **DEFAULTS, "batch": {"bytez": 1}}]}, "did you mean 'bytes'?"),
        ({"topics": [{"name": "bad/name", **DEFAULTS}]}, "topics.0.name"),
        (
            {
                "topics": [
                    {
                        "name": "t",
                        "storage": {"type": "s3"},
                        "notification": DEFAULTS["notification"],
                    }
                ]
            },
            "needs an `s3:` section",
        ),
        ({"auto_create_topics": True}, "auto_create_topics needs topic_defaults"),
        (
            {"topics": [{"name": "t", **DEFAULTS}, {"name": "t", **DEFAULTS}]},
            "topics listed twice: t",
        ),
        (
            {"memory_limit_bytes": 4 << 20, "topics": [{"name": "t", **DEFAULTS}]},
            "memory_limit_bytes",
        ),
        (
            {"topics": [{"name": "t", **DEFAULTS, "max_block_bytes": 9 << 20}]},
            "exceeds batch.bytes",
        ),
        ({"gc_thresholds": [0, 10, 10]}, "gc_thresholds: give three counts, the first >= 1"),
        ({"gc_thresholds": [700, 10]}, "gc_thresholds"),
    ],
)
def test_errors_name_the_key_and_the_fix(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_broker_config(data=data, env={})
    assert message in str(e.value)


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_broker_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_broker_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_broker_config(bad)


def test_topic_from_defaults() -> None:
    cfg = BrokerConfig.model_validate({"auto_create_topics": True, "topic_defaults": DEFAULTS})
    t = cfg.topic_from_defaults("new-topic")
    assert t.name == "new-topic" and t.storage.s3 is not None and t.storage.s3.bucket == "my-bucket"


def test_producer_config_accepts_kafka_keys_and_rejects_typos() -> None:
    a = ProducerConfig.from_mapping({"bootstrap.servers": "h:1", "acks": "all", "linger.ms": 5})
    b = ProducerConfig.from_mapping(bootstrap_servers="h:1", acks=-1, linger_ms=5)
    assert a == b and a.acks is Ack.ALL
    assert ProducerConfig.from_mapping({"acks": 0}).acks is Ack.NONE
    with pytest.raises(ConfigError, match=r"did you mean 'linger\.ms'"):
        ProducerConfig.from_mapping({"linger.sm": 5})
    with pytest.raises(ConfigError, match="acks must be 0, 1 or all"):
        ProducerConfig.from_mapping({"acks": "two"})
    with pytest.raises(ConfigError, match=r"compression\.type"):
        ProducerConfig.from_mapping({"compression.type": "brotli"})


def test_secret_env_overrides_stay_literal_strings() -> None:
    from memq.config import env_overrides

    out = env_overrides({"MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.PASSWORD": "0123",
                         "MEMQ__AUTH__TOKEN_SECRET": "yes", "MEMQ__PORT": "9100"})  # fmt: skip
    assert out["topic_defaults"]["notification"]["producer"]["sasl.password"] == "0123"
    assert out["auth"]["token_secret"] == "yes" and out["port"] == 9100


def test_topic_configs_are_stored_without_secrets_and_refilled_by_each_broker() -> None:
    from memq.config import TopicConfig, TopicSettings

    settings = {
        "storage": {"type": "s3", "s3": {"bucket": "bkt", "access_key_id": "AK",
                                         "secret_access_key": "SK"}},
        "notification": {"bootstrap_servers": "k:9092", "producer": {
            "security.protocol": "SASL_SSL", "sasl.username": "memq", "sasl.password": "pw"}},
    }  # fmt: skip
    cfg = TopicConfig.model_validate({**settings, "name": "t"})
    stored = cfg.without_secrets()
    dumped = stored.model_dump_json()
    assert "pw" not in dumped and "SK" not in dumped and "AK" not in dumped
    assert stored.notification.producer == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "memq",
    }
    again = stored.with_secrets_from(TopicSettings.model_validate(settings))
    assert again.notification.producer["sasl.password"] == "pw"
    assert again.storage.s3 is not None and again.storage.s3.secret_access_key is not None
    assert again.storage.s3.secret_access_key.get_secret_value() == "SK"


def test_gc_thresholds_default_can_be_set_or_left_to_python() -> None:
    assert load_broker_config(data={}, env={}).gc_thresholds == (20_000, 20, 100)
    cfg = load_broker_config(data={"gc_thresholds": [5000, 10, 50]}, env={})
    assert cfg.gc_thresholds == (5000, 10, 50)
    assert load_broker_config(data={"gc_thresholds": None}, env={}).gc_thresholds is None
