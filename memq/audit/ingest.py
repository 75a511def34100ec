"""The auditor's ingest: the audit topic into the SQLite store, on a thread of its own.

It reads every partition of the audit topic with a plain Kafka consumer (``assign``, no
group: the offsets live in the SQLite file, written in the same transaction as the rows
they produced, so a restart neither loses nor double counts), picks up partitions added
later, decodes each record (undecodable ones are counted and skipped) and applies them in
batches; it also prunes rows older than the retention. A failed iteration is logged,
counted and kept in :attr:`Ingester.error` (``/healthz`` shows it), then retried.

Stored offsets only describe the topic they were read from. With every partition refresh
the ingest compares the audit topic's Kafka topic id with the one stored next to the
offsets: a different id (a new Kafka, such as the dev stack's, formatted anew by every
`memq dev up`, or a topic deleted and created again) drops the offsets and re-reads the
topic from the beginning, as a Kafka consumer does on out-of-range offsets, and logs it
(:func:`resync_reason` decides). A Kafka without topic ids falls back to the watermarks
(a stored offset beyond a partition's end). Offsets that go backwards while reading (Kafka
reset the position) are stored as they are, so a restart resumes from there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from memq.audit.config import AuditorConfig
from memq.audit.metrics import AuditorMetrics
from memq.audit.store import AuditStore, Ingest
from memq.errors import MemqFormatError
from memq.formats.audit import decode_audit

__all__ = ["PRUNE_EVERY_S", "REFRESH_PARTITIONS_S", "Ingester", "resync_reason"]

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 600.0
REFRESH_PARTITIONS_S = 10.0
#: What Kafka answers for the topic id of a topic when it has none (before Kafka 2.8).
_NO_TOPIC_ID = frozenset({"", "AAAAAAAAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000"})


def resync_reason(
    stored_id: str | None,
    current_id: str | None,
    stored: Mapping[int, int],
    ends: Mapping[int, int],
) -> str | None:
    """Why the stored offsets of the audit topic no longer describe it (None: they do).

    ``stored_id``/``current_id``: the topic id the offsets were read from and the topic's
    id now (None: unknown, or a Kafka without topic ids); ``stored``: the next offset per
    partition; ``ends``: the high watermark per partition, consulted only when Kafka has
    no topic ids.
    """
    if stored_id is not None and current_id is not None and stored_id != current_id:
        return (
            f"is a different topic than the stored offsets were read from (topic id "
            f"{stored_id} -> {current_id}: a new Kafka, or the topic was created again)"
        )
    if current_id is None:
        beyond = {p: (o, ends[p]) for p, o in sorted(stored.items()) if p in ends and o > ends[p]}
        if beyond:
            where = ", ".join(f"partition {p}: {o} > end {e}" for p, (o, e) in beyond.items())
            return (
                f"ends before the stored offsets ({where}: a new Kafka, or the topic was "
                "created again)"
            )
    return None


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
        #: Offset expected next per assigned partition (None: from the beginning).
        self._next: dict[int, int | None] = {}
        #: How many times the stored offsets were dropped and the topic re-read.
        self.resyncs = 0

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

    def _kafka_admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        k = self.config.kafka
        security: dict[str, Any] = {
            key: v
            for key, v in k.consumer.items()
            if key.startswith(("security.", "sasl.", "ssl."))
        }
        conf: dict[str, Any] = {"bootstrap.servers": k.bootstrap_servers, "logger": log}
        return AdminClient({**conf, **security})

    def run(self) -> None:
        """The loop (the thread's target): until :meth:`stop`."""
        from memq.storage_handlers.kafka_sink import ensure_topic

        cfg = self.config
        # One consumer and one admin client for the thread's life (a client per attempt
        # or per check is a new librdkafka instance each time: threads, connections).
        try:
            admin = self._kafka_admin()
        except Exception as e:  # a bad librdkafka setting: nothing to retry
            self.error = f"audit Kafka client settings: {e}"
            log.error("auditor: %s", self.error)
            return
        while not self._stop.is_set():  # the audit topic must exist before we assign it
            try:
                ensure_topic(  # (short: a stop() waits for an attempt to end)
                    cfg.kafka.bootstrap_servers, cfg.audit_topic, 1,
                    what="audit topic", timeout=5.0, admin=admin,
                )  # fmt: skip
                break
            except Exception as e:
                self.error = f"waiting for Kafka: {e}"
                log.warning("auditor: %s", self.error)
                self.last_loop = time.monotonic()
                self._stop.wait(2.0)
        if self._stop.is_set():
            return
        consumer = self._kafka_consumer()
        next_refresh = 0.0
        next_prune = time.monotonic() + 5.0
        try:
            while not self._stop.is_set():
                self.last_loop = time.monotonic()
                self.metrics.last_ingest.set(time.time())
                try:
                    if self.last_loop >= next_refresh:
                        self._check_topic(consumer, admin)
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

    def _topic_id(self, admin: Any) -> str | None:
        """The audit topic's Kafka topic id; None when Kafka has none. Raises when Kafka
        cannot say (then nothing is decided)."""
        from confluent_kafka import TopicCollection

        topic = self.config.audit_topic
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result(15)
        tid = str(desc.topic_id) if desc.topic_id is not None else ""
        return None if tid in _NO_TOPIC_ID else tid

    def _check_topic(self, consumer: Any, admin: Any) -> None:
        """Drop the stored offsets and re-read the audit topic from the beginning when it
        is not the topic they were read from (see :func:`resync_reason`)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        topic = self.config.audit_topic
        try:
            current = self._topic_id(admin)
        except Exception as e:  # Kafka unreachable, topic not there yet: decide later
            log.debug("audit topic %s: no topic id (%s)", topic, e)
            return
        stored_id = self.store.topic_id(topic)
        stored = self.store.offsets(topic)
        ends: dict[int, int] = {}
        if current is None and stored:
            try:
                for p in stored:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=10, cached=False
                    )
                    ends[p] = high
            except Exception as e:
                log.debug("audit topic %s: no watermarks (%s)", topic, e)
                return
        reason = resync_reason(stored_id, current, stored, ends)
        if reason is None:
            if current is not None and current != stored_id:
                self.store.set_topic_id(topic, current)
            return
        dropped = self.store.resync(topic, current)
        self.resyncs += 1
        log.warning(
            "auditor: audit topic %s %s: re-reading it from the beginning (dropped stored "
            "offsets %s; figures already stored stay)",
            topic, reason, dropped,
        )  # fmt: skip
        if self.assigned:
            parts = sorted(self.assigned)
            consumer.incremental_unassign([TopicPartition(topic, p) for p in parts])
            consumer.incremental_assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        self._next = dict.fromkeys(self.assigned)

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
        self._next.update({p: stored.get(p) for p in new})
        log.info("auditor reading %s partitions %s (stored offsets %s)", topic, new, stored)

    def _rewind(self, consumer: Any, firsts: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        for partition, offset in firsts.items():
            consumer.seek(TopicPartition(self.config.audit_topic, partition, offset))
            self._next[partition] = offset

    def _ingest_once(self, consumer: Any) -> None:
        msgs = consumer.consume(self.config.ingest_batch, 0.5)
        items: list[Ingest] = []
        rejected: list[tuple[str, int, int]] = []
        backwards: dict[int, int] = {}
        firsts: dict[int, int] = {}  # partition -> the batch's first offset in it
        for m in msgs:
            if m.error() is not None:
                log.debug("audit topic: %s", m.error())
                continue
            where = (m.topic(), m.partition(), m.offset())
            firsts.setdefault(m.partition(), m.offset())
            expected = self._next.get(m.partition())
            if expected is not None and m.offset() < expected and m.partition() not in backwards:
                backwards[m.partition()] = m.offset()  # Kafka reset the position
            self._next[m.partition()] = m.offset() + 1
            try:
                items.append(Ingest(decode_audit(m.value() or b""), *where))
            except MemqFormatError as e:
                rejected.append(where)
                log.warning("skipping audit record %s/%d@%d: %s", *where, e)
        if backwards:
            log.warning(
                "auditor: audit topic %s went back to offsets %s (Kafka reset the position: "
                "a new Kafka, or a recreated topic); storing them as they are",
                self.config.audit_topic, backwards,
            )  # fmt: skip
            self.store.reset_offsets(self.config.audit_topic, backwards)
        if not items and not rejected:
            return
        try:
            self.store.apply(items, rejected)
        except Exception:
            # Read the batch again next time: the consumer's position has moved past it,
            # and going on would drop its records for good (other topics' with them).
            self._rewind(consumer, firsts)
            raise
        for it in items:
            self.metrics.records.labels(it.record.kind).inc()
        if rejected:
            self.metrics.rejected.inc(len(rejected))
