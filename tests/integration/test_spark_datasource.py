"""The ``memq`` Spark data source against the real local stack (moto S3, Spark local[2])."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from memq.devstack import StackState
from memq.errors import ConfigError
from memq.formats import Compression
from memq.formats.keys import hash_prefix
from memq.spark import ScanStats, parse_options, plan_scan
from memq.spark.stats import Counter as StatsCounter
from tests.integration.spark_fixtures import (  # noqa: F401 - fixtures
    HOUR_MS,
    T0,
    TopicWriter,
    as_tuples,
    compare_view,
    expected_row,
    memq_source_fixture,
    plan_now,
    spark_rows,
    spark_session_fixture,
)


def _writer(memq_stack: StackState, bucket: str, topic: str, **kw: Any) -> TopicWriter:
    return TopicWriter(memq_stack.s3_endpoint, bucket, topic, **kw)


def _load(session: Any, options: dict[str, str]) -> Any:
    return session.read.format("memq").options(**options).load()


def _read(session: Any, source: Any, options: dict[str, str]) -> tuple[list[Any], ScanStats]:
    before = source.stats()
    rows = spark_rows(_load(session, options))
    return rows, source.stats() - before


def test_reads_every_record_once_with_exact_fields(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    producers = [(42, 1, 0), ((1 << 64) - 1, (1 << 32) - 1, (1 << 63) + 5), (1 << 63, 0, 7)]
    for h in range(3):
        for j, (pid, epoch, seq) in enumerate(producers):
            created = T0 + h * HOUR_MS + j * 60_000 + 30_000
            blocks = [w.records(40, created - 20_000, 10_000) for _ in range(2)]
            w.write(
                created,
                blocks,
                producer_id=pid,
                epoch=epoch,
                first_sequence=seq,
                compression=list(Compression)[j % 4],
            )
    rows, stats = _read(spark_session, memq_source, w.options())
    assert Counter(rows) == Counter(w.rows)
    assert len(rows) == 9 * 80
    assert stats.objects_read == stats.objects_planned == 9
    assert stats.records_read == len(rows)
    assert 1 <= stats.partitions_planned < 9  # grouped by bytes, never one per object
    # Unsigned ids keep their bits: the signed value plus 2**64 is the u64 written.
    assert {r[4] % (1 << 64) for r in rows} == {p[0] for p in producers}

    df = _load(spark_session, w.options())
    first = df.where("block_index = 1 AND record_index = 0").collect()
    assert len(first) == 9
    assert {r.object_key for r in first} == {s.key for s in w.stored}
    assert {r.topic for r in first} == {w.topic}


def test_time_range_prunes_listing_and_returns_exactly_the_range(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    # Production buckets hold many objects under each hash prefix; put the test's objects
    # under three hashes (by choosing broker sequence numbers) so listing pages matter.
    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    wanted = {"0a", "7f", "c3"}
    hours = 8
    per_hour = 6
    for h in range(hours):
        for j in range(per_hour):
            created = T0 + h * HOUR_MS + j * 600_000
            seq = _seq_in(w.broker, created, wanted, start=h * 1000 + j * 100)
            w.write(created, [w.records(20, created - 30_000, 30_000)], seq=seq)
    assert {s.key[:2] for s in w.stored} <= wanted

    start, end = T0 + 3 * HOUR_MS + 15 * 60_000, T0 + 4 * HOUR_MS + 30 * 60_000
    small_pages = {"list_page_size": "4", "time_slack_ms": "600000"}
    full_rows, full = _read(spark_session, memq_source, w.options(**small_pages))
    ranged = w.options(start_time=str(start), end_time=str(end), **small_pages)
    rows, pruned = _read(spark_session, memq_source, ranged)

    assert Counter(full_rows) == Counter(w.rows)
    assert Counter(rows) == Counter(r for r in w.rows if start <= r[0] < end)
    assert rows  # the range is not empty
    # Fewer LIST requests and far fewer keys listed than the full scan.
    assert pruned.list_requests < full.list_requests
    assert pruned.keys_listed < full.keys_listed // 2
    assert pruned.objects_planned < full.objects_planned // 2
    assert full.objects_planned == hours * per_hour
    # The same planner, called directly, counts the same requests.
    direct = StatsCounter()
    plan_scan(parse_options(ranged), cores=2, counter=direct)
    assert direct.snapshot().list_requests == pruned.list_requests
    assert direct.snapshot().prefixes_listed == 1 + len(wanted)

    # ISO-8601 bounds mean the same as epoch ms.
    iso = w.options(start_time="2025-11-22T05:15:00Z", end_time="2025-11-22T06:30:00+00:00")
    iso_rows, _ = _read(spark_session, memq_source, iso)
    assert Counter(iso_rows) == Counter(r for r in w.rows if start <= r[0] < end)


def _seq_in(broker: str, created: int, wanted: set[str], start: int) -> int:
    from memq.formats import batch_id

    seq = start
    while hash_prefix(batch_id(created, broker, seq)) not in wanted:
        seq += 1
    return seq


def test_hedged_duplicate_is_read_once(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    created = T0 + 10_000
    recs = w.records(30, T0, 5_000)
    w.write(created, [recs], seq=5)
    # The hedged second upload: same batch, same bytes, key suffix -h1 (another hash).
    w.writer.store(w.topic, f"{created:013d}-{5:08d}-{w.broker}-h1", created, _bytes_of(w, 0))
    w.write(created + 1, [w.records(10, T0, 5_000)], seq=6)
    keys = [o["Key"] for o in memq_stack.s3_client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert len(keys) == 3 and any(k.endswith("-h1") for k in keys)

    rows, stats = _read(spark_session, memq_source, w.options())
    assert Counter(rows) == Counter(w.rows)
    assert stats.duplicates_dropped == 1
    assert stats.objects_read == 2
    read_keys = {r.object_key for r in _load(spark_session, w.options()).collect()}
    assert read_keys == {w.stored[0].key, w.stored[1].key}  # the original, not the -h1 copy


def _bytes_of(w: TopicWriter, i: int) -> bytes:
    body: bytes = w.writer.client.get_object(Bucket=w.bucket, Key=w.stored[i].key)["Body"].read()
    return body


def test_corrupt_and_missing_objects_fail_naming_the_key_or_are_skipped_and_counted(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    for i in range(4):
        base = T0 + i * 10_000
        w.write(base + 2_000, [w.records(25, base, 1_000), w.records(25, base, 1_000)])
    bad_key, gone_key = w.stored[0].key, w.stored[1].key
    data = bytearray(_bytes_of(w, 0))
    data[len(data) - 10] ^= 0x01  # flip one bit in the last block's body
    s3 = memq_stack.s3_client()
    s3.put_object(Bucket=s3_bucket, Key=bad_key, Body=bytes(data))

    # Corrupt: the query fails by default, naming the object and the way out.
    with pytest.raises(Exception) as failed:
        _load(spark_session, w.options()).collect()
    text = str(failed.value)
    assert "CorruptObjectError" in text and bad_key in text and "on_corrupt" in text

    # Missing: listed when the query is planned, deleted before its tasks read it.
    after_bad = {"start_time": str(T0 + 10_000), "time_slack_ms": "0"}
    df_fail = plan_now(compare_view(_load(spark_session, w.options(**after_bad))))
    df_skip = plan_now(compare_view(_load(spark_session, w.options(on_corrupt="skip"))))
    s3.delete_object(Bucket=s3_bucket, Key=gone_key)
    with pytest.raises(Exception) as missing:
        df_fail.collect()
    text = str(missing.value)
    assert "MissingObjectError" in text and gone_key in text and "on_corrupt" in text

    # Skip: both are skipped and counted; every other record is read exactly once.
    before = memq_source.stats()
    rows = as_tuples(df_skip.collect())
    stats = memq_source.stats() - before
    assert Counter(rows) == Counter(w.rows[100:])  # objects 2 and 3, 50 records each
    assert (stats.corrupt_skipped, stats.missing_skipped, stats.objects_read) == (1, 1, 2)


def write_shared_block(w: TopicWriter) -> list[tuple[Any, ...]]:
    """Two objects that share a block (a retried block stored twice); returns the rows
    of that block's second copy. ``w.rows`` holds every record once."""
    shared = w.records(25, T0, 5_000)
    w.write(T0 + 10_000, [w.records(20, T0, 5_000), shared], producer_id=77, first_sequence=0)
    only_second = w.records(15, T0, 5_000)
    w.write(T0 + 12_000, [shared, only_second], producer_id=77, first_sequence=1, remember=False)
    w.rows.extend(expected_row(r, 77, 1, 2) for r in only_second)
    return [expected_row(r, 77, 1, 1) for r in shared]


def test_dedup_drops_repeated_blocks_per_task_and_the_helper_over_the_scan(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    from memq.spark import drop_duplicate_blocks

    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    copy = write_shared_block(w)
    once, twice = Counter(w.rows), Counter(w.rows + copy)
    assert len(w.rows) == 60 and len(copy) == 25

    # Off (default): both copies are read.
    rows, stats = _read(spark_session, memq_source, w.options())
    assert Counter(rows) == twice and stats.duplicate_blocks_dropped == 0
    # dedup=true, both objects in one task: the second copy is dropped before decoding.
    rows, stats = _read(spark_session, memq_source, w.options(dedup="true"))
    assert stats.partitions_planned == 1
    assert Counter(rows) == once
    assert (stats.duplicate_blocks_dropped, stats.records_read, stats.blocks_read) == (1, 60, 3)
    # One object per task: the option cannot see the other task's copy ...
    apart = {"target_partition_bytes": "1", "min_partition_bytes": "1"}
    rows, stats = _read(spark_session, memq_source, w.options(dedup="true", **apart))
    assert stats.partitions_planned == 2 and stats.duplicate_blocks_dropped == 0
    assert Counter(rows) == twice
    # ... the helper's shuffle does, with or without the option.
    for extra in ({}, {"dedup": "true"}):
        df = drop_duplicate_blocks(_load(spark_session, w.options(**apart, **extra)))
        assert Counter(spark_rows(df)) == once
        full = df.collect()
        assert len({(r.producer_id, r.epoch, r.sequence, r.record_index) for r in full}) == 60
    # Columns it needs must be there.
    with pytest.raises(ConfigError, match="record_index"):
        drop_duplicate_blocks(_load(spark_session, w.options()).select("topic", "value"))


def test_where_on_timestamp_is_pushed_down_when_the_session_allows_it(
    spark_session: Any,
    memq_source: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    from memq.spark import register
    from memq.spark.pushdown import FILTER_PUSHDOWN_CONF

    w = _writer(memq_stack, s3_bucket, unique_name("t"))
    rng = random.Random(3)

    def block(n: int, ts0: int, spread_ms: int) -> list[Any]:  # ~1.5 KB incompressible each
        return [(ts0 + rng.randrange(spread_ms), None, rng.randbytes(1500), None) for _ in range(n)]

    for h in range(6):  # 4 blocks of 5 minutes each, 10-30 minutes past the hour
        created = T0 + h * HOUR_MS + 30 * 60_000
        w.write(created, [block(30, created - (4 - j) * 5 * 60_000, 5 * 60_000) for j in range(4)])
    # A record whose batch was sealed hours after its timestamp (a client's event time):
    # a filter finds it where the start_time/end_time options (listing +-slack) do not.
    lo_us = (T0 + 2 * HOUR_MS + 15 * 60_000) * 1000 + 500  # (between two milliseconds)
    hi_us = (T0 + 3 * HOUR_MS + 17 * 60_000) * 1000
    late = block(1, lo_us // 1000 + 1, 1)
    w.write(T0 + 5 * HOUR_MS + 50 * 60_000, [late, block(10, T0 + 5 * HOUR_MS, 60_000)])

    def at(us: int) -> Any:  # a timestamp literal
        return F.lit(dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us))

    def where(df: Any) -> Any:
        return df.where((F.col("timestamp") > at(lo_us)) & (F.col("timestamp") <= at(hi_us)))

    want = Counter(r for r in w.rows if lo_us < r[0] * 1000 <= hi_us)
    assert 30 < sum(want.values()) < len(w.rows) // 4
    assert (lo_us // 1000 + 1, None, late[0][2], None, 42, 1, 0) in want

    def read(**extra: str) -> tuple[list[Any], ScanStats]:
        before = memq_source.stats()
        rows = spark_rows(where(_load(spark_session, w.options(**extra))))
        return rows, memq_source.stats() - before

    # Off (Spark's default): the same rows, every object read whole.
    rows, off = read()
    assert Counter(rows) == want
    assert (off.objects_read, off.objects_pruned, off.blocks_pruned) == (7, 0, 0)
    spark_session.conf.set(FILTER_PUSHDOWN_CONF, "true")
    try:
        register(spark_session)
        rows, on = read()
        assert Counter(rows) == want
        # Every object is listed; those whose index shows no block in the window cost
        # their header only, the others a GET of the blocks that overlap it.
        assert on.objects_planned == 7
        assert (on.objects_read, on.objects_pruned) == (3, 4)
        assert on.records_read == sum(want.values())  # dropped in the source, not by Spark
        assert (on.blocks_read, on.blocks_pruned) == (3 + 2 + 1, 6 * 4 + 2 - 6)
        assert on.bytes_read < off.bytes_read
        # A SQL string compared with the column, as in docs/spark.md (session zone UTC).
        before = memq_source.stats()
        sql = _load(spark_session, w.options()).where(
            "timestamp >= '2025-11-22 04:15:00' AND timestamp < '2025-11-22 05:17:00'"
        )
        lo_ms, hi_ms = T0 + 2 * HOUR_MS + 15 * 60_000, T0 + 3 * HOUR_MS + 17 * 60_000
        assert Counter(spark_rows(sql)) == Counter(r for r in w.rows if lo_ms <= r[0] < hi_ms)
        assert (memq_source.stats() - before).objects_pruned == 4
        # The options still narrow the listing (and the filters the records).
        rows, both = read(start_time=str(T0 + 2 * HOUR_MS), time_slack_ms="0")
        assert Counter(rows) == Counter(r for r in want if r[0] >= T0 + 2 * HOUR_MS)
        assert both.objects_planned == 5  # sealed at or after 2:00 (the late one too)
        # No record can pass: nothing is listed, nothing is read.
        before = memq_source.stats()
        empty = _load(spark_session, w.options()).where(F.col("timestamp") == at(lo_us))
        assert empty.count() == 0
        assert (memq_source.stats() - before).list_requests == 0
    finally:
        spark_session.conf.set(FILTER_PUSHDOWN_CONF, "false")
        register(spark_session)
    rows, again = read()  # registered again with the setting off: no pushdown, no error
    assert Counter(rows) == want and again.objects_read == 7
