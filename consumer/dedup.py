"""The dedup window: which block ids a consumer already handed out (pure, no I/O, no clock).

Every block carries its id: (producer id, epoch, sequence), per MemQ topic. A producer
numbers its blocks of a topic 0, 1, 2, ... per epoch, and re-sends a block unchanged on
retry, so a copy stored twice (a writer crashed after storing it, the retry went to
another writer) has the same id. A consumer remembers the ids it handed out and drops
later copies.

The window is bounded three ways:

* per producer, the ``blocks`` highest ids remembered; evicting one raises the producer's
  *floor*: an id at or below it can no longer be told apart from a new one, so it is
  delivered (:attr:`Verdict.OUT_OF_WINDOW`: at-least-once is the floor) and counted;
* at most ``producers`` producers, the least recently seen forgotten first;
* a producer not seen for ``window_ms`` is forgotten.

A forgotten producer's blocks are new again. Ids are kept as runs of consecutive
integers (``epoch << 64 | sequence``), so a producer whose blocks are all seen costs one
run however many ids the window holds; one seeing every n-th block (a group member
owning some of the partitions) costs up to one run per id.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from enum import Enum
from typing import NamedTuple

__all__ = ["BlockId", "DedupWindow", "Verdict"]


class BlockId(NamedTuple):
    """Identity of a producer block (a retry of the same block has the same id)."""

    topic: str  # MemQ topic
    producer_id: int
    epoch: int
    sequence: int


class Verdict(Enum):
    NEW = "new"  # not handed out before (within the window): deliver
    DUPLICATE = "duplicate"  # handed out before: drop
    OUT_OF_WINDOW = "out_of_window"  # older than the window: deliver (may be a copy)


class _Runs:
    """One producer's remembered ids: sorted disjoint runs ``[start, end)``."""

    __slots__ = ("count", "ends", "floor", "seen_ms", "starts")

    def __init__(self, seen_ms: int) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.count = 0
        self.floor = -1  # highest id evicted (every id <= floor is out of the window)
        self.seen_ms = seen_ms

    def __contains__(self, x: int) -> bool:
        i = bisect_right(self.starts, x)
        return i > 0 and x < self.ends[i - 1]

    def add(self, x: int) -> None:
        """Remember ``x`` (not yet remembered, above the floor)."""
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, x)
        left = i > 0 and ends[i - 1] == x
        right = i < len(starts) and starts[i] == x + 1
        if left and right:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif left:
            ends[i - 1] = x + 1
        elif right:
            starts[i] = x
        else:
            starts.insert(i, x)
            ends.insert(i, x + 1)
        self.count += 1

    def evict(self, n: int) -> None:
        """Forget the ``n`` lowest ids (raising the floor)."""
        starts, ends = self.starts, self.ends
        while n > 0:
            s, e = starts[0], ends[0]
            k = min(n, e - s)
            self.floor = s + k - 1
            if k == e - s:
                del starts[0], ends[0]
            else:
                starts[0] = s + k
            n -= k
            self.count -= k


def _key(block: BlockId) -> int:
    return (block.epoch << 64) | block.sequence


class DedupWindow:
    """Block ids handed out, per (topic, producer), within the bounds (module docstring).

    :meth:`verdict` asks about a block without remembering it; :meth:`remember` records
    it once every record of it was handed out. ``now_ms`` is any monotonic clock in ms.
    """

    def __init__(self, *, blocks: int, producers: int, window_ms: int) -> None:
        if blocks < 1 or producers < 1 or window_ms < 1:
            raise ValueError("dedup window bounds must be positive")
        self.blocks = blocks
        self.producers = producers
        self.window_ms = window_ms
        self._by_producer: OrderedDict[tuple[str, int], _Runs] = OrderedDict()

    def _expire(self, now_ms: int) -> None:
        by = self._by_producer
        while by:
            runs = next(iter(by.values()))
            if now_ms - runs.seen_ms < self.window_ms:
                break
            by.popitem(last=False)

    def verdict(self, block: BlockId, now_ms: int) -> Verdict:
        """Whether ``block`` was handed out before (within the window)."""
        self._expire(now_ms)
        runs = self._by_producer.get((block.topic, block.producer_id))
        if runs is None:
            return Verdict.NEW
        x = _key(block)
        if x in runs:
            return Verdict.DUPLICATE
        return Verdict.OUT_OF_WINDOW if x <= runs.floor else Verdict.NEW

    def remember(self, block: BlockId, now_ms: int) -> None:
        """``block`` was handed out (all of it): drop its later copies."""
        self._expire(now_ms)
        by = self._by_producer
        pk = (block.topic, block.producer_id)
        runs = by.pop(pk, None)
        if runs is None:
            runs = _Runs(now_ms)
        x = _key(block)
        if x > runs.floor and x not in runs:
            runs.add(x)
            if runs.count > self.blocks:
                runs.evict(runs.count - self.blocks)
        runs.seen_ms = now_ms
        by[pk] = runs  # most recently seen last
        while len(by) > self.producers:
            by.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (after a seek: re-reading is what was asked for)."""
        self._by_producer.clear()

    @property
    def producer_count(self) -> int:
        return len(self._by_producer)

    @property
    def block_count(self) -> int:
        """Block ids remembered over all producers."""
        return sum(r.count for r in self._by_producer.values())

    @property
    def run_count(self) -> int:
        """Runs of consecutive ids held (what the memory grows with)."""
        return sum(len(r.starts) for r in self._by_producer.values())
