"""Handing records out: objects made current in queue order, their records taken in order.

:class:`Delivery` drives the :class:`~memq.consumer.prefetch.Prefetcher` for the
consumer's ``poll``/``consume``/``consume_batch``: it polls notifications (serving
rebalances, after any pending seek) when nothing is queued, waits for the head's fetch,
takes records from the current object, and reports each object done (fully handed out,
skipped, or with nothing at or after its start) to ``object_done``, which makes it
committable, counts and audits it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memq.consumer.handout import Current
from memq.consumer.notifications import GroupMember
from memq.consumer.pending import Pending
from memq.consumer.prefetch import Prefetcher
from memq.consumer.seeking import Seeker
from memq.errors import MemqError

__all__ = ["Delivery", "remaining"]

TP = tuple[str, int]  # (notification topic, partition)


def remaining(deadline: float | None, cap: float | None) -> float | None:
    """Seconds left until ``deadline`` (None: no deadline), at most ``cap`` (None: no cap)."""
    if deadline is None:
        return cap
    left = max(0.0, deadline - time.monotonic())
    return left if cap is None else min(left, cap)


class Delivery:
    """Hands out the records of ``prefetch``'s objects, in order.

    ``source()`` is the notification source (the group member; set once subscribed or
    assigned), ``seeker`` applies pending seeks before each poll, ``object_done(pending)``
    is told of each object done.
    """

    def __init__(
        self,
        prefetch: Prefetcher,
        seeker: Seeker,
        source: Callable[[], GroupMember | None],
        object_done: Callable[[Pending], None],
    ) -> None:
        self._prefetch = prefetch
        self._seeker = seeker
        self._source = source
        self._object_done = object_done

    def partial(self) -> dict[TP, tuple[int, int, int]]:
        """Per partition with an object in progress: its offset and next record's position."""
        out: dict[TP, tuple[int, int, int]] = {}
        for cur in self._prefetch.in_progress():
            nxt = cur.next_position()
            if nxt is not None:
                out[cur.pending.tp] = (cur.pending.offset, *nxt)
        return out

    def in_progress(self) -> dict[TP, int]:
        """Per partition with an object in progress: its notification offset."""
        return {c.pending.tp: c.pending.offset for c in self._prefetch.in_progress()}

    def pull(self, timeout: float) -> None:
        """Poll notifications (serving rebalances); prefetch as many objects as allowed."""
        source = self._source()
        assert source is not None
        self._seeker.apply_pending()
        self._prefetch.fill(source, timeout, stale=self._seeker.is_pending)

    def next_object(self, deadline: float | None) -> bool:
        """Make the next object current; False if none became ready before ``deadline``."""
        assert self._source() is not None
        prefetch = self._prefetch
        while True:
            if prefetch.unpark():  # an object of a partition paused midway, resumed
                return True
            self.pull(0.0 if prefetch.has_head() else (remaining(deadline, cap=0.5) or 0.0))
            if not prefetch.has_head():
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            head = prefetch.take(remaining(deadline, cap=None))
            if head is None:
                return False
            if prefetch.current is None:  # skipped, or nothing at or after its start
                self._object_done(head)
                continue
            return True

    def hand_out(
        self, limit: int, timeout: float | None, take: Callable[[Current, int], int]
    ) -> int:
        """Hand out up to ``limit`` records with ``take(current object, at most n)``
        (returns how many it took), waiting at most ``timeout`` seconds for the first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        got = 0
        while got < limit:
            cur = self._prefetch.current
            if cur is not None:
                got += take(cur, limit - got)
                if cur.exhausted:
                    self._object_done(cur.pending)
                    self._prefetch.current = None
                continue
            ready = self._prefetch.head_ready()
            if got and not ready:
                break
            try:
                if not self.next_object(deadline if not got else time.monotonic()):
                    break
            except MemqError:
                if not got:
                    raise
                # Records already taken from earlier objects are handed out now (their
                # objects are done and may be committed); the failed object stays at the
                # head, is re-fetched, and its error (if it persists) comes next call.
                break
        return got
