"""The auditor's state in SQLite: the blocks reported produced, consumed and dropped.

One row per produced block ``(topic, producer_id, epoch, sequence)``, one per block a
consumer group handed out ``(topic, group, producer_id, epoch, sequence)`` and one per
block of which a group dropped copies (``dropped``: the copies and their records, kept
apart from ``consumed`` so a dropped copy never counts as a consumption); the Kafka
offsets of the audit topic are stored in the same transaction as the rows they produced,
so a restarted auditor resumes exactly where it stopped (nothing lost, nothing counted
twice). WAL mode lets the HTTP API read while the ingest thread writes; each thread uses
its own connection.

Tables are created with ``CREATE TABLE IF NOT EXISTS`` on every open, so a file written
before a table existed (``dropped``) gains it and keeps working (same schema version).

This module owns the file: connections, schema, writes (:meth:`AuditStore.apply`,
:meth:`AuditStore.prune`), offsets and counters. What the rows mean (consumed, missing,
duplicates, ...) is computed by :mod:`memq.audit.figures`; the store's query methods
delegate there.

``producer_id`` and ``sequence`` are u64 in the format and stored as the signed 64-bit
integer with the same bits (SQLite integers are signed).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memq.audit.figures import Figures, GroupFigures, TopicFigures
from memq.errors import MemqError
from memq.formats.audit import AuditRecord
from memq.formats.block import INT64_MAX

__all__ = ["AuditStore", "GroupFigures", "Ingest", "TopicFigures"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS produced (
    topic TEXT NOT NULL, producer_id INTEGER NOT NULL, epoch INTEGER NOT NULL,
    sequence INTEGER NOT NULL, records INTEGER NOT NULL, content_crc INTEGER NOT NULL,
    min_ts INTEGER NOT NULL, acked_ms INTEGER NOT NULL, acks TEXT, bucket TEXT,
    object_key TEXT, client TEXT, reports INTEGER NOT NULL DEFAULT 1, expires_ms INTEGER,
    PRIMARY KEY (topic, producer_id, epoch, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS produced_by_time ON produced (topic, acked_ms);
CREATE TABLE IF NOT EXISTS consumed (
    topic TEXT NOT NULL, grp TEXT NOT NULL, producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL, sequence INTEGER NOT NULL, records INTEGER NOT NULL,
    content_crc INTEGER NOT NULL, crc_conflict INTEGER NOT NULL DEFAULT 0,
    times INTEGER NOT NULL DEFAULT 1, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
    object_key TEXT, client TEXT,
    PRIMARY KEY (topic, grp, producer_id, epoch, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS consumed_by_time ON consumed (topic, grp, first_ms);
CREATE INDEX IF NOT EXISTS consumed_by_block ON consumed (topic, producer_id, epoch, sequence);
CREATE TABLE IF NOT EXISTS dropped (
    topic TEXT NOT NULL, grp TEXT NOT NULL, producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL, sequence INTEGER NOT NULL, copies INTEGER NOT NULL DEFAULT 1,
    records INTEGER NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
    object_key TEXT, client TEXT,
    PRIMARY KEY (topic, grp, producer_id, epoch, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dropped_by_time ON dropped (topic, grp, first_ms);
CREATE TABLE IF NOT EXISTS offsets (
    kafka_topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (kafka_topic, partition)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS retention (
    topic TEXT PRIMARY KEY, since_ms INTEGER NOT NULL, retention_ms INTEGER NOT NULL
);
"""

_INSERT_PRODUCED = """
INSERT INTO produced (topic, producer_id, epoch, sequence, records, content_crc, min_ts,
                      acked_ms, acks, bucket, object_key, client, expires_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (topic, producer_id, epoch, sequence) DO UPDATE SET reports = reports + 1
"""

#: Every block of a topic expires ``retention.ms`` (the topic's latest, as the retention
#: job deletes by it) after its ack; capped at the largest SQLite INTEGER.
_EXPIRES = f"CASE WHEN ? > {INT64_MAX} - acked_ms THEN {INT64_MAX} ELSE acked_ms + ? END"

_INSERT_CONSUMED = """
INSERT INTO consumed (topic, grp, producer_id, epoch, sequence, records, content_crc,
                      first_ms, last_ms, object_key, client)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (topic, grp, producer_id, epoch, sequence) DO UPDATE SET
    times = times + 1,
    records = records + excluded.records,
    crc_conflict = crc_conflict OR content_crc != excluded.content_crc,
    first_ms = MIN(first_ms, excluded.first_ms),
    last_ms = MAX(last_ms, excluded.last_ms)
"""

_INSERT_DROPPED = """
INSERT INTO dropped (topic, grp, producer_id, epoch, sequence, records, first_ms, last_ms,
                     object_key, client)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (topic, grp, producer_id, epoch, sequence) DO UPDATE SET
    copies = copies + 1,
    records = records + excluded.records,
    first_ms = MIN(first_ms, excluded.first_ms),
    last_ms = MAX(last_ms, excluded.last_ms)
"""


def _expiring(row: tuple[Any, ...], current: dict[str, int]) -> tuple[Any, ...]:
    """A ``produced`` row (its last field: the retention.ms it reported, or None) with its
    expiry: ack time plus the topic's latest retention (Kafka's "forever",
    Long.MAX_VALUE, capped: it would overflow SQLite's INTEGER)."""
    retention = current.get(row[0], row[-1])
    expires = None if retention is None else min(row[7] + retention, INT64_MAX)
    return (*row[:-1], expires)


def _i64(u: int) -> int:
    """The signed 64-bit integer with the bits of u64 ``u`` (figures read the reverse)."""
    return u - (1 << 64) if u >= 1 << 63 else u


@dataclass(frozen=True, slots=True)
class Ingest:
    """One audit record with where it came from in the audit topic."""

    record: AuditRecord
    kafka_topic: str
    partition: int
    offset: int


class AuditStore:
    """Thread-safe access to one auditor SQLite file (a connection per thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self.figures = Figures(self._conn)
        try:
            conn = self._conn()
            conn.executescript(_SCHEMA)
            cols = {row[1] for row in conn.execute("PRAGMA table_info(produced)")}
            if "expires_ms" not in cols:  # a file from before retention-aware figures
                conn.execute("ALTER TABLE produced ADD COLUMN expires_ms INTEGER")
        except sqlite3.DatabaseError as e:
            raise MemqError(
                f"audit database {self.path} is not a usable SQLite file ({e}): move it away "
                "and restart the auditor (it re-reads the audit topic from its retention)"
            ) from None
        version = conn.execute("SELECT v FROM meta WHERE k = 'schema_version'").fetchone()
        if version is None:
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(version[0]) != SCHEMA_VERSION:
            raise MemqError(
                f"audit database {self.path} has schema version {version[0]}, this auditor "
                f"uses {SCHEMA_VERSION}: use a matching auditor or a new db_path"
            )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error:
                conn.close()
                raise
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # --- ingest -------------------------------------------------------------------------

    def apply(self, batch: Iterable[Ingest], rejected: Sequence[tuple[str, int, int]] = ()) -> int:
        """Store a batch of records and advance the offsets, in one transaction.

        ``rejected`` are ``(kafka_topic, partition, offset)`` of undecodable records: they
        only advance the offsets and a counter. Returns the records applied.
        """
        produced: list[tuple[Any, ...]] = []
        consumed: list[tuple[Any, ...]] = []
        dropped: list[tuple[Any, ...]] = []
        offsets: dict[tuple[str, int], int] = {}
        #: Per topic, the newest (ack time, retention.ms) this batch reports.
        seen: dict[str, tuple[int, int]] = {}
        for item in batch:
            r = item.record
            pid, seq = _i64(r.producer_id), _i64(r.sequence)
            if r.kind == "produced":
                if r.retention_ms is not None and r.time >= seen.get(r.topic, (r.time, 0))[0]:
                    seen[r.topic] = (r.time, r.retention_ms)
                produced.append(
                    (r.topic, pid, r.epoch, seq, r.records, r.content_crc, r.min_timestamp,
                     r.time, r.acks, r.bucket, r.key, r.client, r.retention_ms)
                )  # fmt: skip
            elif r.kind == "consumed":
                consumed.append(
                    (r.topic, r.group or "", pid, r.epoch, seq, r.records, r.content_crc,
                     r.time, r.time, r.key, r.client)
                )  # fmt: skip
            else:  # "dropped": a copy the consumer did not hand out (never a consumption)
                dropped.append(
                    (r.topic, r.group or "", pid, r.epoch, seq, r.records, r.time, r.time,
                     r.key, r.client)
                )  # fmt: skip
            tp = (item.kafka_topic, item.partition)
            offsets[tp] = max(offsets.get(tp, -1), item.offset + 1)
        for kt, part, off in rejected:
            offsets[(kt, part)] = max(offsets.get((kt, part), -1), off + 1)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = self._apply_retention(conn, seen)
            conn.executemany(_INSERT_PRODUCED, [_expiring(row, current) for row in produced])
            conn.executemany(_INSERT_CONSUMED, consumed)
            conn.executemany(_INSERT_DROPPED, dropped)
            conn.executemany(
                "INSERT INTO offsets VALUES (?, ?, ?) ON CONFLICT (kafka_topic, partition) "
                "DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)",
                [(kt, p, o) for (kt, p), o in offsets.items()],
            )
            for name, n in (
                ("produced_records", len(produced)),
                ("consumed_records", len(consumed)),
                ("dropped_records", len(dropped)),
                ("rejected_records", len(rejected)),
            ):
                if n:
                    conn.execute(
                        "INSERT INTO counters VALUES (?, ?) ON CONFLICT (name) "
                        "DO UPDATE SET value = value + excluded.value",
                        (name, n),
                    )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return len(produced) + len(consumed) + len(dropped)

    @staticmethod
    def _apply_retention(
        conn: sqlite3.Connection, seen: dict[str, tuple[int, int]]
    ) -> dict[str, int]:
        """Each topic's latest retention.ms (of ``seen``, the batch's newest reports, and
        the stored ones), stored; a topic's blocks expire by it, whatever it was at their
        ack: lowered, the retention job deletes older blocks early (expired, not missing)."""
        current: dict[str, int] = {}
        for topic, (since, ret) in seen.items():
            row = conn.execute(
                "SELECT since_ms, retention_ms FROM retention WHERE topic = ?", (topic,)
            ).fetchone()
            if row is not None and row[0] >= since:  # the stored report is newer
                current[topic] = row[1]
                continue
            current[topic] = ret
            conn.execute(
                "INSERT INTO retention VALUES (?, ?, ?) ON CONFLICT (topic) DO UPDATE SET "
                "since_ms = excluded.since_ms, retention_ms = excluded.retention_ms",
                (topic, since, ret),
            )
            if row is not None and row[1] != ret:  # changed: every earlier block of it
                conn.execute(
                    f"UPDATE produced SET expires_ms = {_EXPIRES} WHERE topic = ?",
                    (ret, ret, topic),
                )
        return current

    def offsets(self, kafka_topic: str) -> dict[int, int]:
        rows = self._conn().execute(
            "SELECT partition, next_offset FROM offsets WHERE kafka_topic = ?", (kafka_topic,)
        )
        return {int(p): int(o) for p, o in rows}

    def meta(self, key: str) -> str | None:
        """A value of the meta table: ``schema_version``, ``grace_period_s`` (the
        serving auditor's, for reports read from the file), ``topic_id:<audit topic>``."""
        row = self._conn().execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._conn().execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            (key, value),
        )

    # The Kafka topic id the stored offsets of an audit topic belong to (meta table): a
    # different id means a different topic (a new Kafka, or deleted and created again).

    def topic_id(self, kafka_topic: str) -> str | None:
        return self.meta(f"topic_id:{kafka_topic}")

    def set_topic_id(self, kafka_topic: str, topic_id: str) -> None:
        self.set_meta(f"topic_id:{kafka_topic}", topic_id)

    def resync(self, kafka_topic: str, topic_id: str | None) -> dict[int, int]:
        """Forget the offsets of ``kafka_topic`` (it is re-read from the beginning) and
        record its new id, in one transaction; returns the offsets dropped. The figures
        already stored stay."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            dropped = self.offsets(kafka_topic)
            conn.execute("DELETE FROM offsets WHERE kafka_topic = ?", (kafka_topic,))
            key = f"topic_id:{kafka_topic}"
            if topic_id is None:
                conn.execute("DELETE FROM meta WHERE k = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                    (key, topic_id),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return dropped

    def reset_offsets(self, kafka_topic: str, offsets: dict[int, int]) -> None:
        """Set the next offsets of partitions to these values, even lower ones (Kafka
        reset them: :meth:`apply` only ever moves offsets forward)."""
        self._conn().executemany(
            "INSERT INTO offsets VALUES (?, ?, ?) ON CONFLICT (kafka_topic, partition) "
            "DO UPDATE SET next_offset = excluded.next_offset",
            [(kafka_topic, p, o) for p, o in offsets.items()],
        )

    def counters(self) -> dict[str, int]:
        return {str(n): int(v) for n, v in self._conn().execute("SELECT * FROM counters")}

    def prune(self, before_ms: int) -> int:
        """Forget blocks acked (and consumptions handed out, copies dropped) before
        ``before_ms``."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            n = conn.execute("DELETE FROM produced WHERE acked_ms < ?", (before_ms,)).rowcount
            n += conn.execute("DELETE FROM consumed WHERE last_ms < ?", (before_ms,)).rowcount
            n += conn.execute("DELETE FROM dropped WHERE last_ms < ?", (before_ms,)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return n

    # --- figures (computed by memq.audit.figures) ---------------------------------------

    def topics(self) -> list[str]:
        return self.figures.topics()

    def groups(self, topic: str) -> list[str]:
        return self.figures.groups(topic)

    def watch_start(self, topic: str, group: str) -> int | None:
        """See :meth:`Figures.watch_start`."""
        return self.figures.watch_start(topic, group)

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
        """See :meth:`Figures.summary`."""
        return self.figures.summary(
            now_ms=now_ms, since_ms=since_ms, grace_ms=grace_ms, topic=topic, group=group,
            strict=strict,
        )  # fmt: skip

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
        """See :meth:`Figures.timeseries`."""
        return self.figures.timeseries(
            topic, now_ms=now_ms, since_ms=since_ms, grace_ms=grace_ms, group=group,
            strict=strict,
        )  # fmt: skip

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
        """See :meth:`Figures.missing`."""
        return self.figures.missing(
            topic, group, now_ms=now_ms, since_ms=since_ms, grace_ms=grace_ms, limit=limit,
            strict=strict,
        )  # fmt: skip

    def anomalies(
        self, topic: str, group: str, *, now_ms: int, since_ms: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """See :meth:`Figures.anomalies`."""
        return self.figures.anomalies(topic, group, now_ms=now_ms, since_ms=since_ms, limit=limit)
