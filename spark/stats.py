"""Scan counters: LIST requests, objects planned and read, objects skipped.

Counting happens in processes the caller's Python never sees: Spark plans a Python
data source in a planner worker and reads it in executor workers. The counters
therefore travel as one Spark accumulator (a dict of counts) created by
:func:`spark.register`; planners and tasks add to it and Spark merges the updates
on the driver. ``MemqSource.stats()`` returns a :class:`ScanStats` snapshot; subtract
two snapshots to get one query's counts.

As with every Spark accumulator, updates made inside actions count once per
successful task; a stage retried after a lost executor may count its reads twice.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from pyspark.accumulators import AccumulatorParam

__all__ = ["Counter", "CountsParam", "ScanStats", "StatsSink"]


@dataclass(frozen=True, slots=True)
class ScanStats:
    """Counts of one or more scans (a snapshot; subtract two to get a delta)."""

    list_requests: int = 0  # LIST calls (pages) sent to S3
    prefixes_listed: int = 0  # distinct prefixes listed (root + one per hash)
    keys_listed: int = 0  # keys returned by those LISTs
    keys_ignored: int = 0  # keys under the topic that are not MemQ object keys
    objects_planned: int = 0  # objects assigned to partitions (after dedup and pruning)
    bytes_planned: int = 0
    duplicates_dropped: int = 0  # hedged copies (X and X-h1) read once
    partitions_planned: int = 0
    objects_read: int = 0
    bytes_read: int = 0
    blocks_read: int = 0
    blocks_pruned: int = 0  # blocks skipped by the time range without decoding
    objects_pruned: int = 0  # objects whose header showed no block in the pushed filters' window
    records_read: int = 0  # rows emitted (after the time filter and dedup)
    duplicate_blocks_dropped: int = 0  # dedup=true: block copies a task had already read
    corrupt_skipped: int = 0  # objects skipped by on_corrupt=skip (bad bytes)
    missing_skipped: int = 0  # objects skipped by on_corrupt=skip (gone when read)

    @classmethod
    def from_counts(cls, counts: dict[str, int]) -> ScanStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in counts.items() if k in names})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __sub__(self, other: ScanStats) -> ScanStats:
        a, b = self.as_dict(), other.as_dict()
        return ScanStats(**{k: a[k] - b[k] for k in a})

    def __add__(self, other: ScanStats) -> ScanStats:
        a, b = self.as_dict(), other.as_dict()
        return ScanStats(**{k: a[k] + b[k] for k in a})


class CountsParam(AccumulatorParam[dict[str, int]]):
    """Accumulator param merging ``{name: count}`` dicts."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:  # noqa: N802
        for k, v in value2.items():
            value1[k] = value1.get(k, 0) + v
        return value1


class StatsSink(Protocol):
    """Anything counts can be added to (a Spark accumulator, or a :class:`Counter`)."""

    def add(self, term: dict[str, int]) -> None: ...


class Counter:
    """A thread-safe local :class:`StatsSink` (planning threads add to it concurrently)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, term: dict[str, int]) -> None:
        with self._lock:
            for k, v in term.items():
                self._counts[k] = self._counts.get(k, 0) + v

    def snapshot(self) -> ScanStats:
        with self._lock:
            return ScanStats.from_counts(dict(self._counts))

    def flush_to(self, sink: Any) -> None:
        """Add everything counted so far to ``sink`` (once, at the end of a scan)."""
        if sink is None:
            return
        with self._lock:
            counts = {k: v for k, v in self._counts.items() if v}
        if counts:
            sink.add(counts)
