"""The auditor's figures: read-side queries over the tables :mod:`memq.audit.store` fills.

Figures for a group are computed over the blocks *produced* in the asked window:

- ``consumed``: blocks (records) of the window the group handed out;
- ``missing``: blocks acked longer ago than the grace period and never handed out by the
  group, counted from the group's *watch start*: the ack time of the oldest block it
  consumed, so a group that starts at ``latest`` is not blamed for what came before it.
  The price: a loss of the very first blocks a group should have read goes unseen; for
  groups that read from the beginning, ``strict`` counts every block of the window;
- ``pending``: the same within the grace period (in flight, not yet a loss);
- ``expired``: blocks never handed out whose topic's ``retention.ms`` (reported by the
  producer with each block) has passed: deleted by design, neither missing nor pending;
- ``duplicates``: blocks handed out more than once (a retried block stored twice, a
  redelivery after a crash: at-least-once), with the extra records: what the consumer's
  dedup did not catch;
- ``dropped duplicates``: copies of a block the consumer recognised as already handed out
  and dropped (``dropped`` records), with their records: dedup at work, not a problem.
  A block belongs to the window by its ack time, or by when a copy was first dropped
  when it has no produced record. A dropped copy is never a consumption: it neither
  makes a block a duplicate nor a missing block consumed;
- ``mismatches``: blocks whose consumer ``content_crc`` differs from the producer's;
- ``unaudited``: consumed blocks with no produced record (audit off or dropped there);
  a ``memq.Producer`` reports its blocks, a broker those it made of HTTP ingest and
  Kafka-port writes (its ``audit`` section);
- latency: hand-out time minus the block's oldest record timestamp, p50 and p99.

Nothing here writes; every query reads through the connection callable it is given (the
store's connection of the calling thread).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Figures", "GroupFigures", "TopicFigures", "percentile", "status_reason"]

MINUTE_MS = 60_000

_SEVERITY = {"ok": 0, "unconsumed": 0, "warn": 1, "missing": 2}
#: Produced blocks still within their topic's retention (an expired one is not missing).
_UNEXPIRED = "AND (p.expires_ms IS NULL OR p.expires_ms > ?)"


def _u64(i: int) -> int:
    """The u64 a stored signed 64-bit integer stands for (the store writes the reverse)."""
    return i + (1 << 64) if i < 0 else i


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-int(q * 1000) * len(sorted_values) // 100_000))  # ceil(q% * n)
    return sorted_values[min(len(sorted_values), rank) - 1]


@dataclass
class GroupFigures:
    group: str
    consumed_blocks: int = 0
    consumed_records: int = 0
    missing_blocks: int = 0
    missing_records: int = 0
    #: Unconsumed blocks older than their topic's retention.ms: deleted by design, not lost.
    expired_blocks: int = 0
    expired_records: int = 0
    pending_blocks: int = 0
    pending_records: int = 0
    duplicate_blocks: int = 0
    duplicate_records: int = 0
    dropped_duplicate_blocks: int = 0
    dropped_duplicate_records: int = 0
    mismatches: int = 0
    unaudited_blocks: int = 0
    unaudited_records: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    watch_start_ms: int | None = None
    last_consumed_ms: int | None = None
    status: str = "ok"
    #: Why the status is not ``ok``, in words (None when it is).
    reason: str | None = None


@dataclass
class TopicFigures:
    topic: str
    produced_blocks: int = 0
    produced_records: int = 0
    last_produced_ms: int | None = None
    groups: list[GroupFigures] = field(default_factory=list)
    status: str = "unconsumed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _n(count: int, what: str) -> str:
    return f"{count:,} {what}{'' if count == 1 else 's'}"


def status_reason(g: GroupFigures, grace_ms: int) -> str | None:
    """What makes ``g``'s status what it is, in words (None for ``ok``): every problem
    found, the worst first."""
    if g.status == "unconsumed":
        return "the group handed out no block of this topic: nothing is proven for it"
    parts = []
    if g.missing_blocks:
        parts.append(
            f"{_n(g.missing_records, 'record')} in {_n(g.missing_blocks, 'block')} acked over "
            f"{grace_ms / 1000:g} s ago never handed out (missing)"
        )
    if g.mismatches:
        parts.append(f"{_n(g.mismatches, 'block')} handed out with other content (mismatch)")
    if g.duplicate_blocks:
        parts.append(
            f"{_n(g.duplicate_blocks, 'block')} handed out more than once "
            f"({_n(g.duplicate_records, 'extra record')})"
        )
    if g.unaudited_blocks:
        parts.append(
            f"{_n(g.unaudited_records, 'record')} in {_n(g.unaudited_blocks, 'block')} "
            "consumed with no produced record (unaudited: their producer or broker does not "
            "report, or its records were dropped)"
        )
    return "; ".join(parts) or None


class Figures:
    """The figures of one auditor database, read through ``conn`` (one per thread)."""

    def __init__(self, conn: Callable[[], sqlite3.Connection]) -> None:
        self._conn = conn

    def topics(self, since_ms: int | None = None, now_ms: int | None = None) -> list[str]:
        """Every topic with audit records; with ``since_ms``/``now_ms``, those with a
        block acked, handed out or dropped in that window."""
        if since_ms is None or now_ms is None:
            rows = self._conn().execute(
                "SELECT DISTINCT topic FROM produced UNION SELECT DISTINCT topic FROM consumed "
                "UNION SELECT DISTINCT topic FROM dropped"
            )
        else:
            rows = self._conn().execute(
                "SELECT DISTINCT topic FROM produced WHERE acked_ms BETWEEN ?1 AND ?2 "
                "UNION SELECT DISTINCT topic FROM consumed WHERE last_ms >= ?1 AND first_ms <= ?2 "
                "UNION SELECT DISTINCT topic FROM dropped WHERE last_ms >= ?1 AND first_ms <= ?2",
                (since_ms, now_ms),
            )
        return sorted(str(t) for (t,) in rows)

    def groups(self, topic: str) -> list[str]:
        rows = self._conn().execute(
            "SELECT DISTINCT grp FROM consumed WHERE topic = ? "
            "UNION SELECT DISTINCT grp FROM dropped WHERE topic = ?",
            (topic, topic),
        )
        return sorted(str(g) for (g,) in rows)

    def watch_start(self, topic: str, group: str) -> int | None:
        """Ack time of the oldest produced block ``group`` consumed (None: none matched)."""
        row = (
            self._conn()
            .execute(
                "SELECT MIN(p.acked_ms) FROM consumed c JOIN produced p ON p.topic = c.topic "
                "AND p.producer_id = c.producer_id AND p.epoch = c.epoch "
                "AND p.sequence = c.sequence WHERE c.topic = ? AND c.grp = ?",
                (topic, group),
            )
            .fetchone()
        )
        return None if row is None or row[0] is None else int(row[0])

    def summary(
        self,
        *,
        now_ms: int,
        since_ms: int,
        grace_ms: int,
        topic: str | None = None,
        group: str | None = None,
        strict: bool = False,
    ) -> list[TopicFigures]:
        """Figures per topic and group for blocks acked in ``[since_ms, now_ms]``: of
        ``topic``, or of every topic with audit records in the window (one whose records
        are all older is not listed: a deleted topic leaves the listing with its last
        records).

        ``strict``: every block of the window must be consumed by every group (for groups
        that read from the beginning); otherwise a group's watch start applies.
        """
        out = []
        for t in [topic] if topic else self.topics(since_ms, now_ms):
            tf = TopicFigures(t)
            row = (
                self._conn()
                .execute(
                    "SELECT COUNT(*), COALESCE(SUM(records), 0), MAX(acked_ms) FROM produced "
                    "WHERE topic = ? AND acked_ms BETWEEN ? AND ?",
                    (t, since_ms, now_ms),
                )
                .fetchone()
            )
            tf.produced_blocks, tf.produced_records = int(row[0]), int(row[1])
            tf.last_produced_ms = None if row[2] is None else int(row[2])
            for g in [group] if group is not None else self.groups(t):
                tf.groups.append(self._group(t, g, now_ms, since_ms, grace_ms, strict))
            if tf.groups:
                tf.status = max((g.status for g in tf.groups), key=_SEVERITY.__getitem__)
            out.append(tf)
        return out

    def _start(self, topic: str, group: str, since_ms: int, strict: bool) -> int | None:
        return since_ms if strict else self.watch_start(topic, group)

    def _group(
        self, topic: str, group: str, now_ms: int, since_ms: int, grace_ms: int, strict: bool
    ) -> GroupFigures:
        conn = self._conn()
        gf = GroupFigures(group)
        gf.watch_start_ms = self._start(topic, group, since_ms, strict)
        latencies: list[float] = []
        for recs, crecs, times, match, lat in conn.execute(
            "SELECT p.records, c.records, c.times, "
            "c.content_crc = p.content_crc AND NOT c.crc_conflict, c.first_ms - p.min_ts "
            "FROM produced p JOIN consumed c ON c.topic = p.topic AND c.grp = ? "
            "AND c.producer_id = p.producer_id AND c.epoch = p.epoch "
            "AND c.sequence = p.sequence WHERE p.topic = ? AND p.acked_ms BETWEEN ? AND ?",
            (group, topic, since_ms, now_ms),
        ):
            gf.consumed_blocks += 1
            gf.consumed_records += min(recs, crecs)
            if times > 1:
                gf.duplicate_blocks += 1
                gf.duplicate_records += max(0, crecs - recs)
            if not match:
                gf.mismatches += 1
            latencies.append(lat)
        latencies.sort()
        gf.latency_p50_ms = percentile(latencies, 50)
        gf.latency_p99_ms = percentile(latencies, 99)
        if gf.watch_start_ms is not None:
            cutoff = now_ms - grace_ms
            lo = max(since_ms, gf.watch_start_ms)
            for acked, recs, expires in conn.execute(
                "SELECT p.acked_ms, p.records, p.expires_ms FROM produced p WHERE p.topic = ? "
                "AND p.acked_ms BETWEEN ? AND ? AND NOT EXISTS (SELECT 1 FROM consumed c "
                "WHERE c.topic = p.topic AND c.grp = ? AND c.producer_id = p.producer_id "
                "AND c.epoch = p.epoch AND c.sequence = p.sequence)",
                (topic, lo, now_ms, group),
            ):
                if expires is not None and expires <= now_ms:  # past the topic's retention
                    gf.expired_blocks += 1
                    gf.expired_records += recs
                elif acked < cutoff:
                    gf.missing_blocks += 1
                    gf.missing_records += recs
                else:
                    gf.pending_blocks += 1
                    gf.pending_records += recs
        row = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(c.records), 0), MAX(c.last_ms) FROM consumed c "
            "WHERE c.topic = ? AND c.grp = ? AND c.first_ms BETWEEN ? AND ? AND NOT EXISTS "
            "(SELECT 1 FROM produced p WHERE p.topic = c.topic AND p.producer_id = "
            "c.producer_id AND p.epoch = c.epoch AND p.sequence = c.sequence)",
            (topic, group, since_ms, now_ms),
        ).fetchone()
        gf.unaudited_blocks, gf.unaudited_records = int(row[0]), int(row[1])
        row = conn.execute(
            "SELECT COALESCE(SUM(d.copies), 0), COALESCE(SUM(d.records), 0) FROM dropped d "
            "LEFT JOIN produced p ON p.topic = d.topic AND p.producer_id = d.producer_id "
            "AND p.epoch = d.epoch AND p.sequence = d.sequence WHERE d.topic = ? AND d.grp = ? "
            "AND COALESCE(p.acked_ms, d.first_ms) BETWEEN ? AND ?",
            (topic, group, since_ms, now_ms),
        ).fetchone()
        gf.dropped_duplicate_blocks, gf.dropped_duplicate_records = int(row[0]), int(row[1])
        last = conn.execute(
            "SELECT MAX(last_ms) FROM consumed WHERE topic = ? AND grp = ?", (topic, group)
        ).fetchone()[0]
        gf.last_consumed_ms = None if last is None else int(last)
        if gf.missing_blocks or gf.mismatches:
            gf.status = "missing"
        elif gf.duplicate_blocks or gf.unaudited_blocks:
            gf.status = "warn"
        elif gf.last_consumed_ms is None:  # (never consumed this topic: nothing proven)
            gf.status = "unconsumed"
        gf.reason = status_reason(gf, grace_ms)
        return gf

    def timeseries(
        self,
        topic: str,
        *,
        now_ms: int,
        since_ms: int,
        grace_ms: int,
        group: str | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Per-minute series for ``topic`` (and each of its groups, or just ``group``).

        ``produced``: records acked in the minute; per group ``consumed``: records handed
        out in the minute; ``missing``/``pending``: records of blocks acked in the minute
        that the group has not handed out; latency percentiles of the blocks handed out
        in the minute.
        """
        conn = self._conn()
        first = since_ms - since_ms % MINUTE_MS
        minutes = list(range(first, now_ms + 1, MINUTE_MS))
        index = {m: i for i, m in enumerate(minutes)}
        n = len(minutes)

        def slot(ms: int) -> int | None:
            return index.get(ms - ms % MINUTE_MS)

        produced = [0] * n
        for acked, recs in conn.execute(
            "SELECT acked_ms, records FROM produced WHERE topic = ? AND acked_ms BETWEEN ? AND ?",
            (topic, first, now_ms),
        ):
            if (i := slot(acked)) is not None:
                produced[i] += recs
        groups: dict[str, Any] = {}
        cutoff = now_ms - grace_ms
        for g in [group] if group is not None else self.groups(topic):
            consumed = [0] * n
            missing = [0] * n
            pending = [0] * n
            lat: list[list[float]] = [[] for _ in range(n)]
            for handed, recs, latency in conn.execute(
                "SELECT c.first_ms, c.records, c.first_ms - p.min_ts FROM consumed c "
                "LEFT JOIN produced p ON p.topic = c.topic AND p.producer_id = c.producer_id "
                "AND p.epoch = c.epoch AND p.sequence = c.sequence "
                "WHERE c.topic = ? AND c.grp = ? AND c.first_ms BETWEEN ? AND ?",
                (topic, g, first, now_ms),
            ):
                if (i := slot(handed)) is not None:
                    consumed[i] += recs
                    if latency is not None:
                        lat[i].append(latency)
            start = self._start(topic, g, first, strict)
            if start is not None:
                for acked, recs in conn.execute(
                    "SELECT p.acked_ms, p.records FROM produced p WHERE p.topic = ? "
                    "AND p.acked_ms BETWEEN ? AND ? AND NOT EXISTS (SELECT 1 FROM consumed c "
                    "WHERE c.topic = p.topic AND c.grp = ? AND c.producer_id = p.producer_id "
                    "AND c.epoch = p.epoch AND c.sequence = p.sequence) " + _UNEXPIRED,
                    (topic, max(first, start), now_ms, g, now_ms),
                ):
                    if (i := slot(acked)) is not None:
                        (missing if acked < cutoff else pending)[i] += recs
            for series in lat:
                series.sort()
            groups[g] = {
                "consumed": consumed,
                "missing": missing,
                "pending": pending,
                "latency_p50_ms": [percentile(s, 50) for s in lat],
                "latency_p99_ms": [percentile(s, 99) for s in lat],
            }
        return {"topic": topic, "minutes": minutes, "produced": produced, "groups": groups}

    def missing(
        self,
        topic: str,
        group: str,
        *,
        now_ms: int,
        since_ms: int,
        grace_ms: int,
        limit: int = 1000,
        strict: bool = False,
    ) -> list[dict[str, Any]]:
        """Blocks acked in the window, past the grace period, never handed out by ``group``."""
        start = self._start(topic, group, since_ms, strict)
        if start is None:
            return []
        rows = self._conn().execute(
            "SELECT p.producer_id, p.epoch, p.sequence, p.records, p.acked_ms, p.min_ts, "
            "p.acks, p.bucket, p.object_key, p.client FROM produced p WHERE p.topic = ? "
            "AND p.acked_ms BETWEEN ? AND ? AND NOT EXISTS (SELECT 1 FROM consumed c "
            "WHERE c.topic = p.topic AND c.grp = ? AND c.producer_id = p.producer_id "
            "AND c.epoch = p.epoch AND c.sequence = p.sequence) " + _UNEXPIRED + " "
            "ORDER BY p.acked_ms, p.producer_id, p.sequence LIMIT ?",
            (topic, max(since_ms, start), now_ms - grace_ms - 1, group, now_ms, limit),
        )
        return [
            {
                "topic": topic,
                "group": group,
                "producer_id": _u64(pid),
                "epoch": epoch,
                "sequence": _u64(seq),
                "records": recs,
                "acked_ms": acked,
                "min_timestamp": min_ts,
                "acks": acks,
                "bucket": bucket,
                "object_key": key,
                "client": client,
            }
            for pid, epoch, seq, recs, acked, min_ts, acks, bucket, key, client in rows
        ]

    def anomalies(
        self, topic: str, group: str, *, now_ms: int, since_ms: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Blocks ``group`` handed out more than once or with a different content CRC."""
        rows = self._conn().execute(
            "SELECT p.producer_id, p.epoch, p.sequence, p.records, c.records, c.times, "
            "p.content_crc, c.content_crc, c.crc_conflict, p.object_key, c.object_key "
            "FROM produced p JOIN consumed c ON c.topic = p.topic AND c.grp = ? "
            "AND c.producer_id = p.producer_id AND c.epoch = p.epoch "
            "AND c.sequence = p.sequence WHERE p.topic = ? AND p.acked_ms BETWEEN ? AND ? "
            "AND (c.times > 1 OR c.content_crc != p.content_crc OR c.crc_conflict) "
            "ORDER BY p.acked_ms LIMIT ?",
            (group, topic, since_ms, now_ms, limit),
        )
        out = []
        for pid, epoch, seq, precs, crecs, times, pcrc, ccrc, conflict, pkey, ckey in rows:
            mismatch = bool(conflict) or pcrc != ccrc
            out.append(
                {
                    "producer_id": _u64(pid),
                    "epoch": epoch,
                    "sequence": _u64(seq),
                    "kind": "mismatch" if mismatch else "duplicate",
                    "produced_records": precs,
                    "consumed_records": crecs,
                    "times": times,
                    "produced_crc": pcrc,
                    "consumed_crc": ccrc,
                    "object_key": pkey or ckey,
                }
            )
        return out
