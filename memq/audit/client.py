"""The audit side of producers and consumers: a lazily started :class:`AuditEmitter`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from memq.audit.emitter import AuditEmitter
from memq.config import AuditedClientConfig

__all__ = ["ClientAudit"]

log = logging.getLogger(__name__)


class ClientAudit:
    """Emits a client's audit records; the Kafka connection starts with the first one.

    The audit Kafka is ``audit.bootstrap.servers`` or, by default, the Kafka the topic's
    notifications go to (known from the topic's metadata when the first block completes).
    """

    def __init__(self, config: AuditedClientConfig, client: str) -> None:
        self.config = config
        self.client = client
        self._emitter: AuditEmitter | None = None
        self._lock = threading.Lock()
        self._unrouted = 0  # records with no Kafka to go to (counted as dropped)

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None:
        """Queue one record (never blocks, never raises)."""
        em = self._emitter
        if em is None:
            bootstrap = self.config.audit_bootstrap_servers or kafka_bootstrap
            with self._lock:
                em = self._emitter
                if em is None:
                    if not bootstrap:
                        self._unrouted += 1
                        if self._unrouted == 1:
                            log.warning(
                                "dropping audit records: no Kafka known for them "
                                "(set audit.bootstrap.servers)"
                            )
                        return
                    em = self._emitter = AuditEmitter(
                        bootstrap,
                        self.config.audit_topic,
                        queue_max=self.config.audit_queue_max,
                        kafka=dict(self.config.audit_kafka),
                        client=self.client,
                    )
        em.emit(fields)

    def stats(self) -> dict[str, int]:
        em = self._emitter
        out = em.stats() if em else {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 0}
        out["audit_dropped"] += self._unrouted
        return out

    def close(self, timeout: float = 5.0) -> None:
        if self._emitter is not None:
            self._emitter.close(timeout)
