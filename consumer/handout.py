"""Handing an object's records to the application: the current object, and dropping copies.

A fetched object becomes :class:`Current`; its records are taken in order. With dedup on
(``dedup.enable``), a :class:`Deduplicator` first drops the object's blocks that were
already handed out (whole blocks: a block is the unit of retry), and a block is
remembered only once its last record was taken. Only one object is current at a time;
one left midway (parked because its partition was paused, or dropped by a revoke, a
lost partition or a seek) claims the exact records of its block in progress it handed
out (runs of record numbers, from the decoded chunks). A copy of that block fetched
later drops the claimed records; a parked object, once current again, hands out only
the records of its blocks no other object handed out meanwhile (a copy left with
nothing to hand out is audited as a dropped copy). A seek forgets every claim with the
window: what it asks to read again is handed out again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Protocol

from memq.consumer.config import ConsumerConfig
from memq.consumer.dedup import BlockId, DedupWindow, Verdict
from memq.consumer.fetcher import BlockSpan
from memq.consumer.message import Chunk, Message, Records
from memq.consumer.pending import Pending
from memq.formats.gcpause import gc_paused

__all__ = ["Admitted", "Current", "DedupStats", "Deduplicator", "Tracked"]


class DedupStats(Protocol):
    """The counters dedup updates (``ConsumerStats``)."""

    duplicate_blocks_dropped: int
    duplicate_records_dropped: int
    dedup_out_of_window: int


@dataclass(frozen=True, slots=True)
class Tracked:
    """A kept block of the current object: its records are ``messages[start:end]``."""

    block: BlockId
    index: int  # in the object
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Admitted:
    messages: Sequence[Message]  # Records (lazy) when given Records
    tracked: list[Tracked]
    #: Indexes of the object's blocks dropped as copies (not handed out, not audited).
    dropped: frozenset[int]
    #: Per block index: records dropped from it because they were handed out before the
    #: block was left midway (the rest of the block is handed out).
    trimmed: dict[int, int]


class Deduplicator:
    """The window of blocks handed out, applied to fetched objects."""

    def __init__(
        self,
        window: DedupWindow,
        stats: DedupStats,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self._stats = stats
        self._clock = clock
        #: Blocks handed out in part by objects left midway (parked or dropped): the runs
        #: of record numbers [first, end) handed out, sorted and disjoint (bounded: the
        #: least recently updated go first, which can only let a record out twice).
        self._partial: dict[BlockId, list[tuple[int, int]]] = {}

    @classmethod
    def from_config(cls, config: ConsumerConfig, stats: DedupStats) -> Deduplicator:
        """The window of ``dedup.window.*``."""
        window = DedupWindow(
            blocks=config.dedup_window_blocks,
            producers=config.dedup_window_producers,
            window_ms=config.dedup_window_ms,
        )
        return cls(window, stats)

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def admit(
        self, topic: str, messages: Sequence[Message], spans: Sequence[BlockSpan]
    ) -> Admitted:
        """The records of a fetched object (blocks ``spans``) minus what was handed out."""
        now = self._now()
        stats = self._stats
        kept: list[tuple[int, int]] = []  # [start, end) in ``messages``
        tracked: list[Tracked] = []
        dropped: set[int] = set()
        trimmed: dict[int, int] = {}
        here: set[BlockId] = set()
        pos_in = pos_out = 0
        for sp in spans:
            start, pos_in = pos_in, pos_in + sp.length
            bid = BlockId(topic, sp.producer_id, sp.epoch, sp.sequence)
            verdict = Verdict.DUPLICATE if bid in here else self.window.verdict(bid, now)
            if verdict is Verdict.DUPLICATE:
                stats.duplicate_blocks_dropped += 1
                stats.duplicate_records_dropped += sp.length
                dropped.add(sp.block)
                continue
            if verdict is Verdict.OUT_OF_WINDOW:
                stats.dedup_out_of_window += 1
            here.add(bid)
            part = self._partial.get(bid)
            if part is not None:  # handed out in part before: drop those records
                runs = _unclaimed(messages, start, pos_in, part)
                cut = (pos_in - start) - sum(b - a for a, b in runs)
                if cut:
                    trimmed[sp.block] = cut
                    stats.duplicate_records_dropped += cut
            else:
                runs = [(start, pos_in)]
            length = sum(b - a for a, b in runs)
            if not length:  # every record of it was handed out: a copy, audited as such
                stats.duplicate_blocks_dropped += 1
                dropped.add(sp.block)
                continue
            tracked.append(Tracked(bid, sp.block, pos_out, pos_out + length))
            pos_out += length
            kept.extend(runs)
        if dropped or trimmed:
            if isinstance(messages, Records):  # still columns: no Message is built
                messages = messages.select(kept)
            else:
                messages = list(chain.from_iterable(messages[a:b] for a, b in kept))
        return Admitted(messages, tracked, frozenset(dropped), trimmed)

    def claim(self, block: BlockId, records: Sequence[tuple[int, int]]) -> None:
        """Record runs [first, end) of ``block`` were handed out, not all of it yet: a
        copy of the block does not hand them out again."""
        runs = sorted([*self._partial.pop(block, ()), *records])
        merged: list[tuple[int, int]] = []
        for a, b in runs:
            if merged and a <= merged[-1][1]:
                if b > merged[-1][1]:
                    merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self._partial[block] = merged
        while len(self._partial) > max(self.window.producers, _PARTIAL_MIN):
            del self._partial[next(iter(self._partial))]

    def claimed(self, block: BlockId) -> list[tuple[int, int]] | None:
        return self._partial.get(block)

    def handed_out_elsewhere(self, block: BlockId) -> bool:
        """Whether all of ``block`` was handed out (by another object in progress)."""
        return self.window.verdict(block, self._now()) is Verdict.DUPLICATE

    def dropped(self, records: int, whole: bool) -> None:
        """Count records of a kept block dropped as handed out elsewhere meanwhile
        (``whole``: none of the block is handed out from this copy)."""
        self._stats.duplicate_records_dropped += records
        if whole:
            self._stats.duplicate_blocks_dropped += 1

    def handed_out(self, block: BlockId) -> None:
        self.window.remember(block, self._now())
        self._partial.pop(block, None)

    def clear(self) -> None:
        """Forget every block handed out (a seek asks to read again)."""
        self.window.clear()
        self._partial.clear()


#: Blocks handed out in part that are remembered at least (see Deduplicator._partial).
_PARTIAL_MIN = 1024


def _segments(messages: Sequence[Message], a: int, b: int) -> list[tuple[int, int, int]]:
    """``messages[a:b]`` (of one block) as (index, first record number, count) runs of
    consecutive record numbers: from the chunks of :class:`Records`, no Message built."""
    if isinstance(messages, Records):
        return messages.record_runs(a, b)
    out: list[tuple[int, int, int]] = []
    for i in range(a, b):  # (ready messages: tests, fakes)
        r = messages[i].record
        if out and out[-1][1] + out[-1][2] == r and out[-1][0] + out[-1][2] == i:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((i, r, 1))
    return out


def _unclaimed(
    messages: Sequence[Message], a: int, b: int, claimed: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The index runs of ``messages[a:b]`` (one block) whose record numbers are not in
    ``claimed`` (sorted, disjoint runs)."""
    runs: list[tuple[int, int]] = []
    for i, first, n in _segments(messages, a, b):
        lo, hi = first, first + n
        for ca, cb in claimed:
            if cb <= lo or ca >= hi:
                continue
            if ca > lo:
                runs.append((i + lo - first, i + ca - first))
            lo = max(lo, cb)
            if lo >= hi:
                break
        if lo < hi:
            runs.append((i + lo - first, i + hi - first))
    return runs


class Current:
    """The object whose records are being handed out, and how many were.

    ``messages`` is usually :class:`Records` (decoded columns): :meth:`take` builds the
    messages it returns, :meth:`take_chunks` none.
    """

    __slots__ = ("_dedup", "_left", "_next", "_tracked", "messages", "pending", "pos")

    def __init__(
        self,
        pending: Pending,
        messages: Sequence[Message],
        tracked: list[Tracked] | None = None,
        dedup: Deduplicator | None = None,
    ) -> None:
        self.pending = pending
        self.messages = messages
        self.pos = 0
        self._tracked = tracked or []
        self._next = 0  # first tracked block not yet fully handed out
        self._dedup = dedup
        #: Left midway (parked) at least once: other objects may have handed out records
        #: of its blocks since, so each run is checked (never needed before: while an
        #: object is current no other one hands anything out).
        self._left = False

    def _advance(self, n: int) -> list[tuple[int, int]]:
        """Hand out up to ``n`` more records: their index ranges (one, unless records in
        between were handed out meanwhile by another object in progress)."""
        pos = self.pos
        messages = self.messages
        total = len(messages)
        limit = pos + min(n, total - pos)
        dedup = self._dedup
        if dedup is None:
            self.pos = limit
            return [(pos, limit)]
        tracked = self._tracked
        if not self._left:  # (the common case)
            self.pos = limit
            while self._next < len(tracked) and tracked[self._next].end <= limit:
                dedup.handed_out(tracked[self._next].block)
                self._next += 1
            return [(pos, limit)]
        runs: list[tuple[int, int]] = []
        while pos < limit:
            if self._next >= len(tracked):  # (every record is in a kept block)
                kept, stop = [(pos, limit)], limit
            else:
                t = tracked[self._next]
                if dedup.handed_out_elsewhere(t.block):  # all of it, meanwhile
                    self._drop_records(t, t.end - pos, whole=pos == t.start)
                    limit = min(limit + (t.end - pos), total)
                    pos = t.end
                    self._next += 1
                    continue
                stop = min(limit, t.end)
                claimed = dedup.claimed(t.block)
                if claimed is None:  # (the common case: no other object took any of it)
                    kept = [(pos, stop)]
                else:
                    kept = _unclaimed(messages, pos, stop, claimed)
                    skipped = (stop - pos) - sum(b - a for a, b in kept)
                    if skipped:  # ([pos, stop) is done; more may come from after it)
                        self._drop_records(t, skipped, whole=False)
                        limit = min(limit + skipped, total)
                if stop == t.end:
                    dedup.handed_out(t.block)
                    self._next += 1
            for a, b in kept:
                if runs and runs[-1][1] == a:
                    runs[-1] = (runs[-1][0], b)
                else:
                    runs.append((a, b))
            pos = stop
        self.pos = pos
        return runs

    def _drop_records(self, t: Tracked, count: int, whole: bool) -> None:
        """``count`` records of kept block ``t`` were handed out elsewhere: count them,
        and audit the block as a dropped copy if none of it is handed out here."""
        assert self._dedup is not None
        p = self.pending
        for i, audit in enumerate(p.blocks):
            if audit.index == t.index:
                left = audit.records - count
                if whole or left <= 0:
                    p.copies.append(audit)
                    del p.blocks[i]
                    whole = True
                else:
                    p.blocks[i] = dataclasses.replace(audit, records=left)
                break
        self._dedup.dropped(count, whole)

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` more records."""
        runs = self._advance(n)
        messages = self.messages
        if len(runs) == 1 and runs[0][1] - runs[0][0] == 1:  # (iterating over the consumer)
            return [messages[runs[0][0]]]
        with gc_paused():  # (one tuple per record: no young-generation collections)
            if len(runs) == 1:
                pos, end = runs[0]
                out = messages[pos:end]
                return out if isinstance(out, list) else list(out)
            return [m for a, b in runs for m in messages[a:b]]

    def take_chunks(self, n: int) -> list[Chunk]:
        """Up to ``n`` more records, as column chunks (no per-record objects)."""
        messages = self.messages
        if not isinstance(messages, Records):  # (made of ready messages: tests, fakes)
            messages = self.messages = Records.of(messages)
        return [c for a, b in self._advance(n) for c in messages.between(a, b)]

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.messages)

    def left_midway(self) -> None:
        """This object stops being handed out midway: parked (its partition paused) or
        dropped (revoke, lost, seek). Claim the records of its block in progress handed
        out so far (while it was current no other object handed out anything, so
        claiming only now is enough): a copy of the block does not hand them out again."""
        if self._dedup is None or self._next >= len(self._tracked):
            return
        self._left = True
        t = self._tracked[self._next]
        if self.pos > t.start:
            runs = _segments(self.messages, t.start, self.pos)
            self._dedup.claim(t.block, [(r, r + n) for _, r, n in runs])

    def next_position(self) -> tuple[int, int] | None:
        """(block, record) of the next record to hand out; None when exhausted."""
        if self.pos >= len(self.messages):
            return None
        m = self.messages[self.pos]
        return m.block, m.record
