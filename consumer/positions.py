"""Where a consumer's partitions stand: where the readable data begins, how far behind
the end the consumer is (``Consumer.lag``), and the gauges of its statistics.

Helpers of :class:`~memq.consumer.consumer.Consumer`; each reads what it is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import NamedTuple

from memq.consumer.expiry import oldest_present
from memq.consumer.notifications import GroupMember
from memq.consumer.prefetch import Prefetcher
from memq.consumer.seeking import Probe
from memq.consumer.stats import Gauges
from memq.consumer.topics import Topic
from memq.errors import MemqError
from memq.formats.notification import Notification

__all__ = ["Lag", "gauges", "measure_lag", "oldest_retained"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)


class Lag(NamedTuple):
    """How far a consumer is behind: notifications (objects) and an estimate of records."""

    notifications: int
    records_estimate: int
    partitions: dict[tuple[str, int], int]


def oldest_retained(probe: Probe, topic: Topic, tp: TP) -> int:
    """The oldest notification of ``tp`` (of ``topic``) whose object was not deleted by
    retention."""

    def exists(note: Notification) -> bool:
        try:
            return topic.reader.exists(note.bucket, note.key)
        except MemqError as e:  # cannot tell: not known to be gone
            log.info("checking %s failed: %s", note.key, e)
            return True

    low, high = probe.watermarks(*tp)
    return oldest_present(
        low,
        high,
        read=lambda offset: probe.read(tp[0], tp[1], offset),
        exists=exists,
        retention_ms=topic.meta.retention_ms,
        now_ms=int(time.time() * 1000),
    )


def measure_lag(
    assignment: Iterable[TP],
    watermarks: Callable[[str, int], tuple[int, int]],
    name: Callable[[str], str],
    position: Mapping[tuple[str, int], int | None],
    committed: Mapping[tuple[str, int], int | None],
    record_counts: Collection[int],
) -> Lag:
    """Notifications behind the high watermark of each assigned partition (from its
    position, else its committed offset, else its low watermark), and records estimated
    from the record counts of recent notifications. ``name`` maps a notification topic to
    its MemQ topic (the keys of ``position``, ``committed`` and the answer)."""
    parts: dict[tuple[str, int], int] = {}
    for tp in assignment:
        low, high = watermarks(*tp)
        named = (name(tp[0]), tp[1])
        pos = position.get(named)
        if pos is None:
            pos = committed.get(named) or low
        parts[named] = max(0, high - pos)
    avg = sum(record_counts) / len(record_counts) if record_counts else 0
    total = sum(parts.values())
    return Lag(total, round(total * avg), parts)


def gauges(
    prefetch: Prefetcher,
    source: GroupMember | None,
    known_positions: Callable[[], dict[TP, int]],
) -> Gauges:
    """What the consumer holds now, without any request: the lag is from librdkafka's
    last high watermarks and ``known_positions()`` (may run on another thread)."""
    queued, queued_bytes, backlog = prefetch.depth()
    assigned, lag = 0, None
    if source is not None:
        try:
            assigned = len(source.assignment())
            highs = source.high_watermarks()
            known = known_positions()
            behind = [max(0, h - known[tp]) for tp, h in highs.items() if tp in known]
            lag = sum(behind) if behind else None
        except Exception as e:  # closing, or not known yet
            log.debug("consumer gauges: %s", e)
    return Gauges(queued, queued_bytes, backlog, assigned, len(prefetch.paused), lag)
