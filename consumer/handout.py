"""Handing an object's records to the application: the current object, and dropping copies.

A fetched object becomes :class:`Current`; its records are taken in order. With dedup on
(``dedup.enable``), a :class:`Deduplicator` first drops the object's blocks that were
already handed out (whole blocks: a block is the unit of retry), and a block is
remembered only once its last record was taken: a block left midway (a seek, close)
is handed out again, whole, when it comes again (at-least-once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Protocol

from memq.consumer.config import ConsumerConfig
from memq.consumer.dedup import BlockId, DedupWindow, Verdict
from memq.consumer.fetcher import BlockSpan
from memq.consumer.message import Message

if TYPE_CHECKING:
    from memq.consumer.prefetch import Pending

__all__ = ["Admitted", "Current", "DedupStats", "Deduplicator", "Tracked"]


class DedupStats(Protocol):
    """The counters dedup updates (``ConsumerStats``)."""

    duplicate_blocks_dropped: int
    duplicate_records_dropped: int
    dedup_out_of_window: int


@dataclass(frozen=True, slots=True)
class Tracked:
    """A kept block of the current object: its messages are ``messages[start:end]``."""

    block: BlockId
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Admitted:
    messages: list[Message]
    tracked: list[Tracked]
    #: Indexes of the object's blocks dropped as copies (not handed out, not audited).
    dropped: frozenset[int]


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

    def admit(self, topic: str, messages: list[Message], spans: Sequence[BlockSpan]) -> Admitted:
        """The messages of a fetched object (blocks ``spans``) minus what was handed out."""
        now = self._now()
        stats = self._stats
        kept: list[tuple[int, int]] = []  # [start, end) in ``messages``
        tracked: list[Tracked] = []
        dropped: set[int] = set()
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
            tracked.append(Tracked(bid, pos_out, pos_out + sp.length))
            pos_out += sp.length
            kept.append((start, pos_in))
        if dropped:
            messages = list(chain.from_iterable(messages[a:b] for a, b in kept))
        return Admitted(messages, tracked, frozenset(dropped))

    def handed_out(self, block: BlockId) -> None:
        self.window.remember(block, self._now())

    def clear(self) -> None:
        """Forget every block handed out (a seek asks to read again)."""
        self.window.clear()


class Current:
    """The object whose records are being handed out, and how many were."""

    __slots__ = ("_dedup", "_next", "_tracked", "messages", "pending", "pos")

    def __init__(
        self,
        pending: Pending,
        messages: list[Message],
        tracked: list[Tracked] | None = None,
        dedup: Deduplicator | None = None,
    ) -> None:
        self.pending = pending
        self.messages = messages
        self.pos = 0
        self._tracked = tracked or []
        self._next = 0  # first tracked block not yet fully handed out
        self._dedup = dedup

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` more records."""
        pos = self.pos
        take = min(n, len(self.messages) - pos)
        self.pos = pos + take
        if self._dedup is not None:
            tracked = self._tracked
            while self._next < len(tracked) and tracked[self._next].end <= self.pos:
                self._dedup.handed_out(tracked[self._next].block)
                self._next += 1
        return self.messages[pos : pos + take]

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.messages)
