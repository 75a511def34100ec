"""The prefetch queue: objects fetched ahead of the application, in notification order.

Polled notifications are submitted to a fetch pool as :class:`Pending` entries, bounded
by ``prefetch.objects`` and ``prefetch.bytes``. When the queue is full the group is
still served (every assigned partition paused, polled for rebalances) and whatever a
poll returns anyway waits in a backlog: a polled notification is never dropped (Kafka's
position is past it already). The head of the queue is taken when its fetch finishes
and becomes the :class:`~memq.consumer.handout.Current` object whose records are handed
out. A fetch failing with a retriable error is retried (full-jitter backoff) for
``fetch.retry.timeout.ms``; a failure that is then still there, or is not retriable,
stays at the head and is raised, unless ``corrupt.object.policy=skip`` skips it. So
does a notification that does not decode (it is raised again, in its place, until a
seek moves past it or the skip policy skips it). An object deleted past its topic's
retention (expired: :mod:`memq.consumer.expiry`) follows ``missing.object.policy``
instead (skipped by default).

Partitions the application paused hand out nothing: the head is the first queued object
of a partition that is not paused, an object in progress of a paused partition is
*parked* and resumed first when its partition is, and objects queued for paused
partitions are kept and do not count against ``prefetch.objects``/``prefetch.bytes``
(their partitions are paused in Kafka too, so no more come).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

from memq.consumer.config import ConsumerConfig
from memq.consumer.expiry import expired_error, is_expired
from memq.consumer.fetcher import FetchedObject, Start, fetch_object
from memq.consumer.handout import Current, Deduplicator
from memq.consumer.message import Message
from memq.consumer.notifications import Polled
from memq.consumer.pending import Pending
from memq.consumer.stats import ConsumerStats
from memq.errors import (
    CorruptObjectError,
    MemqError,
    MemqFormatError,
    ObjectNotFoundError,
    StorageError,
)
from memq.formats.notification import Notification
from memq.retry import RetryPolicy
from memq.storage_handlers.base import StorageReader
from memq.storage_handlers.receive import ReceiveBuffers

__all__ = ["ConsumerStats", "Current", "Feed", "Pending", "Prefetcher"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)


class Feed(Protocol):
    """Where notifications come from (a ``NotificationSource``)."""

    def poll(self, max_records: int, timeout: float) -> list[Polled]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Prefetcher:
    """The fetch pool, the queue of objects fetched ahead, and the current object.

    ``reader(notification_topic)`` is the storage to fetch from, ``retention(...)`` its
    topic's retention.ms, ``start(tp, offset)`` where to start inside an object (after a
    seek), ``on_skip`` is told of each object skipped by a policy, ``dedup`` (if any)
    drops blocks already handed out, ``clock`` is the wall clock (expiry).
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
        dedup: Deduplicator | None = None,
        retention: Callable[[str], int | None] = lambda _t: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._reader = reader
        self._retention = retention
        self._clock = clock
        self._start = start
        self._on_skip = on_skip
        self._stats = stats
        self._audit = audit
        self._dedup = dedup
        self._retry = RetryPolicy(
            attempts=1 << 30,  # bounded by the deadline
            base=config.retry_backoff_ms / 1000,
            cap=config.retry_backoff_max_ms / 1000,
            deadline=config.fetch_retry_timeout_ms / 1000,
        )
        self._pool = ThreadPoolExecutor(config.fetch_concurrency, thread_name_prefix="memq-fetch")
        #: Whole objects are received into these (reused once nothing refers to them).
        self._buffers = ReceiveBuffers(config.prefetch_bytes)
        self._closing = threading.Event()
        self._lock = threading.Lock()  # the in-flight set and counters fetch threads update
        self._inflight: set[Future[FetchedObject]] = set()
        self.queue: deque[Pending] = deque()
        #: Polled while the queue was full: submitted, in order, before anything polled later.
        self.backlog: deque[Polled] = deque()
        self._queued_bytes = 0
        #: Decode block format 2 values as views of the fetched bytes (made into ``bytes``
        #: when asked for, on the caller's thread) instead of ``bytes`` in the fetch
        #: threads: cleared by ``consume()`` (every value becomes a message's ``bytes``
        #: anyway), set again by ``consume_batch()`` (Arrow can take the views).
        self.lazy_values = True
        self.current: Current | None = None
        #: Partitions the application paused, and their objects in progress set aside.
        self.paused: set[TP] = set()
        self.parked: dict[TP, Current] = {}

    # --- fetching (the pool's side) -------------------------------------------------------

    def _fetch(
        self, tp: TP, offset: int, note: Notification, start: Start | None
    ) -> Future[FetchedObject]:
        reader = self._reader(tp[0])
        fut = self._pool.submit(self._fetch_retrying, reader, note, tp[1], offset, start)
        with self._lock:
            self._inflight.add(fut)
        fut.add_done_callback(self._finished)
        return fut

    def _finished(self, fut: Future[FetchedObject]) -> None:
        with self._lock:
            self._inflight.discard(fut)

    def _fetch_retrying(
        self,
        reader: StorageReader,
        note: Notification,
        partition: int,
        offset: int,
        start: Start | None,
    ) -> FetchedObject:
        """Fetch (in the pool); retry retriable failures until ``fetch.retry.timeout.ms``."""
        t0 = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fetch_object(
                    reader, note, partition, offset, start, audit=self._audit,
                    views=self.lazy_values, buffers=self._buffers,
                )  # fmt: skip
            except MemqError as e:
                err = e
            except Exception as e:  # fail closed: a reader's untyped failure is a storage error
                err = StorageError(f"fetching {note.key} failed: {e!r}")
                err.__cause__ = e
            delay = self._retry.delay(attempt)
            elapsed = time.monotonic() - t0
            if self._closing.is_set() or not self._retry.should_retry(
                attempt, elapsed, delay, err.retriable
            ):
                raise err
            with self._lock:
                self._stats.fetch_retries += 1
            log.info("fetching %s failed (retry in %.2f s): %s", note.key, delay, err)
            if self._closing.wait(delay):
                raise err

    # --- the queue (the consumer's side) ----------------------------------------------------

    def submit(self, polled: Polled) -> None:
        """Start fetching the object of ``polled`` and queue it (a bad one is queued as is)."""
        tp = (polled.topic, polled.partition)
        note = polled.notification
        if note is None:
            err = polled.error or MemqFormatError("notification does not decode")
            self.queue.append(Pending(tp, polled.offset, None, None, None, error=err))
            return
        start = self._start(tp, polled.offset)
        fut = self._fetch(tp, polled.offset, note, start)
        self.queue.append(Pending(tp, polled.offset, note, start, fut))
        self._queued_bytes += note.size

    def _active(self) -> tuple[int, int]:
        """Objects and bytes queued for partitions that are not paused."""
        if not self.paused:
            return len(self.queue), self._queued_bytes
        held = [p for p in self.queue if p.tp in self.paused]
        return len(self.queue) - len(held), self._queued_bytes - sum(p.size for p in held)

    def room(self) -> bool:
        """Whether another object may be fetched ahead."""
        n, size = self._active()
        return n < self._config.prefetch_objects and size < self._config.prefetch_bytes

    def depth(self) -> tuple[int, int, int]:
        """(objects queued, their bytes, notifications waiting in the backlog)."""
        return len(self.queue), self._queued_bytes, len(self.backlog)

    def fill(
        self, feed: Feed, timeout: float, stale: Callable[[TP], bool] = lambda _tp: False
    ) -> None:
        """Poll notifications (serving rebalances); prefetch as many objects as allowed.

        Nothing polled is ever dropped, except what ``stale`` says Kafka read from where
        the partition no longer is (a seek it has not taken yet: it reads them again from
        the new position); what does not fit waits in :attr:`backlog`.
        """
        self._submit_backlog()
        if self.room():  # (so the backlog is empty)
            feed.resume()
            polled = feed.poll(self._config.prefetch_objects - self._active()[0], timeout)
        else:
            feed.pause()  # every assigned partition, including newly assigned ones
            polled = feed.poll(1, 0.0)  # serve the group; keep whatever comes anyway
        self.backlog.extend(p for p in polled if not stale((p.topic, p.partition)))
        self._submit_backlog()

    def _submit_backlog(self) -> None:
        while self.backlog and self.room():
            self.submit(self.backlog.popleft())

    def _head(self) -> int | None:
        """Index of the first queued object of a partition that is not paused."""
        if not self.paused:
            return 0 if self.queue else None
        for i, p in enumerate(self.queue):
            if p.tp not in self.paused:
                return i
        return None

    def has_head(self) -> bool:
        """Whether an object may come next: a parked one resumed, or one queued."""
        return self._resumable() is not None or self._head() is not None

    def head_ready(self) -> bool:
        """Whether the next object is ready: a parked one resumed, or a finished fetch
        (well or not)."""
        if self._resumable() is not None:
            return True
        i = self._head()
        if i is None:
            return False
        fut = self.queue[i].future
        return fut is None or fut.done()

    def _pop(self, i: int) -> Pending:
        head = self.queue[i]
        del self.queue[i]
        self._queued_bytes -= head.size
        return head

    # --- pausing ---------------------------------------------------------------------------

    def pause(self, parts: set[TP]) -> None:
        """Hand out nothing more of ``parts``: their object in progress is parked."""
        self.paused |= parts
        cur = self.current
        if cur is not None and cur.pending.tp in parts:
            cur.left_midway()  # (other objects may hand out copies of its block meanwhile)
            self.parked[cur.pending.tp] = cur
            self.current = None

    def resume(self, parts: set[TP]) -> None:
        self.paused -= parts

    def _resumable(self) -> TP | None:
        for tp in self.parked:
            if tp not in self.paused:
                return tp
        return None

    def unpark(self) -> bool:
        """Make a parked object of a resumed partition current (it comes before anything
        queued for its partition); False if there is none (or an object is current)."""
        tp = self._resumable() if self.current is None else None
        if tp is None:
            return False
        self.current = self.parked.pop(tp)
        return True

    def partitions(self) -> set[TP]:
        """Every partition with something queued, polled, current or parked."""
        return (
            {p.tp for p in self.queue}
            | {(p.topic, p.partition) for p in self.backlog}
            | {c.pending.tp for c in self.in_progress()}
        )

    def in_progress(self) -> list[Current]:
        """The current object and the parked ones."""
        cur = self.current
        return [*([cur] if cur is not None else []), *list(self.parked.values())]

    def take(self, timeout: float | None) -> Pending | None:
        """Wait up to ``timeout`` seconds for the head's fetch; then dequeue and return it.

        If it has records to hand out, it becomes :attr:`current`; if not (skipped by the
        policy, nothing at or after its start, or only copies of blocks handed out) it is
        returned without becoming current and is done. None: the fetch did not finish in
        time. A failure the policy does not skip is raised, and the object stays at the
        head (fetched again; a notification that does not decode raises again).
        """
        i = self._head()
        if i is None:
            return None
        head = self.queue[i]
        if head.future is None:  # a notification that does not decode
            assert head.error is not None
            if self._config.corrupt_object_policy == "skip":
                self._pop(i)
                self._skip(head, head.error, "corrupt")
                return head
            raise copy.copy(head.error)  # the same error each time, a fresh instance
        try:
            fetched = head.future.result(timeout=timeout)
        except MemqError as e:  # (first: a fetch's RequestTimeoutError is a TimeoutError)
            kind = self._skippable(head, e)
            if kind is not None:
                self._pop(i)
                self._skip(head, self._expired_error(head) if kind == "expired" else e, kind)
                return head
            # Leave it at the head for the next poll (fetched again, with a new deadline).
            assert head.notification is not None
            head.future = self._fetch(head.tp, head.offset, head.notification, head.start)
            if self._expired(head):
                raise self._expired_error(head) from e
            raise
        except TimeoutError:  # not fetched yet
            return None
        self._pop(i)
        self._stats.bytes += fetched.bytes_read
        self._stats.fetch_seconds += fetched.seconds
        messages: Sequence[Message] = fetched.records  # decoded columns: built when taken
        blocks, tracked = fetched.blocks, None
        if self._dedup is not None and messages:
            admitted = self._dedup.admit(fetched.notification.topic, messages, fetched.spans)
            messages, tracked = admitted.messages, admitted.tracked
            if admitted.dropped:  # audited as dropped copies, never as consumed
                head.copies = [b for b in blocks if b.index in admitted.dropped]
                blocks = [b for b in blocks if b.index not in admitted.dropped]
            if admitted.trimmed:  # consumed: only the records not handed out before
                cut = admitted.trimmed
                blocks = [
                    dataclasses.replace(b, records=b.records - cut.get(b.index, 0))
                    for b in blocks
                    if b.records > cut.get(b.index, 0)
                ]
        head.blocks = blocks  # audited when the object is done
        if messages:  # else: everything before a seek position or time floor, or copies
            self.current = Current(head, messages, tracked, self._dedup)
        return head

    def _expired(self, head: Pending) -> bool:
        note = head.notification
        return note is not None and is_expired(
            note, self._retention(head.tp[0]), int(self._clock() * 1000)
        )

    def _expired_error(self, head: Pending) -> MemqError:
        retention = self._retention(head.tp[0])
        assert head.notification is not None and retention is not None
        return expired_error(head.notification, retention, int(self._clock() * 1000))

    def _skippable(self, head: Pending, err: MemqError) -> str | None:
        """The kind of skip the policies make of ``err`` (None: raise it)."""
        if isinstance(err, ObjectNotFoundError) and self._expired(head):
            return "expired" if self._config.missing_object_policy == "skip" else None
        if self._config.corrupt_object_policy == "skip":
            if isinstance(err, ObjectNotFoundError):
                return "missing"
            if isinstance(err, CorruptObjectError):
                return "corrupt"
        return None

    def _skip(self, pending: Pending, err: MemqError, kind: str) -> None:
        """Count, log and report an object (or notification) a policy skips."""
        setattr(self._stats, f"skipped_{kind}", getattr(self._stats, f"skipped_{kind}") + 1)
        log.warning("skipping %s object at %s offset %d: %s", kind, pending.tp, pending.offset, err)
        if pending.notification is not None:
            self._on_skip(pending.notification, err)

    def drop(self, parts: set[TP]) -> None:
        """Forget queued, polled and in-progress objects of ``parts`` (after revoke or seek)."""
        keep: deque[Pending] = deque()
        for p in self.queue:
            if p.tp in parts:
                if p.future is not None:
                    p.future.cancel()  # a running one finishes in the background
                self._queued_bytes -= p.size
            else:
                keep.append(p)
        self.queue = keep
        self.backlog = deque(p for p in self.backlog if (p.topic, p.partition) not in parts)
        if self.current is not None and self.current.pending.tp in parts:
            self.current.left_midway()
            self.current = None
        for tp in parts:
            cur = self.parked.pop(tp, None)
            if cur is not None:
                cur.left_midway()

    def close(self, timeout: float) -> None:
        """Stop fetching: cancel queued fetches, wait up to ``timeout`` s for running ones.

        Fetches still running then are abandoned (logged and counted): their readers may
        be closed under them, and their results are never used.
        """
        self._closing.set()  # retries stop waiting
        for p in self.queue:
            if p.future is not None:
                p.future.cancel()
        self.queue.clear()
        self.backlog.clear()
        self.current = None
        self.parked.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = list(self._inflight)
        _, left = wait(running, timeout=timeout)
        if left:
            self._stats.fetches_abandoned += len(left)
            log.warning("closing with %d fetches still running after %.1f s", len(left), timeout)
        self._buffers.clear()  # (a fetch still running keeps its own)
