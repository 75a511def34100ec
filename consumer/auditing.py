"""Audit records of what a consumer handed out (``audit.enable``): one ``consumed``
record per block handed out, one ``dropped`` record per copy of a block dedup dropped
(never counted as consumed). The auditor matches them with the producers' records."""

from __future__ import annotations

import time
from typing import Any, Protocol

from memq.consumer.prefetch import Pending
from memq.formats.notification import Notification

__all__ = ["AuditSink", "audit_object"]


class AuditSink(Protocol):
    """What the consumer uses of ``memq.audit.client.ClientAudit``."""

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None: ...


def audit_object(
    audit: AuditSink,
    pending: Pending,
    note: Notification,
    *,
    topic: str,
    group: str | None,
    kafka: str | None,
) -> None:
    """Emit the records of a finished object's blocks (then forget them)."""
    now = int(time.time() * 1000)
    for kind, blocks in (("consumed", pending.blocks), ("dropped", pending.copies)):
        for b in blocks:
            audit.emit(
                {
                    "kind": kind,
                    "topic": topic,
                    "producer_id": b.producer_id,
                    "epoch": b.epoch,
                    "sequence": b.sequence,
                    "records": b.records,
                    "content_crc": b.content_crc,
                    "min_timestamp": b.min_timestamp,
                    "time": now,
                    "bucket": note.bucket,
                    "key": note.key,
                    "group": group,
                    "block_index": b.index,
                },
                kafka,
            )
    pending.blocks = pending.copies = []
