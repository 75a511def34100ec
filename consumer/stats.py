"""A consumer's counters (``Consumer.stats``) and their export as a plain dict
(``Consumer.stats_dict()``: what ``stats_cb`` and the Prometheus collector get; every key
is documented in docs/clients.md, "Consumer keys")."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConsumerStats", "Gauges", "stats_dict"]


@dataclass
class ConsumerStats:
    """A consumer's counters (``Consumer.stats``)."""

    records: int = 0
    objects: int = 0
    bytes: int = 0
    skipped_missing: int = 0
    skipped_corrupt: int = 0
    #: Objects deleted past their topic's retention, skipped (missing.object.policy=skip).
    skipped_expired: int = 0
    fetch_seconds: float = 0.0
    #: Fetches tried again after a retriable error.
    fetch_retries: int = 0
    #: Fetches still running when close() stopped waiting for them.
    fetches_abandoned: int = 0
    #: Commits that failed (automatic, or on revoke); the next one covers their offsets.
    commit_failures: int = 0
    #: Copies of blocks already handed out, dropped (dedup.enable), and their records.
    duplicate_blocks_dropped: int = 0
    duplicate_records_dropped: int = 0
    #: Blocks older than the dedup window: delivered (they may be copies).
    dedup_out_of_window: int = 0
    record_counts: deque[int] = field(default_factory=lambda: deque(maxlen=100))


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the consumer is holding now (read without any request)."""

    queued_objects: int
    queued_bytes: int
    backlog: int
    assigned: int
    paused: int
    #: Notifications behind the last high watermark seen, over the partitions where both
    #: are known; None when none is.
    lag_objects: int | None


def stats_dict(stats: ConsumerStats, gauges: Gauges, audit: dict[str, int]) -> dict[str, Any]:
    """The documented stats dict (pure)."""
    counts = list(stats.record_counts)
    avg = sum(counts) / len(counts) if counts else 0.0
    return {
        "records": stats.records,
        "objects": stats.objects,
        "bytes_fetched": stats.bytes,
        "fetch_seconds": round(stats.fetch_seconds, 6),
        "fetch_retries": stats.fetch_retries,
        "fetches_abandoned": stats.fetches_abandoned,
        "skipped": {
            "missing": stats.skipped_missing,
            "corrupt": stats.skipped_corrupt,
            "expired": stats.skipped_expired,
        },
        "duplicate_blocks_dropped": stats.duplicate_blocks_dropped,
        "duplicate_records_dropped": stats.duplicate_records_dropped,
        "dedup_out_of_window": stats.dedup_out_of_window,
        "commit_failures": stats.commit_failures,
        "queued_objects": gauges.queued_objects,
        "queued_bytes": gauges.queued_bytes,
        "backlog_notifications": gauges.backlog,
        "assigned_partitions": gauges.assigned,
        "paused_partitions": gauges.paused,
        "lag_objects": gauges.lag_objects,
        "lag_records_estimate": (
            None if gauges.lag_objects is None else round(gauges.lag_objects * avg)
        ),
        **audit,
    }
