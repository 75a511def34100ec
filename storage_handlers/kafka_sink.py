"""Notification sink: publishes one notification per stored batch to a Kafka topic.

confluent-kafka producer with ``acks=all`` and idempotence on; :meth:`publish`
returns a future resolved by the delivery report, so the broker acks producers
only after Kafka acknowledged the pointer.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memq.errors import ConfigError, NotificationError
from memq.formats.notification import Notification, encode_notification

__all__ = ["KafkaNotificationSink", "KafkaSinkConfig", "NotificationAck", "ensure_topic"]

log = logging.getLogger(__name__)


class KafkaSinkConfig(BaseModel):
    """Where notifications go (``notification`` in broker and topic config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    topic: str = Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")
    #: Partitions of the notification topic when MemQ creates it: the read parallelism.
    partitions: int = Field(default=8, ge=1, le=10_000)
    replication_factor: int = Field(default=-1, ge=-1, le=32)  # -1: the cluster default
    create_topic: bool = True
    delivery_timeout_ms: int = Field(default=30_000, ge=1_000)
    #: Extra librdkafka settings (security.protocol, sasl.*, ssl.*, ...).
    producer: dict[str, str | int | float | bool] = {}


@dataclass(frozen=True, slots=True)
class NotificationAck:
    topic: str
    partition: int
    offset: int


def ensure_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int = -1,
    extra: dict[str, Any] | None = None,
    timeout: float = 15.0,
) -> bool:
    """Create ``topic`` if missing; True when it was created by this call."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})
    try:
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as e:
        raise NotificationError(f"cannot reach Kafka at {bootstrap}: {e}") from e
    tmeta = meta.topics.get(topic)
    if tmeta is not None and tmeta.error is None and tmeta.partitions:
        return False
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )[topic]
    try:
        fut.result(timeout)
    except KafkaException as e:
        if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise NotificationError(f"cannot create notification topic {topic!r}: {e}") from e
    return True


class KafkaNotificationSink:
    """Thread-safe publisher of notifications with delivery futures."""

    def __init__(self, cfg: KafkaSinkConfig) -> None:
        from confluent_kafka import Producer

        self.config = cfg
        conf: dict[str, Any] = {
            "bootstrap.servers": cfg.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": cfg.delivery_timeout_ms,
            "socket.keepalive.enable": True,
            **cfg.producer,
        }
        if str(conf.get("acks")) not in {"all", "-1"}:
            raise ConfigError("notification.producer.acks must stay 'all': acks are only safe then")
        try:
            self._producer = Producer(conf)
        except Exception as e:
            raise ConfigError(f"invalid notification producer settings: {e}") from e
        if cfg.create_topic:
            ensure_topic(
                cfg.bootstrap_servers,
                cfg.topic,
                cfg.partitions,
                cfg.replication_factor,
                {
                    k: v
                    for k, v in cfg.producer.items()
                    if k.startswith(("security.", "sasl.", "ssl."))
                },
            )
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="notify-poll", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    def publish(self, notification: Notification) -> Future[NotificationAck]:
        """Send one notification; the future resolves once Kafka acknowledged it (acks=all)."""
        fut: Future[NotificationAck] = Future()
        fut.set_running_or_notify_cancel()

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                fut.set_exception(
                    NotificationError(
                        f"notification for {notification.key} not acknowledged by Kafka topic "
                        f"{self.config.topic!r}: {err.str() if hasattr(err, 'str') else err}"
                    )
                )
            else:
                fut.set_result(NotificationAck(msg.topic(), msg.partition(), msg.offset()))

        if self._closed.is_set():
            fut.set_exception(NotificationError("notification sink is closed"))
            return fut
        payload = encode_notification(notification)
        while True:
            try:
                self._producer.produce(self.config.topic, value=payload, on_delivery=delivered)
                return fut
            except BufferError:
                # librdkafka's local queue is full: wait for deliveries to drain it.
                self._producer.poll(0.1)
            except Exception as e:
                fut.set_exception(NotificationError(f"cannot enqueue notification: {e}"))
                return fut

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding deliveries; returns how many are still pending."""
        return int(self._producer.flush(timeout))

    def close(self, timeout: float = 30.0) -> None:
        remaining = self.flush(timeout)
        if remaining:
            log.warning("%d notifications still undelivered at close", remaining)
        self._closed.set()
        self._poller.join(timeout=5)
