"""The ``memq`` Spark data source against the real local stack (moto S3, Spark local[2])."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from memq.devstack import StackState
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
