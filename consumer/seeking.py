"""Where a consumer continues from: seeks, resets on assignment, and offset-for-time search.

A seek moves a partition's progress to a notification offset, optionally with a
:class:`~memq.consumer.fetcher.Start` inside that object (a record position or a time
floor), and moves the Kafka consumer there. Kafka refuses a seek right after an
assignment, so seeks are kept pending and retried before every poll. A seek of every
partition asked for before the group has assigned any is a *reset rule*, applied to the
partitions of the next assignment.

:func:`first_offset_at` is the one search of an offset by time (``Consumer.seek_to_time``,
``Consumer.offsets_for_times``, ``memq group reset-offsets --to-datetime``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from memq.consumer.fetcher import Start
from memq.consumer.notifications import OFFSET_END
from memq.errors import MemqError
from memq.formats.notification import Notification

__all__ = ["Probe", "ResetRule", "SeekSource", "Seeker", "first_offset_at"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
#: Where a partition starts: notification offset and the position inside that object.
ResetRule = Callable[[TP], tuple[int, Start | None]]


class SeekSource(Protocol):
    """What seeking needs of the group member (a ``NotificationSource``)."""

    def assignment(self) -> list[TP]: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...


class Probe(Protocol):
    """What seeking needs of the group-less reader (a ``NotificationProbe``)."""

    def read(self, topic: str, partition: int, offset: int) -> Notification | None: ...

    def scan(
        self, topic: str, partition: int, start: int, stop: int
    ) -> Iterator[tuple[int, Notification]]:
        """The notifications of offsets ``start .. stop - 1``, in order (read in bulk)."""
        ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]: ...

    def offsets_for_time(self, topic: str, partition: int, ts: int, timeout: float) -> int | None:
        """Kafka's ``offsets_for_times``: the first offset whose Kafka timestamp is at or
        after ``ts``; ``OFFSET_END`` (-1) when none is; None when Kafka did not answer."""
        ...

    def close(self) -> None: ...


class Seeker:
    """Seeks, pending seeks, start positions inside objects, and reset rules.

    ``restart(tp, offset, start)`` records a partition's new progress, ``drop(parts)`` forgets
    the objects fetched ahead for ``parts``, ``name(notification_topic)`` is the MemQ
    topic (for messages). ``source`` and ``probe`` are attached at subscribe().
    """

    def __init__(
        self,
        *,
        restart: Callable[[TP, int, Start | None], None],
        drop: Callable[[set[TP]], None],
        name: Callable[[str], str],
        beginning: Callable[[TP], int] | None = None,
    ) -> None:
        self._restart = restart
        self._drop = drop
        self._name = name
        #: Where "the beginning" of a partition is (default: its low watermark).
        self._beginning = beginning
        self.source: SeekSource | None = None
        self.probe: Probe | None = None
        self._starts: dict[tuple[TP, int], Start] = {}  # where to start inside an object
        self._pending: dict[TP, int] = {}  # seeks Kafka has not taken yet
        #: A start rule (seek_* before assignment) applied when partitions get assigned.
        self._reset: ResetRule | None = None

    def attach(self, source: SeekSource, probe: Probe) -> None:
        self.source, self.probe = source, probe

    def take_start(self, tp: TP, offset: int) -> Start | None:
        """Where to start inside the object at ``offset`` of ``tp`` (asked once, when fetched)."""
        return self._starts.pop((tp, offset), None)

    def start_at(self, tp: TP, offset: int, start: Start | None) -> None:
        """``tp`` (being assigned) starts at ``offset``, inside that object at ``start``."""
        self._restart(tp, offset, start)
        if start is not None:
            self._starts[(tp, offset)] = start

    def seek(self, tp: TP, offset: int, start: Start | None) -> None:
        """Continue assigned partition ``tp`` from ``offset`` (inside it from ``start``)."""
        if self.source is None or tp not in self.source.assignment():
            raise MemqError(
                f"partition {tp[1]} of {self._name(tp[0])!r} is not assigned to this consumer "
                "(a group assigns partitions after subscribe(): seek in on_assign, or "
                "assign() the partition with the message id as its start)"
            )
        self._drop({tp})
        self.start_at(tp, offset, start)
        self._pending[tp] = offset
        self.apply_pending()

    def apply_pending(self) -> None:
        """Hand pending seeks to Kafka; those it refuses yet are retried next time."""
        assert self.source is not None
        for tp, offset in list(self._pending.items()):
            try:
                self.source.seek(tp[0], tp[1], offset)
            except Exception as e:  # not fetching yet right after assignment: retry next poll
                log.debug("seek %s to %d deferred: %s", tp, offset, e)
                continue
            del self._pending[tp]

    def is_pending(self, tp: TP) -> bool:
        """Whether ``tp`` has a seek Kafka has not taken yet (what it returns for ``tp``
        comes from the old position)."""
        return tp in self._pending

    def revoked(self, parts: set[TP]) -> None:
        """``parts`` left this member: their pending seeks and start positions are void.

        (A start position kept for an object of a lost partition would otherwise skip
        records of it when the partition comes back and the object is read from the
        committed offset.)
        """
        for tp in parts:
            self._pending.pop(tp, None)
        for key in [k for k in self._starts if k[0] in parts]:
            del self._starts[key]

    def assigned(self, parts: list[TP]) -> dict[TP, int] | None:
        """Apply the reset rule (if one waits) to newly assigned ``parts``.

        Returns the offsets to start them from, or None to start from the committed ones.
        """
        if self._reset is None:
            return None
        offsets: dict[TP, int] = {}
        for tp in parts:
            offset, start = self._reset(tp)
            offsets[tp] = offset
            self.start_at(tp, offset, start)
        self._reset = None
        return offsets

    def reset_all(self, rule: ResetRule) -> None:
        """Apply ``rule`` to every assigned partition now, or on the next assignment
        (right after subscribe(), before the group has assigned anything)."""
        if self.source is None:
            raise MemqError("subscribe() to a topic, or assign() partitions, before seeking")
        assigned = self.source.assignment()
        if not assigned:
            self._reset = rule
            return
        for tp in assigned:
            self.seek(tp, *rule(tp))

    def to_beginning(self) -> None:
        assert self.probe is not None
        probe = self.probe
        where = self._beginning or (lambda tp: probe.watermarks(*tp)[0])
        self.reset_all(lambda tp: (where(tp), None))

    def to_end(self) -> None:
        assert self.probe is not None
        probe = self.probe
        self.reset_all(lambda tp: (probe.watermarks(*tp)[1], None))

    def to_time(self, timestamp_ms: int) -> None:
        self.reset_all(
            lambda tp: (self.offset_for_time(tp, timestamp_ms), Start(min_timestamp=timestamp_ms))
        )

    def offset_for_time(self, tp: TP, ts: int) -> int:
        """The first offset of ``tp`` whose object reaches ``ts`` (its max timestamp >= ts)."""
        assert self.probe is not None
        return first_offset_at(self.probe, tp[0], tp[1], ts)


#: Notifications read forward from Kafka's answer, at most, for the first object that
#: reaches the time; past them the rest of the partition is bisected (a backfill: records
#: stamped long before their objects were stored).
STEP_WINDOW = 1000
#: How far (ms) a record's timestamp may run ahead of its object's notification (a
#: producer's clock ahead of the brokers') and still be found from Kafka's answer.
CLOCK_SKEW_MS = 60_000
#: Notifications read back from an answer, per step, for an earlier object that reaches
#: the time (timestamps need not grow with offsets); the steps go on while they find one.
DISORDER_WINDOW = 1000


def first_offset_at(
    probe: Probe,
    topic: str,
    partition: int,
    ts: int,
    *,
    skew_ms: int = CLOCK_SKEW_MS,
    steps: int = STEP_WINDOW,
    window: int = DISORDER_WINDOW,
) -> int:
    """The first offset of the partition whose object reaches ``ts`` (its max record
    timestamp >= ts); the end offset when none does.

    Kafka indexes notifications by their Kafka timestamp, the time the broker published
    them (after the upload), while a seek is by record timestamps (set by producers).
    Kafka's answer K (``offsets_for_times``: the first notification published at or after
    ts) is where the search starts, and two kinds of objects are looked for around it:

    - at and after K, objects published after ts that hold only older records (in
      flight at ts; records stamped long before they were stored): the notifications
      from K on are read, in bulk, up to the first object reaching ts; past ``steps`` of
      them, the rest of the partition is bisected by max timestamp;
    - before K, objects published before ts that reach it (a producer's clock ahead of
      the broker's): the notifications published from ``ts - skew_ms`` to K (Kafka's
      answer for that time) are read, at most ``window`` of them, and on back while
      one is found.

    The answer is exact when no record is stamped more than ``skew_ms`` after its
    object was published, at most ``steps`` objects published at or after ts end before
    it, and at most ``window`` notifications were published in the ``skew_ms`` before
    ts. Otherwise it may be later, never earlier: it is the end or an object reaching ts.

    A Kafka that does not answer, or answers outside the partition's offsets, gets the
    fallback: a bisection of the whole partition by max timestamp, then the same look
    back (``window`` at a time) from its answer.
    """
    answer = probe.offsets_for_time(topic, partition, ts, timeout=10)
    low, high = probe.watermarks(topic, partition)  # read after it: the answer lies within
    hint = _checked(answer, topic, partition, ts, low, high)
    if hint is None:
        return _bisect(probe, topic, partition, ts, low, high, window)
    at = _step_forward(probe, topic, partition, ts, hint, high, steps, window)
    if hint == low:
        return at
    back = max(0, ts - skew_ms)
    since = _checked(
        probe.offsets_for_time(topic, partition, back, timeout=10), topic, partition, back,
        low, hint,
    )  # fmt: skip
    earlier = _earlier_reaching(
        probe, topic, partition, ts, low if since is None else since, hint, window
    )
    return earlier if earlier < hint else at


def _checked(
    answer: int | None, topic: str, partition: int, ts: int, low: int, high: int
) -> int | None:
    """Kafka's ``answer`` for ``ts`` as an offset (``high`` when none is that recent); None
    when Kafka did not answer or answered outside ``low .. high``."""
    if answer == OFFSET_END:
        return high
    if answer is None or not low <= answer <= high:
        log.info(
            "offsets_for_times(%s[%d], %d) answered %s, outside %d..%d: searching the "
            "notifications instead", topic, partition, ts, answer, low, high,
        )  # fmt: skip
        return None
    return answer


def _step_forward(
    probe: Probe, topic: str, partition: int, ts: int, start: int, high: int, steps: int,
    window: int,
) -> int:  # fmt: skip
    """The first offset from ``start`` whose object reaches ``ts``: ``steps`` notifications
    read in bulk, then the rest bisected."""
    stop = min(high, start + steps)
    found = next(
        (off for off, n in probe.scan(topic, partition, start, stop) if n.max_timestamp >= ts),
        None,
    )
    if found is not None:
        return found
    if stop >= high:
        return high
    return _bisect(probe, topic, partition, ts, stop, high, window)


def _bisect(
    probe: Probe, topic: str, partition: int, ts: int, low: int, high: int, window: int
) -> int:
    """Bisect ``low .. high`` by max timestamp (as if they grew with offsets), then look
    back from the answer for earlier objects reaching ``ts``."""
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        note = probe.read(topic, partition, mid)
        if note is not None and note.max_timestamp < ts:
            lo = mid + 1
        else:
            hi = mid
    return _earlier_reaching(probe, topic, partition, ts, low, lo, window)


def _earlier_reaching(
    probe: Probe, topic: str, partition: int, ts: int, low: int, at: int, window: int
) -> int:
    """The first offset from ``low`` to ``at`` whose object reaches ``ts``, looking back
    ``window`` notifications at a time and on while a step finds one; ``at`` if none."""
    while at > low:
        start = max(low, at - window)
        found = next(
            (off for off, n in probe.scan(topic, partition, start, at) if n.max_timestamp >= ts),
            None,
        )
        if found is None:
            return at
        at = found
    return at
