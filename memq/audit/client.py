"""The audit side of producers, consumers and brokers: a lazily started :class:`AuditEmitter`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from memq.audit.emitter import DEFAULT_AUDIT_TOPIC, AuditEmitter
from memq.config import AuditedClientConfig

__all__ = ["ClientAudit", "RoutedAudit"]

log = logging.getLogger(__name__)


class RoutedAudit:
    """Emits audit records; the Kafka connection starts with the first one.

    The audit Kafka is ``bootstrap`` or, when None, the Kafka the first record's topic
    sends its notifications to (given with each record, known from the topic's metadata
    or config). Records with no Kafka to go to are counted as dropped.
    """

    def __init__(
        self,
        *,
        client: str,
        bootstrap: str | None = None,
        topic: str = DEFAULT_AUDIT_TOPIC,
        queue_max: int = 100_000,
        kafka: Mapping[str, Any] | None = None,
        setting: str = "the audit bootstrap servers",
    ) -> None:
        """``setting``: what the user sets to give records a Kafka (named in the warning
        when one has none)."""
        self.client = client
        self.setting = setting
        self.bootstrap = bootstrap
        self.topic = topic
        self.queue_max = queue_max
        self.kafka = dict(kafka or {})
        self._emitter: AuditEmitter | None = None
        self._lock = threading.Lock()
        self._unrouted = 0  # records with no Kafka to go to (counted as dropped)
        self._closed = False

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None:
        """Queue one record (never blocks, never raises)."""
        em = self._emitter
        if em is None:
            bootstrap = self.bootstrap or kafka_bootstrap
            with self._lock:
                em = self._emitter
                if em is None:
                    if not bootstrap or self._closed:
                        self._unrouted += 1
                        if self._unrouted == 1 and not self._closed:
                            log.warning(
                                "dropping audit records: no Kafka known for them (set %s)",
                                self.setting,
                            )
                        return
                    try:
                        em = self._emitter = AuditEmitter(
                            bootstrap,
                            self.topic,
                            queue_max=self.queue_max,
                            kafka=self.kafka,
                            client=self.client,
                        )
                    except Exception as e:  # a bad librdkafka setting: never the caller's
                        self._unrouted += 1
                        if self._unrouted == 1:
                            log.warning("dropping audit records: no audit producer: %s", e)
                        return
        em.emit(fields)

    def stats(self) -> dict[str, int]:
        em = self._emitter
        out = em.stats() if em else {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 0}
        out["audit_dropped"] += self._unrouted
        return out

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._closed = True
        if self._emitter is not None:
            self._emitter.close(timeout)


class ClientAudit(RoutedAudit):
    """A producer's or consumer's audit records, as its ``audit.*`` settings say.

    The audit Kafka is ``audit.bootstrap.servers`` or, by default, the Kafka the topic's
    notifications go to (known from the topic's metadata when the first block completes).
    """

    def __init__(self, config: AuditedClientConfig, client: str) -> None:
        super().__init__(
            client=client,
            bootstrap=config.audit_bootstrap_servers,
            topic=config.audit_topic,
            queue_max=config.audit_queue_max,
            kafka=config.audit_kafka,
            setting="audit.bootstrap.servers",
        )
        self.config = config
