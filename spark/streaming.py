"""``spark.readStream.format("memq")``: new batch objects, incrementally, exactly once.

Offset: ``{"version": 1, "sealed_ms": W}``. A micro-batch ``(start, end]`` reads every
object whose batch id says it was sealed at a time ``start.W < created_ms <= end.W``
(hedged copies collapsed). The offset is derived from object names alone, so it is
deterministic: Spark re-planning a batch after a crash lists the same range again.

Objects are named by seal time but land in S3 when their upload finishes, which can be
later (slow uploads, retries; the broker's S3 deadline is 60 s by default). Reading up
to "now" would move the watermark past an object still being uploaded, which would then
never be read. So a trigger only considers objects sealed at least ``settle_ms`` ago
(default 120 s, above the upload deadline), and moves the watermark to the newest such
object it actually found (never to an empty "now"). An object that lands more than
``settle_ms`` after its seal time, below the watermark, is missed: raise ``settle_ms``
if your uploads can take longer. The price is latency: data shows up ``settle_ms`` late.

Start: ``start_time`` (objects sealed at or after it), else ``starting_position``
``earliest`` (everything) or ``latest`` (only objects sealed from the query's start).
A restarted query resumes from its checkpointed offset and ignores both.
Records are not filtered by timestamp in streaming; ``end_time`` is rejected.
``max_objects_per_trigger`` caps a micro-batch (whole seal-time milliseconds are never
split, so a batch may hold a few more). ``Trigger.AvailableNow`` is supported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.accumulators import Accumulator
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from memq.errors import ConfigError
from memq.spark.listing import ObjectRef, list_objects
from memq.spark.options import ScanOptions
from memq.spark.planning import ScanPartition, pack_partitions
from memq.spark.reading import read_objects
from memq.spark.stats import Counter

__all__ = ["OFFSET_VERSION", "MemqStreamReader", "offset_of", "watermark_of"]

OFFSET_VERSION = 1


def offset_of(watermark_ms: int) -> dict[str, int]:
    return {"version": OFFSET_VERSION, "sealed_ms": watermark_ms}


def watermark_of(offset: dict[str, Any]) -> int:
    if offset.get("version") != OFFSET_VERSION or not isinstance(offset.get("sealed_ms"), int):
        raise ConfigError(
            f"memq streaming offset {offset!r} is not version {OFFSET_VERSION}: the "
            "checkpoint was written by another reader; start a new checkpoint"
        )
    return int(offset["sealed_ms"])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MemqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of newly sealed objects; offsets are seal-time watermarks."""

    def __init__(self, opts: ScanOptions, stats: Accumulator[dict[str, int]] | None, cores: int):
        if opts.end_ms is not None:
            raise ConfigError(
                "end_time bounds batch reads only: a stream has no end (use start_time, or "
                "a batch read with start_time/end_time)"
            )
        self.opts = opts
        self.stats = stats
        self.cores = cores
        self._target: int | None = None
        self._planned: dict[tuple[int, int], list[ObjectRef]] = {}

    def _ceiling(self) -> int:
        ceiling = _now_ms() - self.opts.settle_ms
        return ceiling if self._target is None else min(ceiling, self._target)

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API
        if self.opts.start_ms is not None:
            return offset_of(self.opts.start_ms - 1)
        if self.opts.starting_position == "latest":
            return offset_of(_now_ms() - self.opts.settle_ms)
        return offset_of(-1)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_objects_per_trigger is not None:
            return ReadMaxFiles(self.opts.max_objects_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = _now_ms() - self.opts.settle_ms

    def _list(self, lo: int, hi: int) -> list[ObjectRef]:
        counter = Counter()
        try:
            return list_objects(self.opts, lo, hi, counter).objects
        finally:
            counter.flush_to(self.stats)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        w0 = watermark_of(start)
        ceiling = self._ceiling()
        if ceiling <= w0:
            return offset_of(w0)
        found = self._list(w0 + 1, ceiling)
        if not found:
            return offset_of(w0)
        if isinstance(limit, ReadMaxFiles) and len(found) > limit.max_files:
            cut = found[max(1, limit.max_files) - 1].created_ms
            found = [o for o in found if o.created_ms <= cut]
        end = found[-1].created_ms
        self._planned = {(w0, end): found}
        return offset_of(end)

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        lo, hi = watermark_of(start), watermark_of(end)
        if hi <= lo:
            return []
        objects = self._planned.pop((lo, hi), None)
        if objects is None:  # re-planning after a restart: same range, same objects
            objects = self._list(lo + 1, hi)
        return pack_partitions(objects, self.opts, self.cores)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, ScanPartition):
            return iter(())
        return read_objects(partition.objects, self.opts, self.stats)

    def commit(self, end: dict[str, Any]) -> None:
        watermark_of(end)
