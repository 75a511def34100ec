"""Publish audit records to Kafka without ever blocking or failing the data path.

Producers and consumers call :meth:`AuditEmitter.emit` from their completion paths; it
encodes one small JSON record and hands it to librdkafka's bounded in-memory queue,
which never blocks: a full queue, an unreachable Kafka or a failed delivery only
increments a drop counter (and logs, rate-limited). A background thread serves
delivery reports and creates the audit topic if it is missing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from memq.formats.audit import encode_audit

__all__ = ["DEFAULT_AUDIT_TOPIC", "AuditEmitter"]

log = logging.getLogger(__name__)

DEFAULT_AUDIT_TOPIC = "memq.audit"


class AuditEmitter:
    """A fire-and-forget audit publisher with counted drops (thread-safe)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = DEFAULT_AUDIT_TOPIC,
        *,
        queue_max: int = 100_000,
        kafka: dict[str, Any] | None = None,
        client: str = "",
    ) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.topic = topic
        self.client = client
        self.bootstrap = bootstrap
        self._kafka = dict(kafka or {})
        self._producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "queue.buffering.max.messages": queue_max,
                "linger.ms": 200,
                "compression.type": "lz4",
                "acks": "all",
                "message.timeout.ms": 60_000,
                "socket.keepalive.enable": True,
                "error_cb": self._on_error,
                "logger": log,  # librdkafka's own logs through Python logging, not stderr
                **self._kafka,
            }
        )
        self._lock = threading.Lock()
        self.emitted = 0  # handed to librdkafka
        self.delivered = 0  # acknowledged by Kafka
        self.dropped = 0  # queue full, refused or failed delivery
        self._last_log = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memq-audit", daemon=True)
        self._thread.start()

    # --- data path ----------------------------------------------------------------------

    def emit(self, fields: dict[str, Any]) -> None:
        """Queue one audit record; never blocks, never raises."""
        if self._stop.is_set():
            self._drop("the emitter is closed")
            return
        try:
            # (a record may name its own client: a broker tells how the block came in)
            value = encode_audit({"client": self.client, **fields})
            self._producer.produce(self.topic, value, on_delivery=self._delivered)
        except BufferError:
            self._drop("the audit queue is full")
            return
        except Exception as e:  # KafkaException, encoding errors: never the caller's problem
            self._drop(f"{type(e).__name__}: {e}")
            return
        with self._lock:
            self.emitted += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "audit_emitted": self.emitted,
                "audit_delivered": self.delivered,
                "audit_dropped": self.dropped,
            }

    # --- background ---------------------------------------------------------------------

    def _drop(self, why: str) -> None:
        with self._lock:
            self.dropped += 1
            now = time.monotonic()
            quiet = now - self._last_log < 10
            if not quiet:
                self._last_log = now
        if not quiet:
            log.warning("dropping audit records to %s: %s", self.topic, why)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._drop(f"delivery failed: {err}")
            return
        with self._lock:
            self.delivered += 1

    def _on_error(self, err: Any) -> None:
        log.debug("audit Kafka client: %s", err)

    def _run(self) -> None:
        try:
            from memq.storage_handlers.kafka_sink import ensure_topic

            ensure_topic(self.bootstrap, self.topic, 1, extra=self._kafka, what="audit topic")
        except Exception as e:  # the auditor creates it too; records wait in the queue
            log.warning("could not ensure audit topic %s: %s", self.topic, e)
        while not self._stop.is_set():
            self._producer.poll(0.2)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout``); what is left counts as dropped."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(min(1.0, timeout))  # a daemon: it may still be creating the topic
        left = self._producer.flush(timeout)
        if left:
            with self._lock:
                self.dropped += left
            log.warning("%d audit records were not delivered before close", left)
