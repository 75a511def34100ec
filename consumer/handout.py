"""Handing an object's records to the application: the current object, and dropping copies.

A fetched object becomes :class:`Current`; its records are taken in order. With dedup on
(``dedup.enable``), a :class:`Deduplicator` first drops the object's blocks that were
already handed out (whole blocks: a block is the unit of retry), and a block is
remembered only once its last record was taken. Two objects can be in progress at once
(one of a paused partition, parked midway, and one of another partition) and hold copies
of the same block: the first to hand it out wins, and the other drops its copy, whole,
when it gets to it. A block left midway because its
partition was revoked or lost (possible while the partition is paused with an object in
progress) is remembered as such: when it comes again, the records already handed out
are dropped. One left midway by a seek or close() is handed out again, whole, when it
comes again (at-least-once; a seek asks to read again).
"""

from __future__ import annotations

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
        #: Blocks left midway: the records [first, end) handed out (bounded: oldest go).
        self._partial: dict[BlockId, tuple[int, int]] = {}

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
            if part is not None:  # left midway before: drop what was handed out then
                first, end = part
                runs = _without(messages, start, pos_in, first, end)
                cut = (pos_in - start) - sum(b - a for a, b in runs)
                if cut:
                    trimmed[sp.block] = cut
                    stats.duplicate_records_dropped += cut
            else:
                runs = [(start, pos_in)]
            length = sum(b - a for a, b in runs)
            if not length:  # (every record of it was handed out)
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

    def left_midway(self, block: BlockId, first: int, end: int) -> None:
        """Records [first, end) of ``block`` were handed out and the rest was dropped
        (revoke, lost): when the block comes again, those records are dropped."""
        before = self._partial.pop(block, None)
        if before is not None and before[1] >= first and before[0] <= first:
            first = before[0]  # the same block left midway again, further on
        self._partial[block] = (first, end)
        while len(self._partial) > self.window.producers:
            del self._partial[next(iter(self._partial))]

    def taken_meanwhile(self, t: Tracked) -> bool:
        """Whether ``t``, kept when its object was fetched, was handed out since by
        another object in progress (then it is dropped here, and counted)."""
        if self.window.verdict(t.block, self._now()) is not Verdict.DUPLICATE:
            return False
        self._stats.duplicate_blocks_dropped += 1
        self._stats.duplicate_records_dropped += t.end - t.start
        return True

    def handed_out(self, block: BlockId) -> None:
        self.window.remember(block, self._now())
        self._partial.pop(block, None)

    def clear(self) -> None:
        """Forget every block handed out (a seek asks to read again)."""
        self.window.clear()
        self._partial.clear()


def _without(
    messages: Sequence[Message], start: int, end: int, first: int, stop: int
) -> list[tuple[int, int]]:
    """Runs of ``messages[start:end]`` (one block) whose record is not in [first, stop)."""
    runs: list[tuple[int, int]] = []
    a = None
    for i in range(start, end):
        keep = not first <= messages[i].record < stop
        if keep and a is None:
            a = i
        elif not keep and a is not None:
            runs.append((a, i))
            a = None
    if a is not None:
        runs.append((a, end))
    return runs


class Current:
    """The object whose records are being handed out, and how many were.

    ``messages`` is usually :class:`Records` (decoded columns): :meth:`take` builds the
    messages it returns, :meth:`take_chunks` none.
    """

    __slots__ = ("_dedup", "_next", "_tracked", "messages", "pending", "pos")

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

    def _advance(self, n: int) -> list[tuple[int, int]]:
        """Hand out up to ``n`` more records: their index ranges (one, unless a block in
        between was handed out meanwhile by another object in progress)."""
        pos = self.pos
        total = len(self.messages)
        limit = pos + min(n, total - pos)
        dedup = self._dedup
        if dedup is None:
            self.pos = limit
            return [(pos, limit)]
        runs: list[tuple[int, int]] = []
        tracked = self._tracked
        while pos < limit:
            if self._next >= len(tracked):  # (every record is in a kept block)
                stop = limit
            else:
                t = tracked[self._next]
                if pos == t.start and dedup.taken_meanwhile(t):
                    self._drop_copy(t)
                    self._next += 1
                    pos = t.end
                    limit = min(limit + (t.end - t.start), total)
                    continue
                stop = min(limit, t.end)
                if stop == t.end:
                    dedup.handed_out(t.block)
                    self._next += 1
            if runs and runs[-1][1] == pos:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((pos, stop))
            pos = stop
        self.pos = pos
        return runs

    def _drop_copy(self, t: Tracked) -> None:
        """Audit block ``t`` as a dropped copy, not as consumed."""
        p = self.pending
        for i, b in enumerate(p.blocks):
            if b.index == t.index:
                p.copies.append(b)
                del p.blocks[i]
                return

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` more records."""
        runs = self._advance(n)
        messages = self.messages
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
        """This object is dropped (revoke, lost): tell dedup of its block handed out in
        part, if any."""
        if self._dedup is None or self._next >= len(self._tracked):
            return
        t = self._tracked[self._next]
        if self.pos > t.start:
            first = self.messages[t.start].record
            self._dedup.left_midway(t.block, first, self.messages[self.pos - 1].record + 1)

    def next_position(self) -> tuple[int, int] | None:
        """(block, record) of the next record to hand out; None when exhausted."""
        if self.pos >= len(self.messages):
            return None
        m = self.messages[self.pos]
        return m.block, m.record
