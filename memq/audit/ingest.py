"""The auditor's ingest: the audit topic into the SQLite store, on a thread of its own.

It reads every partition of the audit topic with a plain Kafka consumer (``assign``, no
group: the offsets live in the SQLite file, written in the same transaction as the rows
they produced, so a restart neither loses nor double counts), picks up partitions added
later, decodes each record (undecodable ones are counted and skipped) and applies them in
batches; it also prunes rows older than the retention. A failed iteration is logged,
counted and kept in :attr:`Ingester.error` (``/healthz`` shows it), then retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from memq.audit.config import AuditorConfig
from memq.audit.metrics import AuditorMetrics
from memq.audit.store import AuditStore, Ingest
from memq.errors import MemqFormatError
from memq.formats.audit import decode_audit

__all__ = ["PRUNE_EVERY_S", "REFRESH_PARTITIONS_S", "Ingester"]

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 600.0
REFRESH_PARTITIONS_S = 10.0


class Ingester:
    """Audit topic -> :class:`AuditStore`: :meth:`start` the thread, :meth:`stop` it.

    ``last_loop`` is when (``time.monotonic()``) the loop last ran, ``error`` the last
    failure (None once an iteration succeeds), ``assigned`` the partitions being read.
    """

    def __init__(
        self,
        config: AuditorConfig,
        store: AuditStore,
        metrics: AuditorMetrics,
        clock: Callable[[], int],
    ) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_loop = time.monotonic()
        self.error: str | None = None
        self.assigned: set[int] = set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="memq-audit-ingest", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to stop; :meth:`join` waits for it."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def started(self) -> bool:
        return self._thread is not None

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _kafka_consumer(self) -> Any:
        from confluent_kafka import Consumer

        k = self.config.kafka
        return Consumer(
            {
                "bootstrap.servers": k.bootstrap_servers,
                "group.id": "memq-auditor",  # required by librdkafka; offsets are in SQLite
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "socket.keepalive.enable": True,
                **k.consumer,
            }
        )

    def run(self) -> None:
        """The loop (the thread's target): until :meth:`stop`."""
        from memq.storage_handlers.kafka_sink import ensure_topic

        cfg = self.config
        while not self._stop.is_set():  # the audit topic must exist before we assign it
            try:
                ensure_topic(
                    cfg.kafka.bootstrap_servers, cfg.audit_topic, 1,
                    extra=dict(cfg.kafka.consumer), what="audit topic",
                )  # fmt: skip
                break
            except Exception as e:
                self.error = f"waiting for Kafka: {e}"
                log.warning("auditor: %s", self.error)
                self.last_loop = time.monotonic()
                self._stop.wait(2.0)
        consumer = self._kafka_consumer()
        next_refresh = 0.0
        next_prune = time.monotonic() + 5.0
        try:
            while not self._stop.is_set():
                self.last_loop = time.monotonic()
                self.metrics.last_ingest.set(time.time())
                try:
                    if self.last_loop >= next_refresh:
                        self._assign_new_partitions(consumer)
                        next_refresh = self.last_loop + REFRESH_PARTITIONS_S
                    if self.last_loop >= next_prune:
                        cutoff = self.clock() - int(cfg.retention_hours * 3600 * 1000)
                        pruned = self.store.prune(cutoff)
                        if pruned:
                            log.info("pruned %d audit rows older than the retention", pruned)
                        next_prune = self.last_loop + PRUNE_EVERY_S
                    if not self.assigned:
                        self._stop.wait(0.5)
                        continue
                    self._ingest_once(consumer)
                    self.error = None
                except Exception as e:  # keep serving: report it on /healthz and retry
                    self.error = f"{type(e).__name__}: {e}"
                    self.metrics.ingest_errors.inc()
                    log.exception("audit ingest failed; retrying")
                    self._stop.wait(1.0)
        finally:
            consumer.close()

    def _assign_new_partitions(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        topic = self.config.audit_topic
        meta = consumer.list_topics(timeout=10)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            return
        new = sorted(set(tmeta.partitions) - self.assigned)
        if not new:
            return
        stored = self.store.offsets(topic)
        consumer.incremental_assign(
            [TopicPartition(topic, p, stored.get(p, OFFSET_BEGINNING)) for p in new]
        )
        self.assigned.update(new)
        log.info("auditor reading %s partitions %s (stored offsets %s)", topic, new, stored)

    def _ingest_once(self, consumer: Any) -> None:
        msgs = consumer.consume(self.config.ingest_batch, 0.5)
        items: list[Ingest] = []
        rejected: list[tuple[str, int, int]] = []
        for m in msgs:
            if m.error() is not None:
                log.debug("audit topic: %s", m.error())
                continue
            where = (m.topic(), m.partition(), m.offset())
            try:
                items.append(Ingest(decode_audit(m.value() or b""), *where))
            except MemqFormatError as e:
                rejected.append(where)
                log.warning("skipping audit record %s/%d@%d: %s", *where, e)
        if not items and not rejected:
            return
        self.store.apply(items, rejected)
        for it in items:
            self.metrics.records.labels(it.record.kind).inc()
        if rejected:
            self.metrics.rejected.inc(len(rejected))
