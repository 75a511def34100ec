"""Notification sink: publishes one notification per stored batch to a Kafka topic.

confluent-kafka producer with ``acks=all`` and idempotence on; :meth:`publish`
returns a future resolved by the delivery report, so the broker acks producers
only after Kafka acknowledged the pointer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from memq.config import NotificationConfig
from memq.errors import ConfigError, NotificationError
from memq.formats.notification import Notification, encode_notification

__all__ = ["KafkaNotificationSink", "NotificationAck", "ensure_topic"]

log = logging.getLogger(__name__)

#: Notifications that may wait for room in the producer's queue before publish fails fast.
MAX_BACKLOG = 10_000

#: Errors after which an idempotent producer stays stuck even when librdkafka does not
#: flag them fatal (seen after outages): the sink replaces the producer.
_RESET_CODES = frozenset(
    {
        "INVALID_PRODUCER_EPOCH",
        "PRODUCER_FENCED",
        "UNKNOWN_PRODUCER_ID",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "INVALID_PRODUCER_ID_MAPPING",
        "_FENCED",
        "_FATAL",
    }
)


def _needs_reset(err: Any) -> bool:
    from confluent_kafka import KafkaError

    codes = {getattr(KafkaError, n, None) for n in _RESET_CODES} - {None}
    return bool(err.fatal()) or err.code() in codes


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
    what: str = "notification topic",
    configs: dict[str, str] | None = None,
    admin: Any = None,
) -> bool:
    """Create ``topic`` if missing, with the Kafka topic ``configs`` (e.g. ``retention.ms``);
    True when it was created by this call (an existing topic is left as it is).

    One CreateTopics request answers both questions (TOPIC_ALREADY_EXISTS means it is
    there), so a broker starting 1,000 topics does not list Kafka's every topic 1,000
    times. Only when Kafka refuses the create (no permission, a policy) is the topic
    looked up in the full listing: an existing topic needs no create permission.
    ``admin`` reuses a caller's AdminClient (a new one per call costs a connection).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    if admin is None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log, **(extra or {})}
        admin = AdminClient(conf)
    fut = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=partitions,
                replication_factor=replication_factor,
                config=dict(configs or {}),
            )
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )[topic]
    try:
        fut.result(timeout)
        return True
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        refused = e
    try:
        # Listing every topic (not just this one) never triggers broker-side auto-creation.
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise NotificationError(f"cannot reach Kafka at {bootstrap}: {e}") from e
    tmeta = meta.topics.get(topic)
    if tmeta is not None and tmeta.error is None and tmeta.partitions:
        return False
    raise NotificationError(f"cannot create {what} {topic!r}: {refused}") from refused


class KafkaNotificationSink:
    """Thread-safe publisher of notifications with delivery futures.

    An idempotent librdkafka producer that hits a fatal or fencing error (seen after
    Kafka outages) refuses every later message; the sink then replaces it with a fresh
    producer on the next publish, so one Kafka incident does not disable the broker's
    notifications for good.
    """

    def __init__(self, cfg: NotificationConfig) -> None:
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
        self._conf = conf
        self._lock = threading.Lock()
        self._admins: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        #: Partition counts of the notification topics this sink was asked to publish to.
        self._known: dict[str, int] = {}
        self._fatal: str | None = None
        self.producer_resets = 0
        self._producer = self._new_producer()
        self._closed = threading.Event()
        #: Notifications waiting for room in librdkafka's queue (enqueued by the poll thread).
        self._backlog: deque[tuple[str, bytes, bytes | None, Any, Future[NotificationAck]]] = (
            deque()
        )
        self._poller = threading.Thread(target=self._poll_loop, name="notify-poll", daemon=True)
        self._poller.start()

    def ensure_topic(
        self,
        topic: str,
        notification: NotificationConfig | None = None,
        retention_ms: int | None = None,
    ) -> bool:
        """Create the notification ``topic`` if missing and allowed, with ``notification``'s
        partitions and replication (the topic's own settings: topics sharing this sink may
        differ) and Kafka ``retention.ms``; True when created."""
        cfg = notification or self.config
        if not cfg.create_topic:
            return False
        security = {
            k: v for k, v in cfg.producer.items() if k.startswith(("security.", "sasl.", "ssl."))
        }
        return ensure_topic(
            cfg.bootstrap_servers,
            topic,
            cfg.partitions,
            cfg.replication_factor,
            security,
            configs=None if retention_ms is None else {"retention.ms": str(retention_ms)},
            admin=self._admin_for(cfg.bootstrap_servers, security),
        )

    def learn_partitions(self, topic: str, partitions: int, timeout: float = 10.0) -> int | None:
        """Make the producer publish to all ``partitions`` partitions of ``topic`` from now
        on; returns the count it knows (None: not asked, it asks on its first publish).

        librdkafka refreshes a topic's partition count only every
        ``topic.metadata.refresh.interval.ms`` (5 minutes): after ``notification.partitions``
        grew, notifications would go to the old partitions only until then. A topic this
        sink has not published to needs nothing (its first publish asks Kafka); one it
        knows with fewer partitions is asked for again, until Kafka reports them all
        (a Kafka cluster's brokers learn new partitions within moments) or ``timeout``.
        """
        with self._lock:
            known = self._known.get(topic)
            self._known[topic] = max(known or 0, partitions)
        if known is None or known >= partitions:
            return None
        deadline = time.monotonic() + timeout
        have, why = 0, ""
        while True:
            try:
                meta = self._current().list_topics(topic, timeout=max(0.1, min(5.0, timeout)))
                t = meta.topics.get(topic)
                have = len(t.partitions) if t is not None and t.error is None else 0
                why = "" if t is None or t.error is None else str(t.error)
            except Exception as e:  # Kafka unreachable: the periodic refresh will do it
                why = str(e)
            if have >= partitions or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if have < partitions:
            log.warning(
                "notification topic %s: Kafka reports %d partitions, %d configured (%s): "
                "notifications go to the partitions Kafka reports until its metadata has "
                "them (topic.metadata.refresh.interval.ms)", topic, have, partitions, why,
            )  # fmt: skip
        else:
            log.info("notification topic %s: publishing to its %d partitions", topic, have)
        return have

    def _admin_for(self, bootstrap: str, security: dict[str, Any]) -> Any:
        """One AdminClient per Kafka and security settings, kept for the sink's life."""
        from confluent_kafka.admin import AdminClient

        key = (bootstrap, tuple(sorted(security.items())))
        with self._lock:
            admin = self._admins.get(key)
            if admin is None:
                conf = {"bootstrap.servers": bootstrap, "logger": log, **security}
                admin = self._admins[key] = AdminClient(conf)
        return admin

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if _needs_reset(err):
                self._fatal = err.str()
            log.warning("notification producer: %s", err.str())

        try:
            # librdkafka's own log lines go to Python logging, not raw stderr.
            return Producer({**self._conf, "error_cb": on_error}, logger=log)
        except Exception as e:
            raise ConfigError(f"invalid notification producer settings: {e}") from e

    def _current(self) -> Any:
        """The producer to use, replaced first if the previous one hit a fatal error."""
        with self._lock:
            if self._fatal is not None:
                old, reason = self._producer, self._fatal
                self._producer = self._new_producer()
                self._fatal = None
                self.producer_resets += 1
                log.error("notification producer had a fatal error (%s): replaced it", reason)
                # Serve the old producer's remaining delivery reports (they fail) so no
                # future waits forever; bounded by the delivery timeout.
                timeout = self.config.delivery_timeout_ms / 1000
                threading.Thread(target=old.flush, args=(timeout,), daemon=True).start()
            return self._producer

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)
            self._drain_backlog()

    def _drain_backlog(self) -> None:
        """Enqueue notifications that found librdkafka's queue full (poll thread only)."""
        while self._backlog:
            topic, payload, key, delivered, fut = self._backlog[0]
            try:
                self._current().produce(topic, value=payload, key=key, on_delivery=delivered)
            except BufferError:
                return  # still full: try again after the next poll
            except Exception as e:
                fut.set_exception(NotificationError(f"cannot enqueue notification: {e}"))
            self._backlog.popleft()

    def publish(
        self, topic: str, notification: Notification, *, key: bytes | None = None
    ) -> Future[NotificationAck]:
        """Send one notification; the future resolves once Kafka acknowledged it (acks=all).

        ``key`` (keyed batches: the broker id) is the Kafka message key, so the partitioner
        puts every notification with that key on one partition (stable while the topic's
        partition count is); without it notifications spread over the partitions.
        """
        fut: Future[NotificationAck] = Future()
        fut.set_running_or_notify_cancel()

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                if _needs_reset(err):
                    self._fatal = err.str()
                fut.set_exception(
                    NotificationError(
                        f"notification for {notification.key} not acknowledged by Kafka topic "
                        f"{topic!r}: {err.str() if hasattr(err, 'str') else err}"
                    )
                )
            else:
                fut.set_result(NotificationAck(msg.topic(), msg.partition(), msg.offset()))

        if self._closed.is_set():
            fut.set_exception(NotificationError("notification sink is closed"))
            return fut
        payload = encode_notification(notification)
        try:
            if self._backlog:  # keep the order: behind the ones already waiting
                raise BufferError
            self._current().produce(topic, value=payload, key=key, on_delivery=delivered)
        except BufferError:
            # librdkafka's local queue is full. Never wait here (the caller is the broker's
            # event loop): the poll thread enqueues it once deliveries made room.
            if len(self._backlog) >= MAX_BACKLOG:
                fut.set_exception(
                    NotificationError(
                        f"{len(self._backlog)} notifications already wait for room in the "
                        f"Kafka producer's queue: Kafka at {self.config.bootstrap_servers} "
                        "does not keep up"
                    )
                )
            else:
                self._backlog.append((topic, payload, key, delivered, fut))
        except Exception as e:
            fut.set_exception(NotificationError(f"cannot enqueue notification: {e}"))
        return fut

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding deliveries; returns how many are still pending."""
        return int(self._producer.flush(timeout))

    def close(self, timeout: float = 30.0) -> None:
        remaining = self.flush(timeout)
        self._closed.set()
        self._poller.join(timeout=5)
        while self._backlog:  # never enqueued: their batches fail (and are retried elsewhere)
            *_, fut = self._backlog.popleft()
            fut.set_exception(NotificationError("notification sink closed before publishing"))
        if remaining:
            log.warning("%d notifications still undelivered at close", remaining)
        close = getattr(self._producer, "close", None)
        if close is not None:  # newer confluent-kafka: release librdkafka threads now
            close()
