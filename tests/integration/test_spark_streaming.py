"""``readStream.format("memq")``: new objects once per trigger, exact resume from a checkpoint."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memq.devstack import StackState
from memq.spark import parse_options
from memq.spark.listing import ObjectRef
from memq.spark.streaming import MemqStreamReader, offset_of, watermark_of
from tests.integration.spark_fixtures import (  # noqa: F401 - fixtures
    TopicWriter,
    as_tuples,
    compare_view,
    memq_source_fixture,
    spark_session_fixture,
)


class Clock:
    """Strictly increasing seal times at (or just after) the wall clock."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self, ago_ms: int = 0) -> int:
        self.last = max(time.time_ns() // 1_000_000 - ago_ms, self.last + 1)
        return self.last


def _write_objects(w: TopicWriter, clock: Clock, n: int) -> list[tuple[Any, ...]]:
    start = len(w.rows)
    for _ in range(n):
        created = clock()
        w.write(created, [w.records(15, created - 2_000, 1_000), w.records(5, created - 500, 400)])
    return w.rows[start:]


def test_stream_reads_new_objects_once_and_resumes_from_checkpoint(
    spark_session: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    w = TopicWriter(memq_stack.s3_endpoint, s3_bucket, unique_name("t"))
    clock = Clock()
    checkpoint = str(tmp_path / "checkpoint")
    batches: list[tuple[int, list[tuple[Any, ...]]]] = []

    def sink(df: Any, batch_id: int) -> None:
        batches.append((batch_id, as_tuples(compare_view(df).collect())))

    def start(**extra: str) -> Any:
        stream = (
            spark_session.readStream.format("memq")
            .options(**w.options(settle_ms="0", **extra))
            .load()
        )
        return stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)

    def seen() -> Counter[tuple[Any, ...]]:
        return Counter(r for _, rows in batches for r in rows)

    first = _write_objects(w, clock, 3)
    query = start().trigger(processingTime="200 milliseconds").start()
    try:
        query.processAllAvailable()
        assert seen() == Counter(first)
        # Objects added after that trigger are read by a later one, once.
        second = _write_objects(w, clock, 2)
        query.processAllAvailable()
        assert seen() == Counter(first + second)
        assert query.exception() is None
    finally:
        query.stop()

    # Restart from the checkpoint: only objects written since are read, capped at one
    # object per micro-batch.
    third = _write_objects(w, clock, 3)
    before = len(batches)
    query = start(max_objects_per_trigger="1").trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    resumed = [rows for _, rows in batches[before:] if rows]
    assert Counter(r for rows in resumed for r in rows) == Counter(third)
    assert len(resumed) == 3
    assert seen() == Counter(first + second + third)


def test_offsets_wait_for_settle_time_and_replan_deterministically(
    memq_stack: StackState, s3_bucket: str, unique_name: Callable[[str], str]
) -> None:
    w = TopicWriter(memq_stack.s3_endpoint, s3_bucket, unique_name("t"))
    clock = Clock()
    old = [w.write(clock(ago_ms=300_000), [w.records(3, 0, 10)]) for _ in range(2)]
    fresh = w.write(clock(), [w.records(3, 0, 10)])  # sealed just now: may still be landing
    reader = MemqStreamReader(parse_options(w.options(settle_ms="60000")), None, 2)

    start = reader.initialOffset()
    assert watermark_of(start) == -1
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    end = reader.latestOffset(start, ReadAllAvailable())
    planned = [o for p in reader.partitions(start, end) for o in p.objects]
    assert [o.key for o in planned] == [s.key for s in old]  # not the fresh one yet
    assert watermark_of(end) == planned[-1].created_ms

    # Nothing new and settled: the offset does not move (no empty micro-batch).
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    # A new reader (a restart) re-plans the same range to the same objects.
    again = MemqStreamReader(parse_options(w.options(settle_ms="60000")), None, 2)
    replanned = [o for p in again.partitions(start, end) for o in p.objects]
    assert replanned == planned
    # With no settle time the fresh object is next, and only it.
    eager = MemqStreamReader(parse_options(w.options(settle_ms="0")), None, 2)
    nxt = eager.latestOffset(end, ReadAllAvailable())
    assert [o.key for p in eager.partitions(end, nxt) for o in p.objects] == [fresh.key]
    assert nxt == offset_of(int(fresh.key.rsplit("/", 1)[1][:13]))
    assert isinstance(planned[0], ObjectRef)
