"""Key lanes: which writer a keyed record goes to, and the order a lane's blocks are sent.

A record with a key belongs to the *lane* of its topic's writer chosen from the key:
``sorted(writers)[crc32(key) % len(writers)]`` (a stable hash, the same in every
process and run; never Python's salted ``hash()``). The mapping changes only when the
topic's writer set does. A lane's blocks are sent one at a time, in the order the
producer opened them (:class:`LaneOrder`), so a retry never lets a later block of the
lane overtake an earlier one (docs/guarantees.md, "Keyed ordering").
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Hashable, Sequence

__all__ = ["LaneOrder", "lane_of"]


def lane_of(key: bytes, writers: Sequence[str]) -> str:
    """The writer (of ``writers``, sorted) whose lane holds records with ``key``."""
    return writers[zlib.crc32(key) % len(writers)]


class LaneOrder:
    """Turns of each lane's blocks (numbered 0, 1, ... as the producer opens them).

    A block waits in :meth:`turn` until every earlier block of its lane is
    :meth:`done` (acknowledged, failed, or never sent because it stayed empty). Use on
    one event loop.
    """

    def __init__(self) -> None:
        self._next: dict[Hashable, int] = {}
        self._finished: dict[Hashable, set[int]] = {}
        self._waiters: dict[tuple[Hashable, int], asyncio.Future[None]] = {}

    def busy_before(self, lane: Hashable, seq: int) -> bool:
        """Whether an earlier block of ``lane`` than ``seq`` is not done yet."""
        return self._next.get(lane, 0) < seq

    async def turn(self, lane: Hashable, seq: int) -> None:
        """Return once blocks ``0 .. seq - 1`` of ``lane`` are done."""
        if self._next.get(lane, 0) >= seq:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[(lane, seq)] = fut
        try:
            await fut
        finally:
            self._waiters.pop((lane, seq), None)

    def done(self, lane: Hashable, seq: int) -> None:
        """Block ``seq`` of ``lane`` is finished: the next one may go."""
        n = self._next.get(lane, 0)
        if seq < n:
            return
        finished = self._finished.setdefault(lane, set())
        finished.add(seq)
        while n in finished:
            finished.discard(n)
            n += 1
        self._next[lane] = n
        if not finished:
            del self._finished[lane]
        for (wlane, wseq), waiter in list(self._waiters.items()):
            if wlane == lane and wseq <= n and not waiter.done():  # its turn has come
                waiter.set_result(None)
