"""Audit records of the blocks the broker encodes itself (HTTP ingest, the Kafka port).

A ``memq.Producer`` reports its own blocks; records written over HTTP or by a Kafka
producer become blocks the broker makes, so the broker reports those: one ``produced``
audit record (:mod:`memq.formats.audit`) per block, emitted once the block's batch is in
storage and its notification acknowledged (the ack of ``acks=all``), whatever ack the
request asked for. A block whose batch fails is not reported: nothing was stored (an
``acks=0``/``1`` write's loss is counted in ``memq_ack1_records_lost_total``). A
duplicate (a retry answered from the dedup window) is not reported again. Blocks that
arrive over the broker protocol are never reported here: their producer does.

Emission never blocks or fails the data path: the sink queues the record (bounded) and
counts what it has to drop. The broker declares the sink it needs (:class:`AuditSink`);
the runner (:mod:`memq.run.broker`) gives it :class:`memq.audit.client.RoutedAudit`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterator
from typing import Any, Literal, Protocol

from memq.broker.processor import Batch, TopicProcessor
from memq.formats.block import INT64_MAX, BlockHeader, encode_block, encode_block_with_crc
from memq.storage_handlers.base import StoredObject

__all__ = ["AuditSink", "BlockAudit", "Ingress", "encode_audited"]

log = logging.getLogger(__name__)

#: How a block reached the broker (named in the audit record's ``client``).
Ingress = Literal["http", "kafka"]


def encode_audited(records: Any, *, crc: bool, **kw: Any) -> tuple[bytes, int]:
    """:func:`~memq.formats.block.encode_block` of ``records`` and, with ``crc`` (broker
    audit on), the CRC of the block's payload (the audit record's ``content_crc``);
    without, 0 (no second pass over the records)."""
    if crc:
        return encode_block_with_crc(records, **kw)
    return encode_block(records, **kw), 0


class AuditSink(Protocol):
    """Where the broker's audit records go (:class:`memq.audit.client.RoutedAudit`)."""

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None:
        """Queue one record for the audit topic (``kafka_bootstrap``: the Kafka of the
        topic's notifications, used when no audit Kafka is configured); never blocks,
        never raises."""
        ...

    def stats(self) -> dict[str, int]:
        """``audit_emitted``, ``audit_delivered``, ``audit_dropped`` so far."""
        ...

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued, up to ``timeout`` (blocking; the rest counts dropped)."""
        ...


class BlockAudit:
    """Reports the broker-encoded blocks of acknowledged batches to an :class:`AuditSink`."""

    def __init__(self, sink: AuditSink, broker_id: str) -> None:
        self.sink = sink
        self.broker_id = broker_id

    def watch(
        self,
        proc: TopicProcessor,
        batch: Batch,
        index: int,
        header: BlockHeader,
        content_crc: int,
        acks: Literal["0", "1", "all"],
        ingress: Ingress,
    ) -> None:
        """Report the block at ``index`` of ``batch`` once the batch is stored and notified."""
        batch.done.add_done_callback(
            functools.partial(self._done, proc, index, header, content_crc, acks, ingress)
        )

    def _done(
        self,
        proc: TopicProcessor,
        index: int,
        header: BlockHeader,
        content_crc: int,
        acks: str,
        ingress: Ingress,
        done: asyncio.Future[StoredObject],
    ) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # not stored: nothing was produced (the batch's writers got the error)
        stored = done.result()
        cfg = proc.config
        fields = {
            "kind": "produced",
            "topic": proc.topic,
            "producer_id": header.producer_id,
            "epoch": header.epoch,
            "sequence": header.sequence,
            "records": header.record_count,
            "content_crc": content_crc,
            "min_timestamp": header.min_timestamp,
            "time": int(time.time() * 1000),
            "client": f"memq-broker {self.broker_id} ({ingress})",
            "acks": acks,
            "bucket": stored.bucket,
            "key": stored.key,
            "block_index": index,
            # (a topic kept forever reports Long.MAX_VALUE, as producers do)
            "retention_ms": cfg.retention.ms or INT64_MAX,
        }
        try:
            self.sink.emit(fields, cfg.notification.bootstrap_servers)
        except Exception:  # a sink must not raise; if one does, the data path goes on
            log.exception("audit sink failed for a block of %s", proc.topic)

    def collect(self) -> Iterator[Any]:
        """``memq_broker_audit_records_total{outcome}``: emitted, delivered, dropped."""
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "memq_broker_audit_records",
            "Audit records of broker-encoded blocks (HTTP ingest, Kafka port): handed to "
            "the audit producer, delivered to Kafka, dropped (queue full, Kafka failed).",
            labels=["outcome"],
        )
        stats = self.sink.stats()
        for outcome in ("emitted", "delivered", "dropped"):
            family.add_metric([outcome], stats.get(f"audit_{outcome}", 0))
        yield family
