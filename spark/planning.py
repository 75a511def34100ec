"""Group listed objects into Spark partitions by bytes.

A Spark task has a fixed cost (tens of ms to schedule, ship and start), so one task per
object would waste most of a backfill on overhead. Objects, in seal-time order, are cut
into contiguous runs of about equal bytes:

- the size aims at ``partitions_per_core`` partitions per core (default 1, like Spark's
  own file source, whose split size is ``total bytes / default parallelism`` for small
  inputs), bounded by ``min_partition_bytes`` (tiny inputs get few tasks) and
  ``target_partition_bytes`` (huge inputs get bounded tasks);
- when that bound makes more partitions than cores, their count is rounded up to a
  multiple of the cores, so the last wave of tasks keeps every core busy;
- runs are contiguous in time, so each task writes to few ``dt=/hh=`` output folders.

Why one per core: a task's start is a serial stretch on its core (scheduling, the Python
worker round trip, and its first GET, which nothing overlaps yet); later objects are
fetched while earlier ones are decoded. On 2 cores, 25 objects of 4 MiB read in 6
partitions took ~560 ms and ~0.87 CPU-s per job, in 2 partitions ~450 ms and ~0.74 CPU-s
(interleaved runs, ``docs/spark.md``, Performance).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from memq.spark.listing import ObjectRef
from memq.spark.options import ScanOptions

__all__ = ["ScanPartition", "effective_cores", "pack_partitions", "partition_bytes"]


@dataclass(frozen=True)
class ScanPartition(InputPartition):
    """The objects one Spark task reads, in order (picklable: plain tuples)."""

    index: int
    objects: tuple[ObjectRef, ...]

    @property
    def size(self) -> int:
        return sum(o.size for o in self.objects)


def effective_cores(hint: int) -> int:
    """Cores to plan for: Spark's default parallelism when known, else this host's CPUs."""
    return hint if hint > 0 else (os.cpu_count() or 1)


def partition_bytes(opts: ScanOptions, total_bytes: int, cores: int) -> int:
    """Bytes per partition for ``total_bytes`` of input on ``cores`` cores."""
    wanted = math.ceil(total_bytes / max(1, cores * opts.partitions_per_core))
    return max(opts.min_partition_bytes, min(opts.target_partition_bytes, wanted))


def pack_partitions(
    objects: Sequence[ObjectRef], opts: ScanOptions, cores: int
) -> list[ScanPartition]:
    """Cut ``objects`` (seal-time order) into runs of about equal bytes."""
    if not objects:
        return []
    total = sum(o.size for o in objects)
    ncores = effective_cores(cores)
    size = partition_bytes(opts, total, ncores)
    count = max(1, math.ceil(total / size))
    if count > ncores:  # full waves: no core idles through the last one
        count = math.ceil(count / ncores) * ncores
    count = min(len(objects), count)
    # Balance: cut at multiples of total/count rather than filling each run to ``size``.
    share = total / count
    parts: list[ScanPartition] = []
    run: list[ObjectRef] = []
    acc = 0
    for obj in objects:
        run.append(obj)
        acc += obj.size
        if acc >= share * (len(parts) + 1) and len(parts) < count - 1:
            parts.append(ScanPartition(len(parts), tuple(run)))
            run = []
    if run:
        parts.append(ScanPartition(len(parts), tuple(run)))
    return parts
