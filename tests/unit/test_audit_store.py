"""Matching and figures of the auditor's SQLite store, from hand-made audit records."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import typer

from memq.audit.figures import percentile
from memq.audit.store import AuditStore, Ingest
from memq.audit.window import parse_duration_s, parse_since
from memq.errors import ConfigError, MemqError
from memq.formats.audit import AuditRecord

T0 = 1_763_790_000_000  # a minute boundary
MIN = 60_000
_offsets = iter(range(1_000_000))


def rec(kind: str, seq: int, *, t: int, pid: int = 7, records: int = 100, crc: int = 1,
        group: str | None = None, topic: str = "events", key: str | None = None,
        min_ts: int | None = None) -> Ingest:  # fmt: skip
    r = AuditRecord(
        kind=kind,  # type: ignore[arg-type]
        topic=topic,
        producer_id=pid,
        epoch=0,
        sequence=seq,
        records=records,
        content_crc=crc,
        min_timestamp=t - 500 if min_ts is None else min_ts,
        time=t,
        acks="all" if kind == "produced" else None,
        bucket="b",
        key=key or f"obj-{seq}",
        group=group,
    )
    return Ingest(r, "memq.audit", 0, next(_offsets))


def produced(seq: int, t: int, **kw: Any) -> Ingest:
    return rec("produced", seq, t=t, **kw)


def consumed(seq: int, t: int, group: str = "g", **kw: Any) -> Ingest:
    return rec("consumed", seq, t=t, group=group, **kw)


def dropped(seq: int, t: int, group: str = "g", **kw: Any) -> Ingest:
    """A copy of block ``seq`` the consumer recognised as already handed out."""
    return rec("dropped", seq, t=t, group=group, key=f"copy-{seq}", **kw)


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(tmp_path / "audit.db")


def figures(store: AuditStore, now: int, *, since: int = T0 - MIN, grace: int = 10_000,
            group: str | None = None) -> Any:  # fmt: skip
    (t,) = store.summary(now_ms=now, since_ms=since, grace_ms=grace, topic="events", group=group)
    return t


def test_everything_consumed_is_ok(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(10)])
    store.apply([consumed(i, T0 + 20_000 + i) for i in range(10)])
    t = figures(store, T0 + 60_000)
    assert (t.produced_blocks, t.produced_records, t.status) == (10, 1000, "ok")
    (g,) = t.groups
    assert (g.consumed_blocks, g.consumed_records, g.missing_blocks, g.pending_blocks) == (
        10, 1000, 0, 0,
    )  # fmt: skip
    assert g.status == "ok" and g.duplicate_blocks == 0 and g.mismatches == 0
    # latency = hand-out time - oldest record: 20_000 + i - (i * 1000 - 500)
    lat = sorted(20_000 + i - (i * 1000 - 500) for i in range(10))
    assert g.latency_p50_ms == lat[4] and g.latency_p99_ms == lat[9]


def test_missing_after_grace_pending_before(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(10)])
    store.apply([consumed(i, T0 + 30_000) for i in (0, 1, 2, 4, 5, 6, 7)])  # 3, 8, 9 never
    now = T0 + 17_500  # grace 10 s: blocks acked before T0 + 7.5 s are due
    g = figures(store, now).groups[0]
    assert (g.missing_blocks, g.missing_records) == (1, 100)  # block 3
    assert (g.pending_blocks, g.pending_records) == (2, 200)  # blocks 8, 9
    assert g.status == "missing" and figures(store, now).status == "missing"
    rows = store.missing("events", "g", now_ms=now, since_ms=T0 - MIN, grace_ms=10_000)
    assert [(r["sequence"], r["object_key"], r["records"]) for r in rows] == [(3, "obj-3", 100)]
    later = T0 + 60_000
    assert figures(store, later).groups[0].missing_blocks == 3
    # The late consumption of block 3 repairs it.
    store.apply([consumed(3, T0 + 61_000)])
    assert figures(store, later + 2000).groups[0].missing_blocks == 2


def test_group_is_not_blamed_for_blocks_before_it_started(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(10)])
    store.apply([consumed(i, T0 + 30_000, group="late") for i in range(5, 10)])
    g = figures(store, T0 + 120_000, group="late").groups[0]
    assert g.watch_start_ms == T0 + 5000
    assert (g.consumed_blocks, g.missing_blocks) == (5, 0)


def test_duplicates_mismatches_and_unaudited(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000, crc=100 + i) for i in range(4)])
    store.apply(
        [
            consumed(0, T0 + 20_000, crc=100),
            consumed(0, T0 + 21_000, crc=100),  # redelivered
            consumed(1, T0 + 20_000, crc=999),  # different content
            consumed(2, T0 + 20_000, crc=102),
            consumed(3, T0 + 20_000, crc=103),
            consumed(50, T0 + 20_000, crc=5),  # no produced record
        ]
    )
    g = figures(store, T0 + 60_000).groups[0]
    assert (g.consumed_blocks, g.consumed_records) == (4, 400)
    assert (g.duplicate_blocks, g.duplicate_records) == (1, 100)
    assert g.mismatches == 1 and (g.unaudited_blocks, g.unaudited_records) == (1, 100)
    assert g.status == "missing"  # a mismatch is a loss of the original content
    kinds = {
        (a["sequence"], a["kind"])
        for a in store.anomalies("events", "g", now_ms=T0 + 60_000, since_ms=T0 - MIN)
    }
    assert kinds == {(0, "duplicate"), (1, "mismatch")}


def test_same_group_different_crc_on_redelivery_is_a_mismatch(store: AuditStore) -> None:
    store.apply([produced(0, T0, crc=1), consumed(0, T0 + 1000, crc=1)])
    store.apply([consumed(0, T0 + 2000, crc=2)])
    assert figures(store, T0 + 60_000).groups[0].mismatches == 1


def test_groups_are_independent(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(3)])
    store.apply([consumed(i, T0 + 10_000, group="a") for i in range(3)])
    store.apply([consumed(i, T0 + 10_000, group="b") for i in (0, 2)])
    t = figures(store, T0 + 60_000)
    by = {g.group: g for g in t.groups}
    assert by["a"].missing_blocks == 0 and by["b"].missing_blocks == 1
    assert t.status == "missing"


def test_unconsumed_topic(store: AuditStore) -> None:
    store.apply([produced(0, T0)])
    t = figures(store, T0 + 60_000)
    assert t.groups == [] and t.status == "unconsumed"


def test_a_named_group_that_consumed_nothing_is_unconsumed_not_ok(store: AuditStore) -> None:
    """(`memq audit report -g <typo>` said ok and exited 0: nothing was proven)"""
    store.apply([produced(i, T0 + i) for i in range(3)])
    store.apply([consumed(i, T0 + 10_000) for i in range(3)])
    (g,) = figures(store, T0 + 60_000, group="nosuchgroup").groups
    assert (g.consumed_blocks, g.missing_blocks, g.status) == (0, 0, "unconsumed")
    (g,) = figures(store, T0 + 60_000, group="g").groups
    assert g.status == "ok"


def test_identity_includes_producer_and_u64_round_trips(store: AuditStore) -> None:
    big = (1 << 64) - 5
    store.apply([produced(1, T0, pid=big), produced(1, T0, pid=1)])
    store.apply([consumed(1, T0 + 1000, pid=big)])
    rows = store.missing("events", "g", now_ms=T0 + 60_000, since_ms=T0 - MIN, grace_ms=0)
    assert [(r["producer_id"], r["sequence"]) for r in rows] == [(1, 1)]


def test_offsets_are_stored_with_the_rows_and_rejected_records_advance_them(
    tmp_path: Path,
) -> None:
    s = AuditStore(tmp_path / "a.db")
    s.apply(
        [Ingest(produced(0, T0).record, "memq.audit", 0, 10)],
        rejected=[("memq.audit", 0, 11), ("memq.audit", 1, 3)],
    )
    assert s.offsets("memq.audit") == {0: 12, 1: 4}
    assert s.counters() == {"produced_records": 1, "rejected_records": 2}
    s.close()
    again = AuditStore(tmp_path / "a.db")  # a restart sees the same state
    assert again.offsets("memq.audit") == {0: 12, 1: 4}
    assert figures(again, T0 + 1000).produced_blocks == 1


def test_failed_transaction_leaves_nothing(store: AuditStore) -> None:
    store.apply([produced(0, T0)])
    before = store.offsets("memq.audit")

    class BoomError(Exception):
        pass

    def bad() -> Any:
        yield produced(1, T0)
        raise BoomError

    with pytest.raises(BoomError):
        store.apply(bad())
    assert store.offsets("memq.audit") == before
    assert figures(store, T0 + 1000).produced_blocks == 1


def test_timeseries_per_minute(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 20_000) for i in range(6)])  # 3 per minute, 2 minutes
    store.apply([consumed(i, T0 + 125_000) for i in range(5)])  # block 5 never
    ts = store.timeseries("events", now_ms=T0 + 170_000, since_ms=T0, grace_ms=10_000)
    assert ts["minutes"] == [T0, T0 + MIN, T0 + 2 * MIN]
    assert ts["produced"] == [300, 300, 0]
    g = ts["groups"]["g"]
    assert g["consumed"] == [0, 0, 500]
    assert g["missing"] == [0, 100, 0]
    assert g["latency_p50_ms"][2] is not None and g["latency_p50_ms"][0] is None


def test_prune_forgets_old_blocks(store: AuditStore) -> None:
    store.apply([produced(0, T0), produced(1, T0 + 10 * MIN), consumed(0, T0 + 1000)])
    assert store.prune(T0 + MIN) == 2
    assert figures(store, T0 + 20 * MIN, since=0).produced_blocks == 1


def test_not_a_database(tmp_path: Path) -> None:
    p = tmp_path / "junk.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(MemqError, match="not a usable SQLite file"):
        AuditStore(p)


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0


def test_windows() -> None:
    now = T0
    assert parse_since("10m", now) == now - 600_000
    assert parse_since("1.5h", now) == now - 5_400_000
    assert parse_since(str(T0 - 5), now) == T0 - 5
    assert parse_since("2025-11-22T05:00:00Z", now) == 1763787600000
    assert parse_since("2025-11-22T05:00:00", now) == 1763787600000
    assert parse_duration_s("90") == 90.0 and parse_duration_s("250ms") == 0.25
    with pytest.raises(ConfigError, match="duration"):
        parse_since("yesterday", now)
    # A bare number is a duration without its unit or epoch seconds: neither is guessed.
    for bare in ("0", "3600", "1700000000"):
        with pytest.raises(ConfigError, match="ambiguous"):
            parse_since(bare, now)
    with pytest.raises(ConfigError, match="empty window"):
        parse_since("0s", now)
    with pytest.raises(ConfigError, match="not in the past"):
        parse_since("2099-01-01T00:00:00Z", now)
    with pytest.raises(ConfigError, match="not in the past"):
        parse_since(str(now), now)
    with pytest.raises(ConfigError, match="duration"):
        parse_duration_s("10 minutes")


def test_strict_counts_the_first_blocks_a_group_never_saw(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(5)])
    store.apply([consumed(i, T0 + 30_000) for i in (2, 3, 4)])  # blocks 0 and 1 lost
    lenient = figures(store, T0 + 60_000).groups[0]
    assert lenient.missing_blocks == 0  # indistinguishable from a group started at latest
    strict = store.summary(
        now_ms=T0 + 60_000, since_ms=T0, grace_ms=10_000, topic="events", strict=True
    )[0].groups[0]
    assert strict.missing_blocks == 2 and strict.status == "missing"
    rows = store.missing(
        "events", "g", now_ms=T0 + 60_000, since_ms=T0, grace_ms=10_000, strict=True
    )
    assert [r["sequence"] for r in rows] == [0, 1]


# --- dropped duplicates (consumer dedup) -------------------------------------------------


def test_dropped_copies_are_counted_apart_from_duplicates(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(4)])
    store.apply(
        [
            consumed(0, T0 + 20_000),
            consumed(0, T0 + 21_000),  # handed out twice: dedup did not catch it
            consumed(1, T0 + 20_000),
            consumed(2, T0 + 20_000),
            consumed(3, T0 + 20_000),
            dropped(1, T0 + 22_000),  # two more copies of block 1, recognised and dropped
            dropped(1, T0 + 23_000, records=40),  # (a copy after a seek: fewer records)
            dropped(2, T0 + 22_000),
        ]
    )
    g = figures(store, T0 + 60_000).groups[0]
    assert (g.consumed_blocks, g.consumed_records) == (4, 400)
    assert (g.duplicate_blocks, g.duplicate_records) == (1, 100)  # block 0 only
    assert (g.dropped_duplicate_blocks, g.dropped_duplicate_records) == (3, 240)
    assert g.missing_blocks == 0 and g.mismatches == 0 and g.unaudited_blocks == 0
    assert g.status == "warn"  # for the duplicate of block 0, not for the dropped copies
    kinds = {
        (a["sequence"], a["kind"])
        for a in store.anomalies("events", "g", now_ms=T0 + 60_000, since_ms=T0 - MIN)
    }
    assert kinds == {(0, "duplicate")}
    assert store.counters() == {"produced_records": 4, "consumed_records": 5,
                                "dropped_records": 3}  # fmt: skip


def test_only_dropped_copies_leave_the_group_ok(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(3)])
    store.apply([consumed(i, T0 + 10_000) for i in range(3)])
    store.apply([dropped(i, T0 + 12_000) for i in range(3)])
    t = figures(store, T0 + 60_000)
    (g,) = t.groups
    assert (g.dropped_duplicate_blocks, g.dropped_duplicate_records) == (3, 300)
    assert (g.consumed_blocks, g.duplicate_blocks, g.status, t.status) == (3, 0, "ok", "ok")
    # The per-minute consumption counts hand-outs only.
    ts = store.timeseries("events", now_ms=T0 + 60_000, since_ms=T0, grace_ms=10_000)
    assert sum(ts["groups"]["g"]["consumed"]) == 300


def test_a_dropped_copy_never_counts_as_consumption(store: AuditStore) -> None:
    store.apply([produced(i, T0 + i * 1000) for i in range(10)])
    store.apply([consumed(i, T0 + 30_000) for i in (5, 6, 7, 9)])
    # Copies of blocks 2 (before the group's first consumption) and 8 (never handed out)
    # were dropped: neither moves the watch start nor makes block 8 look consumed.
    store.apply([dropped(2, T0 + 31_000), dropped(8, T0 + 31_000)])
    g = figures(store, T0 + 120_000).groups[0]
    assert g.watch_start_ms == T0 + 5000
    assert (g.consumed_blocks, g.missing_blocks, g.missing_records) == (4, 1, 100)
    assert (g.dropped_duplicate_blocks, g.duplicate_blocks, g.status) == (2, 0, "missing")
    rows = store.missing("events", "g", now_ms=T0 + 120_000, since_ms=T0 - MIN, grace_ms=0)
    assert [r["sequence"] for r in rows] == [8]
    # A group that only ever dropped copies is listed, but consumed nothing.
    store.apply([dropped(1, T0 + 32_000, group="only-dropped")])
    by = {x.group: x for x in figures(store, T0 + 120_000).groups}
    assert (by["only-dropped"].consumed_blocks, by["only-dropped"].watch_start_ms) == (0, None)
    assert by["only-dropped"].dropped_duplicate_blocks == 1


def test_dropped_copies_are_windowed_by_their_block(store: AuditStore) -> None:
    store.apply([produced(0, T0), produced(1, T0 + 10 * MIN)])
    store.apply([consumed(0, T0 + 1000), consumed(1, T0 + 10 * MIN + 1000)])
    # Block 0 (acked before the window) is dropped inside it; block 50 has no produced
    # record: it belongs to the window by when its copy was dropped.
    store.apply([dropped(0, T0 + 10 * MIN + 2000), dropped(1, T0 + 10 * MIN + 2000),
                 dropped(50, T0 + 10 * MIN + 3000), dropped(51, T0 + 2000)])  # fmt: skip
    g = figures(store, T0 + 11 * MIN, since=T0 + 5 * MIN).groups[0]
    assert g.dropped_duplicate_blocks == 2  # blocks 1 and 50
    assert g.unaudited_blocks == 0  # a dropped copy is not an unaudited consumption
    assert figures(store, T0 + 11 * MIN, since=T0 - MIN).groups[0].dropped_duplicate_blocks == 4


def test_prune_forgets_old_dropped_copies(store: AuditStore) -> None:
    store.apply([produced(0, T0), consumed(0, T0 + 1000), dropped(0, T0 + 2000),
                 dropped(1, T0 + 20 * MIN)])  # fmt: skip
    assert store.prune(T0 + MIN) == 3
    g = figures(store, T0 + 30 * MIN, since=0).groups[0]
    assert (g.dropped_duplicate_blocks, g.consumed_blocks) == (1, 0)


def test_a_database_from_before_dropped_copies_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    s = AuditStore(path)
    s.apply([produced(0, T0), consumed(0, T0 + 1000)])
    s.close()
    with sqlite3.connect(path) as old:  # the file as an auditor without the table left it
        old.execute("DROP TABLE dropped")
    with sqlite3.connect(path) as old:
        tables = {n for (n,) in old.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "dropped" not in tables and {"produced", "consumed", "meta"} <= tables
    again = AuditStore(path)  # same schema version: the table is added, nothing else changes
    again.apply([dropped(0, T0 + 2000)])
    g = figures(again, T0 + MIN).groups[0]
    assert (g.consumed_blocks, g.dropped_duplicate_blocks, g.status) == (1, 1, "ok")
    again.close()


def test_dropped_copies_reach_the_gauges_and_the_report(store: AuditStore) -> None:
    from prometheus_client import generate_latest
    from rich.console import Console

    from memq.audit.metrics import AuditorMetrics
    from memq.cli.audit import print_report

    store.apply([produced(0, T0), consumed(0, T0 + 1000), consumed(0, T0 + 1500)])
    store.apply([dropped(0, T0 + 2000), dropped(0, T0 + 3000, records=60)])
    topics = [t.to_dict() for t in store.summary(now_ms=T0 + MIN, since_ms=T0 - MIN,
                                                  grace_ms=0)]  # fmt: skip
    g = topics[0]["groups"][0]
    assert (g["dropped_duplicate_blocks"], g["dropped_duplicate_records"]) == (2, 160)
    assert (g["duplicate_blocks"], g["duplicate_records"]) == (1, 100)
    m = AuditorMetrics()
    m.set_figures(topics)
    text = generate_latest(m.registry).decode()
    assert 'memq_audit_dropped_duplicate_blocks{group="g",topic="events"} 2.0' in text
    assert 'memq_audit_dropped_duplicate_records{group="g",topic="events"} 160.0' in text
    assert 'memq_audit_duplicate_blocks{group="g",topic="events"} 1.0' in text
    console = Console(width=200, record=True)
    doc = {"now_ms": T0 + MIN, "since_ms": T0 - MIN, "grace_period_s": 0.0, "topics": topics}
    print_report(console, doc, {})
    report = console.export_text()
    assert "dups dropped" in report and "160 (2 copies)" in report
    assert "100 (1 blocks)" in report


def test_blocks_past_their_topics_retention_are_expired_not_missing(store: AuditStore) -> None:
    """A block never consumed whose topic kept data 5 s (retention_ms in its produced
    record) expired by design; without a retention it is missing."""

    def with_retention(seq: int, t: int, retention: int | None) -> Ingest:
        item = produced(seq, t)
        return Ingest(item.record.model_copy(update={"retention_ms": retention}),
                      item.kafka_topic, item.partition, item.offset)  # fmt: skip

    store.apply([consumed(9, T0 + 500), with_retention(9, T0, 5_000)])  # the watch start
    store.apply([with_retention(1, T0 + 1000, 5_000), with_retention(2, T0 + 1000, None)])
    g = figures(store, T0 + 60_000).groups[0]
    # (a block whose producer did not know the retention takes its topic's latest)
    assert (g.expired_blocks, g.expired_records) == (2, 200)
    assert (g.missing_blocks, g.missing_records) == (0, 0)
    # A topic whose retention was never reported never expires: unconsumed is missing.
    store.apply([produced(1, T0, topic="other"), consumed(1, T0 + 500, topic="other"),
                 produced(2, T0 + 1000, topic="other")])  # fmt: skip
    (row,) = store.missing("other", "g", now_ms=T0 + 60_000, since_ms=T0 - MIN, grace_ms=10_000)
    assert row["sequence"] == 2


def test_a_lowered_retention_expires_the_older_blocks_too(store: AuditStore) -> None:
    """retention.ms lowered from a week to 5 s: the retention job deletes by the new value,
    so blocks acked under the old one are expired, not missing (they were reported as
    loss); raised again, they are missing again. An older report arriving late (audit
    partitions interleave) does not undo a newer one."""

    def with_retention(seq: int, t: int, retention: int) -> Ingest:
        item = produced(seq, t)
        return Ingest(item.record.model_copy(update={"retention_ms": retention}),
                      item.kafka_topic, item.partition, item.offset)  # fmt: skip

    week = 7 * 86_400_000
    store.apply([consumed(9, T0 + 500), with_retention(9, T0, week)])
    store.apply([with_retention(i, T0 + 1000 * i, week) for i in (1, 2)])
    assert figures(store, T0 + 60_000).groups[0].missing_blocks == 2
    store.apply([with_retention(3, T0 + 30_000, 5_000), with_retention(4, T0 + 2000, week)])
    g = figures(store, T0 + 60_000).groups[0]
    assert (g.expired_blocks, g.missing_blocks) == (4, 0)
    store.apply([with_retention(5, T0 + 40_000, week)])
    g = figures(store, T0 + 60_000).groups[0]
    assert (g.expired_blocks, g.missing_blocks) == (0, 5)


def test_a_retention_of_kafkas_forever_is_stored_not_an_overflow(store: AuditStore) -> None:
    """retention.ms = Long.MAX_VALUE (Kafka's "forever"): ack time + retention overflowed
    SQLite's INTEGER and the whole ingest batch failed (other topics' records with it)."""

    def with_retention(seq: int, t: int, retention: int | None) -> Ingest:
        item = produced(seq, t)
        return Ingest(item.record.model_copy(update={"retention_ms": retention}),
                      item.kafka_topic, item.partition, item.offset)  # fmt: skip

    store.apply([consumed(9, T0 + 500), with_retention(9, T0, (1 << 63) - 1)])
    store.apply([with_retention(1, T0 + 1000, (1 << 63) - 1), produced(2, T0 + 1000)])
    g = figures(store, T0 + 60_000).groups[0]
    assert figures(store, T0 + 60_000).produced_blocks == 3
    assert (g.expired_blocks, g.missing_blocks) == (0, 2)  # never expired: missing


def test_a_file_from_before_expiry_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    AuditStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE produced DROP COLUMN expires_ms")
    store = AuditStore(path)
    store.apply([produced(1, T0)])
    assert figures(store, T0 + 60_000).produced_blocks == 1


def test_a_batch_that_fails_to_store_is_read_again(store: AuditStore) -> None:
    """The ingest loop's Kafka position has passed a batch when storing it fails: it
    seeks back to the batch's first offsets, so a retry stores it (was: skipped for good,
    records of every topic in it unaudited while /healthz said ok)."""
    from memq.audit.config import AuditKafkaConfig, AuditorConfig
    from memq.audit.ingest import Ingester
    from memq.audit.metrics import AuditorMetrics
    from memq.formats.audit import encode_audit

    class Msg:
        def __init__(self, partition: int, offset: int, value: bytes) -> None:
            self._where, self._value = (partition, offset), value

        def error(self) -> None:
            return None

        def topic(self) -> str:
            return "memq.audit"

        def partition(self) -> int:
            return self._where[0]

        def offset(self) -> int:
            return self._where[1]

        def value(self) -> bytes:
            return self._value

    log = [(p, o, produced(o, T0 + o).record) for p in (0, 1) for o in range(3)]

    class Kafka:  # the audit topic's consumer: two partitions, a position each
        def __init__(self) -> None:
            self.pos = {0: 0, 1: 0}

        def consume(self, n: int, timeout: float) -> list[Msg]:
            out = [Msg(p, o, encode_audit(r.model_dump(exclude_none=True)))
                   for p, o, r in log if o >= self.pos[p]]  # fmt: skip
            for m in out:
                self.pos[m.partition()] = m.offset() + 1
            return out

        def seek(self, tp: Any) -> None:
            self.pos[tp.partition] = tp.offset

    failing = {"left": 1}
    real_apply = store.apply

    def apply(*a: Any, **kw: Any) -> None:
        if failing["left"]:
            failing["left"] -= 1
            raise sqlite3.OperationalError("disk I/O error")
        real_apply(*a, **kw)

    store.apply = apply  # type: ignore[method-assign]
    cfg = AuditorConfig(kafka=AuditKafkaConfig(bootstrap_servers="unused:9092"))
    ing = Ingester(cfg, store, AuditorMetrics(), clock=lambda: T0)
    kafka = Kafka()
    with pytest.raises(sqlite3.OperationalError):
        ing._ingest_once(kafka)
    assert kafka.pos == {0: 0, 1: 0}  # rewound
    ing._ingest_once(kafka)
    assert figures(store, T0 + 60_000).produced_blocks == 3  # (p, seq) pairs: 3 distinct
    assert store.offsets("memq.audit") == {0: 3, 1: 3}


def test_iso_times_all_readers_share() -> None:
    """`memq consume --from-time`, `audit report --since` and the Spark options read ISO
    text the same way (one parser): Z or z, an offset, no zone (UTC), a date alone."""
    from memq.formats.times import iso_to_ms, ms_to_iso

    for text in ("2025-11-22T05:00:00Z", "2025-11-22T05:00:00z", "2025-11-22T06:00:00+01:00",
                 " 2025-11-22T05:00:00 ", "2025-11-22 05:00"):  # fmt: skip
        assert iso_to_ms(text) == 1763787600000, text
    assert iso_to_ms("2025-11-22") == 1763769600000
    assert iso_to_ms("2004-02-27T17:06:19.034Z") == 1077901579034  # (floats gave ...033)
    assert all(iso_to_ms(ms_to_iso(ms)) == ms for ms in range(1077901579000, 1077901580000))
    for bad in ("yesterday", "", "Z", "2025-13-01"):
        with pytest.raises(ValueError):
            iso_to_ms(bad)
    # Printed back: a record may carry any int64, past what datetime knows (it crashed
    # `memq peek`, `cat` and `consume --format json`).
    assert ms_to_iso(1763787600000) == "2025-11-22T05:00:00.000Z"
    assert ms_to_iso(2**63 - 1) == "9223372036854775807"
    assert ms_to_iso(-(2**63)) == "-9223372036854775808"


def test_epoch_digits_rule_is_shared() -> None:
    """Epoch milliseconds, or ISO text; a short positive number is refused by every reader
    (CLI, audit window, Spark options) with the same words: as ms it would be 1970."""
    from memq.cli.options import parse_time
    from memq.formats.times import time_to_ms
    from memq.spark.options import parse_time_ms

    assert time_to_ms("1763787600000") == 1763787600000 == time_to_ms("2025-11-22T05:00:00Z")
    assert time_to_ms("0") == 0 and time_to_ms("-5") == -5 and time_to_ms("100000000000") > 0
    for short in ("1", "20251122", "1795576922"):
        with pytest.raises(ValueError, match="is ambiguous: give epoch milliseconds"):
            time_to_ms(short)
        with pytest.raises(typer.BadParameter, match="is ambiguous"):
            parse_time(short)
        with pytest.raises(ConfigError, match="is ambiguous"):
            parse_time_ms("start_time", short)
        with pytest.raises(ConfigError, match=r"is ambiguous.*or a duration with its unit"):
            parse_since(short, T0)
    with pytest.raises(ValueError, match="not ISO-8601"):
        time_to_ms("--5")


def test_a_status_other_than_ok_says_why(store: AuditStore) -> None:
    """(issue 43: a ``warn`` row showed no reason)"""
    store.apply([produced(i, T0 + i * 1000) for i in range(3)])
    store.apply([consumed(i, T0 + 20_000) for i in range(3)])
    store.apply([consumed(0, T0 + 21_000), consumed(60, T0 + 20_000, records=40),
                 consumed(61, T0 + 20_000, records=2)])  # fmt: skip
    g = figures(store, T0 + 60_000).groups[0]
    assert g.status == "warn"
    assert g.reason == (
        "1 block handed out more than once (100 extra records); 42 records in 2 blocks "
        "consumed with no produced record (unaudited: their producer or broker does not "
        "report, or its records were dropped)"
    )
    store.apply([produced(3, T0 + 3000, records=1)])
    g = figures(store, T0 + 60_000, grace=10_000).groups[0]
    assert g.status == "missing"
    assert g.reason is not None and g.reason.startswith(
        "1 record in 1 block acked over 10 s ago never handed out (missing); 1 block handed"
    )
    (ok,) = figures(store, T0 + 60_000, group="g2").groups
    assert (ok.status, ok.reason) == (
        "unconsumed",
        "the group handed out no block of this topic: nothing is proven for it",
    )
    store.apply([produced(9, T0, topic="calm"), consumed(9, T0 + 1, topic="calm")])
    (t,) = store.summary(now_ms=T0 + MIN, since_ms=T0 - MIN, grace_ms=0, topic="calm")
    assert (t.groups[0].status, t.groups[0].reason) == ("ok", None)


def test_only_topics_with_records_in_the_window_are_listed(store: AuditStore) -> None:
    """A topic whose records are all older than the window (deleted, or quiet) leaves the
    listing; asked for by name it is still answered."""
    store.apply([produced(0, T0, topic="old"), consumed(0, T0 + 1000, topic="old")])
    store.apply([produced(0, T0 + 3 * 3600_000, topic="new")])
    store.apply([consumed(5, T0 + 3 * 3600_000, topic="read-only")])  # consumed in the window
    now = T0 + 3 * 3600_000 + MIN
    listed = store.summary(now_ms=now, since_ms=now - 3600_000, grace_ms=0)
    assert [t.topic for t in listed] == ["new", "read-only"]
    (old,) = store.summary(now_ms=now, since_ms=now - 3600_000, grace_ms=0, topic="old")
    assert (old.topic, old.produced_blocks) == ("old", 0)
    assert [t.topic for t in store.summary(now_ms=now, since_ms=T0 - MIN, grace_ms=0)] == [
        "new", "old", "read-only",
    ]  # fmt: skip


class _Listing:
    """A lag source as far as the topic listing goes."""

    def __init__(self, listing: tuple[frozenset[str], int] | None) -> None:
        self._listing = listing

    def listing(self) -> tuple[frozenset[str], int] | None:
        return self._listing

    def snapshot(self) -> dict[str, Any]:
        return {"measured_ms": None, "error": None, "errors": 0, "groups": []}

    def collect(self) -> list[Any]:
        return []


def test_topics_the_cluster_no_longer_has_leave_the_listing(tmp_path: Path) -> None:
    """(issue 43: purged topics stayed listed) In an earlier listing of the cluster, not
    in the last one, and nothing audited since: left out. Audited after the last listing
    (created again), or never in any listing (another cluster's): kept. Asked for by name:
    answered."""
    from memq.audit.config import AuditorConfig
    from memq.audit.service import Auditor

    cfg = AuditorConfig(
        kafka={"bootstrap_servers": "unused:0"},  # type: ignore[arg-type]
        db_path=tmp_path / "a.db",
    )
    now = T0 + 10 * MIN
    src = _Listing(None)
    auditor = Auditor(cfg, clock=lambda: now, lag=src)  # type: ignore[arg-type]
    try:
        auditor.store.apply([produced(0, T0, topic=t) for t in ("kept", "purged", "again",
                                                                 "elsewhere")])  # fmt: skip
        every = ["again", "elsewhere", "kept", "purged"]

        def listed() -> list[str]:
            return [t["topic"] for t in auditor.summary({"since": "1h"})["topics"]]

        assert listed() == every  # nothing known about the cluster: every topic stays
        src._listing = (frozenset({"kept", "purged", "again"}), T0 + 2 * MIN)
        assert listed() == every
        src._listing = (frozenset({"kept"}), T0 + 5 * MIN)  # purged and again deleted
        assert listed() == ["elsewhere", "kept"]
        auditor.store.apply([produced(1, T0 + 6 * MIN, topic="again")])  # created again
        assert listed() == ["again", "elsewhere", "kept"]
        (one,) = auditor.summary({"since": "1h", "topic": "purged"})["topics"]
        assert (one["topic"], one["produced_blocks"]) == ("purged", 1)
    finally:
        auditor.executor.shutdown(wait=False)
        auditor.store.close()


def test_gauges_of_a_topic_no_longer_listed_are_removed() -> None:
    from prometheus_client import generate_latest

    from memq.audit.metrics import AuditorMetrics

    def topic(name: str) -> dict[str, Any]:
        g = {k: 0 for k in ("missing_blocks", "missing_records", "pending_records",
                            "duplicate_blocks", "dropped_duplicate_blocks",
                            "dropped_duplicate_records", "mismatches", "consumed_records")}  # fmt: skip
        return {"topic": name, "produced_records": 5,
                "groups": [{**g, "group": "g", "missing_blocks": 3, "latency_p99_ms": 10}]}  # fmt: skip

    m = AuditorMetrics()
    m.set_figures([topic("a"), topic("b")])
    text = generate_latest(m.registry).decode()
    assert 'memq_audit_missing_blocks{group="g",topic="a"} 3.0' in text
    m.set_figures([topic("b")])
    text = generate_latest(m.registry).decode()
    assert 'topic="a"' not in text
    assert 'memq_audit_missing_blocks{group="g",topic="b"} 3.0' in text
    assert 'memq_audit_produced_records{topic="b"} 5.0' in text
