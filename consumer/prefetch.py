"""The prefetch queue: objects fetched ahead of the application, in notification order.

Polled notifications are submitted to a fetch pool as :class:`Pending` entries, bounded
by ``prefetch.objects`` and ``prefetch.bytes`` (when full, the group is still served but
nothing more is buffered). The head of the queue is taken when its fetch finishes and
becomes the :class:`Current` object whose records are handed out. A failed fetch stays
at the head and is fetched again, unless ``corrupt.object.policy=skip`` skips it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from memq.consumer.config import ConsumerConfig
from memq.consumer.fetcher import BlockAudit, FetchedObject, Start, fetch_object
from memq.consumer.message import Message
from memq.consumer.notifications import Polled
from memq.errors import CorruptObjectError, MemqError, ObjectNotFoundError
from memq.formats.notification import Notification
from memq.storage_handlers.base import StorageReader

__all__ = ["ConsumerStats", "Current", "Feed", "Pending", "Prefetcher"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)


class Feed(Protocol):
    """Where notifications come from (a ``NotificationSource``)."""

    def poll(self, max_records: int, timeout: float) -> list[Polled]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass
class ConsumerStats:
    """A consumer's counters (``Consumer.stats``)."""

    records: int = 0
    objects: int = 0
    bytes: int = 0
    skipped_missing: int = 0
    skipped_corrupt: int = 0
    fetch_seconds: float = 0.0
    record_counts: deque[int] = field(default_factory=lambda: deque(maxlen=100))


@dataclass(eq=False)
class Pending:
    """An object in the queue: its notification and its (running or finished) fetch."""

    tp: TP
    offset: int
    notification: Notification
    start: Start | None
    future: Future[FetchedObject]
    blocks: list[BlockAudit] = field(default_factory=list)  # set once it is current


class Current:
    """The object whose records are being handed out, and how many were."""

    __slots__ = ("messages", "pending", "pos")

    def __init__(self, pending: Pending, messages: list[Message]) -> None:
        self.pending = pending
        self.messages = messages
        self.pos = 0

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` more records."""
        pos = self.pos
        take = min(n, len(self.messages) - pos)
        self.pos = pos + take
        return self.messages[pos : pos + take]

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.messages)


class Prefetcher:
    """The fetch pool, the queue of objects fetched ahead, and the current object.

    ``reader(notification_topic)`` is the storage to fetch from, ``start(tp, offset)``
    where to start inside an object (after a seek), ``on_skip`` is told of each object
    skipped by the policy.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        reader: Callable[[str], StorageReader],
        start: Callable[[TP, int], Start | None],
        on_skip: Callable[[Notification, MemqError], None],
        stats: ConsumerStats,
        audit: bool,
    ) -> None:
        self._config = config
        self._reader = reader
        self._start = start
        self._on_skip = on_skip
        self._stats = stats
        self._audit = audit
        self._pool = ThreadPoolExecutor(config.fetch_concurrency, thread_name_prefix="memq-fetch")
        self.queue: deque[Pending] = deque()
        self._queued_bytes = 0
        self.current: Current | None = None

    def _fetch(
        self, tp: TP, offset: int, note: Notification, start: Start | None
    ) -> Future[FetchedObject]:
        return self._pool.submit(
            fetch_object, self._reader(tp[0]), note, tp[1], offset, start, audit=self._audit
        )

    def submit(self, polled: Polled) -> None:
        """Start fetching the object of ``polled`` and queue it."""
        tp = (polled.topic, polled.partition)
        note = polled.notification
        assert note is not None
        start = self._start(tp, polled.offset)
        fut = self._fetch(tp, polled.offset, note, start)
        self.queue.append(Pending(tp, polled.offset, note, start, fut))
        self._queued_bytes += note.size

    def room(self) -> bool:
        """Whether another object may be fetched ahead."""
        return (
            len(self.queue) < self._config.prefetch_objects
            and self._queued_bytes < self._config.prefetch_bytes
        )

    def fill(self, feed: Feed, timeout: float) -> None:
        """Poll notifications (serving rebalances); prefetch as many objects as allowed."""
        if not self.room():
            feed.pause()  # keep serving the group without buffering more
            feed.poll(1, 0)
            return
        feed.resume()
        for polled in feed.poll(self._config.prefetch_objects - len(self.queue), timeout):
            if polled.notification is None:
                self.skip_or_raise(polled, polled.error or CorruptObjectError("bad notification"))
                continue
            self.submit(polled)

    def head_ready(self) -> bool:
        """Whether the head object's fetch has finished (well or not)."""
        return bool(self.queue) and self.queue[0].future.done()

    def _pop(self) -> Pending:
        head = self.queue.popleft()
        self._queued_bytes -= head.notification.size
        return head

    def take(self, timeout: float | None) -> Pending | None:
        """Wait up to ``timeout`` seconds for the head's fetch; then dequeue and return it.

        If it has records to hand out, it becomes :attr:`current`; if not (skipped by the
        policy, or nothing at or after its start) it is returned without becoming current
        and is done. None: the fetch did not finish in time. A failure the policy does not
        skip is raised, and the object stays at the head, fetched again.
        """
        head = self.queue[0]
        try:
            fetched = head.future.result(timeout=timeout)
        except TimeoutError:
            return None
        except MemqError as e:
            if isinstance(e, ObjectNotFoundError | CorruptObjectError) and (
                self._config.corrupt_object_policy == "skip"
            ):
                self._pop()
                self.skip_or_raise(head, e)
                return head
            # Leave it at the head for the next poll (a transient failure is re-fetched).
            head.future = self._fetch(head.tp, head.offset, head.notification, head.start)
            raise
        self._pop()
        self._stats.bytes += fetched.bytes_read
        self._stats.fetch_seconds += fetched.seconds
        if fetched.messages:  # else: everything before a seek position or time floor
            self.current = Current(head, fetched.messages)
            head.blocks = fetched.blocks
        return head

    def skip_or_raise(self, polled: Polled | Pending, err: MemqError) -> None:
        """Apply ``corrupt.object.policy`` to a bad notification or object: raise, or skip it."""
        note = polled.notification
        where = f"{polled.tp if isinstance(polled, Pending) else (polled.topic, polled.partition)}"
        if self._config.corrupt_object_policy == "fail":
            raise err
        kind = "missing" if isinstance(err, ObjectNotFoundError) else "corrupt"
        if kind == "missing":
            self._stats.skipped_missing += 1
        else:
            self._stats.skipped_corrupt += 1
        log.warning("skipping %s object at %s offset %d: %s", kind, where, polled.offset, err)
        if note is not None:
            self._on_skip(note, err)

    def drop(self, parts: set[TP]) -> None:
        """Forget queued and in-progress objects of ``parts`` (after revoke or seek)."""
        keep: deque[Pending] = deque()
        for p in self.queue:
            if p.tp in parts:
                p.future.cancel()
                self._queued_bytes -= p.notification.size
            else:
                keep.append(p)
        self.queue = keep
        if self.current is not None and self.current.pending.tp in parts:
            self.current = None

    def close(self) -> None:
        """Cancel the fetches and stop the pool (without waiting for running GETs)."""
        for p in self.queue:
            p.future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
