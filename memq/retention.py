"""Retention decisions (pure): which of a topic's objects to delete, which objects are
orphans, how long notifications must live, and S3 lifecycle rules per retention class.

The retention job (:mod:`memq.retention_job`) lists objects, reads notifications and
deletes; every decision it acts on is made here from plain values, so it is
property-tested (tests/unit/test_retention.py).

- **Time** (``retention.ms``): every hour partition (``dt=``/``hh=`` of the key) whose end
  is older than ``now - retention.ms`` is deleted, whole.
- **Size** (``retention.bytes``): then the oldest partitions go until the rest fits; the
  newest partition (the hour being written) is never deleted for size.
- **Orphans**: objects older than a grace period that no notification points at (an
  upload whose notification failed and whose clean-up did not run: a killed broker, a
  lost hedged duplicate). Only objects newer than the oldest notification Kafka still
  holds can be judged: an older object's pointer may simply have expired.
- **Notification retention**: Kafka keeps pointers at least ``retention.ms`` plus a day,
  so a pointer never expires before its object.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memq.errors import ConfigError, MemqFormatError
from memq.formats.keys import parse_object_key, topic_prefix

__all__ = [
    "DAY_MS",
    "DEFAULT_ORPHAN_GRACE_MS",
    "DEFAULT_ORPHAN_WINDOW_MS",
    "DEFAULT_RETENTION_MS",
    "HOUR_MS",
    "LIFECYCLE_RULE_PREFIX",
    "NOTIFICATION_MARGIN_MS",
    "TAG_KEY",
    "HourTally",
    "Listed",
    "NotificationPartition",
    "Partition",
    "RetentionPlan",
    "find_orphans",
    "group_by_hour",
    "in_orphan_window",
    "kafka_retention_covers",
    "lifecycle_rules",
    "notification_horizon",
    "notification_retention_ms",
    "object_time_ms",
    "plan_retention",
    "retention_days",
    "retention_tags",
    "topic_prefixes",
]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: ``retention.ms`` when a topic sets none: 7 days, like Kafka.
DEFAULT_RETENTION_MS = 7 * DAY_MS
#: How much longer than its objects a notification topic keeps its pointers.
NOTIFICATION_MARGIN_MS = DAY_MS
#: Objects younger than this are never orphans (their notification may be in flight).
DEFAULT_ORPHAN_GRACE_MS = HOUR_MS
#: Objects older than this are not checked for orphans (retention removes them anyway).
DEFAULT_ORPHAN_WINDOW_MS = DAY_MS
#: The object tag lifecycle rules match (its value: whole days).
TAG_KEY = "memq-retention-days"
#: IDs of the lifecycle rules MemQ owns (``memq-retention-7d``); other rules are kept.
LIFECYCLE_RULE_PREFIX = "memq-retention-"
#: S3's limit on rules per bucket lifecycle configuration.
MAX_LIFECYCLE_RULES = 1000


# --- retention classes --------------------------------------------------------------------


#: Retentions at least this long (a thousand years; Kafka's "forever" is Long.MAX_VALUE
#: ms) are unbounded: no lifecycle tag, and a notification topic kept forever (-1) rather
#: than a retention.ms past int64 or an S3 rule of 10^11 days.
FOREVER_MS = 1000 * 365 * DAY_MS


def bounded(retention_ms: int | None) -> int | None:
    """``retention_ms``, or None (unbounded) for None or at least :data:`FOREVER_MS`."""
    return None if retention_ms is None or retention_ms >= FOREVER_MS else retention_ms


def retention_days(retention_ms: int | None) -> int | None:
    """Whole days (rounded up, at least 1) of a retention; None when unbounded.

    Rounded up so a lifecycle rule never expires an object before its retention.
    """
    ms = bounded(retention_ms)
    if ms is None:
        return None
    return max(1, math.ceil(ms / DAY_MS))


def retention_tags(tags: dict[str, str], retention_ms: int | None, enabled: bool) -> dict[str, str]:
    """``tags`` with :data:`TAG_KEY` set from ``retention_ms`` (removed when tagging is off
    or retention is unbounded); other tags are kept."""
    out = {k: v for k, v in tags.items() if k != TAG_KEY}
    days = retention_days(retention_ms)
    if enabled and days is not None:
        out[TAG_KEY] = str(days)
    return out


def notification_retention_ms(retention_ms: int | None) -> int:
    """The Kafka ``retention.ms`` a notification topic needs: the objects' retention plus
    :data:`NOTIFICATION_MARGIN_MS` (-1, Kafka's "forever", for unbounded retention)."""
    ms = bounded(retention_ms)
    return -1 if ms is None else ms + NOTIFICATION_MARGIN_MS


def kafka_retention_covers(current_ms: int | None, needed_ms: int) -> bool:
    """Whether Kafka's ``retention.ms`` (-1: forever; None: unknown) is at least ``needed_ms``."""
    if current_ms is None:
        return False
    if current_ms < 0:
        return True
    return needed_ms >= 0 and current_ms >= needed_ms


# --- time partitions ----------------------------------------------------------------------


def topic_prefixes(cluster: str, topic: str) -> list[str]:
    """Every prefix a topic's objects can be under: without a hash prefix, then under each
    of the 256 (``00/`` .. ``ff/``); a bucket may hold both layouts after a switch."""
    return [topic_prefix(cluster, topic)] + [
        topic_prefix(cluster, topic, hash_=f"{h:02x}") for h in range(256)
    ]


class Listed(Protocol):
    """An object as storage lists it."""

    @property
    def key(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def modified_ms(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Partition:
    """One hour partition of a topic (``dt=``/``hh=``), over every hash prefix."""

    dt: str
    hh: str
    start_ms: int
    objects: int
    size: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + HOUR_MS

    @property
    def name(self) -> str:
        return f"dt={self.dt}/hh={self.hh}"


class HourTally:
    """Objects counted into hour partitions as they are listed (no keys kept: a week of a
    busy topic is millions of objects)."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, str], list[int]] = {}
        #: Keys that are not MemQ object keys (never deleted by retention).
        self.foreign: list[str] = []

    def add(self, key: str, size: int) -> Partition | None:
        """Count one object; returns its partition so far (None for a foreign key)."""
        try:
            k = parse_object_key(key)
        except MemqFormatError:
            self.foreign.append(key)
            return None
        t = self._parts.setdefault((k.dt, k.hh), [k.hour_start_ms, 0, 0])
        t[1] += 1
        t[2] += size
        return Partition(k.dt, k.hh, t[0], t[1], t[2])

    def merge(self, other: HourTally) -> None:
        for part, (start, n, size) in other._parts.items():
            t = self._parts.setdefault(part, [start, 0, 0])
            t[1] += n
            t[2] += size
        self.foreign.extend(other.foreign)

    def partitions(self) -> list[Partition]:
        """Every partition seen, oldest first."""
        return sorted(
            (Partition(dt, hh, *t) for (dt, hh), t in self._parts.items()),
            key=lambda p: p.start_ms,
        )


def group_by_hour(objects: Iterable[Listed]) -> tuple[list[Partition], list[str]]:
    """The objects' hour partitions, oldest first, and the keys that are not MemQ object
    keys (left alone: never deleted by retention)."""
    tally = HourTally()
    for o in objects:
        tally.add(o.key, o.size)
    return tally.partitions(), sorted(tally.foreign)


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """What retention deletes: whole partitions, oldest first."""

    #: Partitions that ended before ``now - retention.ms``.
    expired: tuple[Partition, ...]
    #: Further partitions deleted so the rest fits in ``retention.bytes``.
    over_size: tuple[Partition, ...]
    #: Partitions kept.
    kept: tuple[Partition, ...]
    #: The kept partitions still exceed ``retention.bytes`` (only the newest is left).
    still_over_size: bool = False

    @property
    def delete(self) -> tuple[Partition, ...]:
        return self.expired + self.over_size

    @property
    def kept_bytes(self) -> int:
        return sum(p.size for p in self.kept)


def plan_retention(
    partitions: Sequence[Partition],
    now_ms: int,
    retention_ms: int | None,
    retention_bytes: int | None,
) -> RetentionPlan:
    """Which partitions to delete at ``now_ms`` (None: that bound is off).

    By time first: every partition whose end is older than ``now_ms - retention_ms``.
    Then by size: the oldest remaining partitions until the total is at most
    ``retention_bytes``, never the newest one.
    """
    ordered = sorted(partitions, key=lambda p: p.start_ms)
    expired: list[Partition] = []
    if retention_ms is not None:
        cutoff = now_ms - retention_ms
        expired = [p for p in ordered if p.end_ms < cutoff]
    rest = ordered[len(expired) :]
    over: list[Partition] = []
    still_over = False
    if retention_bytes is not None:
        total = sum(p.size for p in rest)
        while total > retention_bytes and len(over) < len(rest) - 1:
            victim = rest[len(over)]
            over.append(victim)
            total -= victim.size
        still_over = total > retention_bytes
    return RetentionPlan(tuple(expired), tuple(over), tuple(rest[len(over) :]), still_over)


# --- orphans ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotificationPartition:
    """One partition of a notification topic as read from its beginning."""

    #: First offset Kafka still holds (0: nothing was ever deleted).
    low: int
    #: Where reading started: ``low``, or later when older records were skipped on purpose
    #: (all records before ``start`` are older than the orphan window).
    start: int
    #: Offset after the last record read.
    end: int
    #: Timestamp (ms) of the first record read; None when none was read.
    first_ms: int | None


def notification_horizon(
    partitions: Sequence[NotificationPartition], now_ms: int, kafka_retention_ms: int | None
) -> int | None:
    """The oldest object time (ms) whose pointer Kafka is sure to still hold; None when
    that cannot be told (then no object can be judged an orphan).

    A partition that lost records (``low > 0``) holds pointers from its first record's
    time on; if it lost all of them, from ``now - retention.ms`` on (Kafka keeps at least
    that long). A partition read from a later ``start`` (records older than the window
    skipped) lost only records older than those. Returns 0 when nothing constrains it.
    """
    if not partitions:
        return None  # no notification topic: every object would look orphaned
    horizon = 0
    for p in partitions:
        if p.low <= 0 or p.start > p.low:
            continue
        if p.first_ms is not None:
            horizon = max(horizon, p.first_ms)
        elif kafka_retention_ms is not None and kafka_retention_ms >= 0:
            horizon = max(horizon, now_ms - kafka_retention_ms)
        else:
            return None  # emptied by delete-records or an unknown retention: cannot tell
    return horizon


def object_time_ms(o: Listed) -> int | None:
    """When an object was stored: its storage modification time, else the creation time
    in its batch id (``<ms:13>-<seq>-<broker>``); None when neither is known."""
    if o.modified_ms is not None:
        return o.modified_ms
    batch = o.key.rsplit("/", 1)[-1]
    head = batch.split("-", 1)[0]
    return int(head) if len(head) == 13 and head.isdigit() else None


def in_orphan_window(o: Listed, now_ms: int, grace_ms: int, window_ms: int) -> bool:
    """Whether an object's age is within ``[grace_ms, window_ms)``: old enough that its
    notification must exist, young enough to be checked (older orphans are left to
    retention, which deletes them with their partition)."""
    t = object_time_ms(o)
    return t is not None and now_ms - window_ms <= t < now_ms - grace_ms


def find_orphans(
    objects: Iterable[Listed],
    notified: frozenset[str] | set[str],
    now_ms: int,
    grace_ms: int,
    window_ms: int,
    horizon_ms: int | None,
) -> list[Listed]:
    """Objects in the orphan window that no notification points at and that are newer
    than ``horizon_ms + grace_ms`` (pointers older than the horizon may have expired; the
    grace also absorbs clock skew between brokers). Never any when ``horizon_ms`` is None."""
    if horizon_ms is None:
        return []
    out = []
    for o in objects:
        if o.key in notified or not in_orphan_window(o, now_ms, grace_ms, window_ms):
            continue
        t = object_time_ms(o)
        if t is not None and t >= horizon_ms + grace_ms:
            out.append(o)
    return sorted(out, key=lambda o: o.key)


# --- lifecycle rules ----------------------------------------------------------------------


def lifecycle_rule(days: int) -> dict[str, Any]:
    """The rule that expires objects tagged ``memq-retention-days=<days>`` after ``days``."""
    if days < 1:
        raise ConfigError(f"a lifecycle expiration needs at least 1 day, got {days}")
    return {
        "ID": f"{LIFECYCLE_RULE_PREFIX}{days}d",
        "Status": "Enabled",
        "Filter": {"Tag": {"Key": TAG_KEY, "Value": str(days)}},
        "Expiration": {"Days": days},
    }


def lifecycle_rules(
    existing: Sequence[dict[str, Any]], days: Iterable[int]
) -> list[dict[str, Any]]:
    """A bucket's lifecycle rules with MemQ's replaced by one per retention class in
    ``days``; rules MemQ does not own (other IDs) are kept as they are."""
    keep = [r for r in existing if not str(r.get("ID", "")).startswith(LIFECYCLE_RULE_PREFIX)]
    ours = [lifecycle_rule(d) for d in sorted(set(days))]
    if len(keep) + len(ours) > MAX_LIFECYCLE_RULES:
        raise ConfigError(
            f"{len(keep)} existing rules plus {len(ours)} retention classes exceed S3's "
            f"{MAX_LIFECYCLE_RULES} lifecycle rules per bucket"
        )
    return keep + ours
