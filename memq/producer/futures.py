"""Delivery results: one shared state per block, a light future per record."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any, NamedTuple

from memq.config.base import check_timeout
from memq.errors import MemqError, RequestTimeoutError

__all__ = ["BatchFuture", "BlockResult", "DeliveryCallback", "RecordFuture", "RecordMetadata"]

log = logging.getLogger(__name__)


class RecordMetadata(NamedTuple):
    """Where an acknowledged record went. ``key``/``bucket`` are set for acks=all only.

    A NamedTuple: built once per record on completion, so it must be cheap.
    """

    topic: str
    timestamp: int
    producer_id: int
    epoch: int
    sequence: int
    record_index: int
    bucket: str | None = None
    key: str | None = None
    block_index: int | None = None
    duplicate: bool = False


DeliveryCallback = Callable[[MemqError | None, RecordMetadata], Any]


class BlockResult:
    """Completion state shared by every record of one block (set once, by the sender)."""

    __slots__ = ("_callbacks", "_done", "_event", "_lock", "error", "last_error", "meta")

    def __init__(self) -> None:
        self._done = False
        #: Made only when someone blocks in :meth:`wait` (most blocks complete unwatched:
        #: an Event per block was ~5% of a trickling producer's CPU).
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self.error: MemqError | None = None
        #: The error of the block's latest failed attempt, while it is still retried: what
        #: a caller who stops waiting before the delivery timeout is told as the cause.
        self.last_error: MemqError | None = None
        self.meta: dict[str, Any] = {}
        self._callbacks: list[Callable[[], None]] = []

    def complete(self, error: MemqError | None, **meta: Any) -> None:
        with self._lock:
            if self._done:
                return
            self.error = error
            self.meta = meta
            self._done = True
            event = self._event
            callbacks, self._callbacks = self._callbacks, []
        if event is not None:
            event.set()
        for cb in callbacks:
            try:
                cb()
            except Exception:
                log.exception("delivery callback raised")

    def metadata(self, topic: str, timestamp: int, index: int) -> RecordMetadata:
        m = self.meta
        return RecordMetadata(
            topic,
            timestamp,
            m.get("producer_id", 0),
            m.get("epoch", 0),
            m.get("sequence", 0),
            index,
            m.get("bucket"),
            m.get("key"),
            m.get("block_index"),
            m.get("duplicate", False),
        )

    def metadata_many(
        self, topic: str, timestamps: list[int], indexes: list[int]
    ) -> Iterator[RecordMetadata]:
        """Metadata of many records of this block: per-block fields looked up once.

        Lazy (an iterator), so each tuple is freed right after its callback (no GC
        pressure); built in C: ``zip`` reuses its row tuple once ``tuple.__new__`` has
        copied it.
        """
        m = self.meta
        rows = zip(
            repeat(topic),
            map(timestamps.__getitem__, indexes),
            repeat(m.get("producer_id", 0)),
            repeat(m.get("epoch", 0)),
            repeat(m.get("sequence", 0)),
            indexes,
            repeat(m.get("bucket")),
            repeat(m.get("key")),
            repeat(m.get("block_index")),
            repeat(m.get("duplicate", False)),
        )
        return map(tuple.__new__, repeat(RecordMetadata), rows)

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None) -> bool:
        if self._done:
            return True
        with self._lock:
            if self.done():  # completed meanwhile (a method call: mypy narrows _done)
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def not_delivered(self, what: str, timeout: float | None) -> RequestTimeoutError:
        """The error of a caller's wait for ``what`` that ended before the block did."""
        last = self.last_error
        cause = f" (last error: {type(last).__name__}: {last})" if last is not None else ""
        return RequestTimeoutError(f"{what} not delivered within {timeout} s{cause}")

    def on_done(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(cb)
                return
        cb()


class RecordFuture:
    """The result of one ``produce()``: ``result(timeout)`` returns RecordMetadata or raises."""

    __slots__ = ("_block", "_index", "_timestamp", "topic")

    def __init__(self, block: BlockResult, topic: str, index: int, timestamp: int) -> None:
        self._block = block
        self.topic = topic
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._block.done()

    def cancelled(self) -> bool:
        return False

    def _metadata(self) -> RecordMetadata:
        return self._block.metadata(self.topic, self._timestamp, self._index)

    def exception(self, timeout: float | None = None) -> MemqError | None:
        check_timeout(timeout)
        if not self._block.wait(timeout):
            raise self._block.not_delivered("record", timeout)
        return self._block.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        err = self.exception(timeout)
        if err is not None:
            raise err
        return self._metadata()

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self._block.on_done(lambda: fn(self))

    def as_future(self) -> concurrent.futures.Future[RecordMetadata]:
        """This record's outcome as a standard :class:`concurrent.futures.Future`, for
        ``concurrent.futures.wait()`` or ``await asyncio.wrap_future(...)``: made on
        request (a produce() does not pay for one), not cancellable (a queued record is
        sent regardless)."""
        fut: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        fut.set_running_or_notify_cancel()

        def done() -> None:
            err = self._block.error
            if err is not None:
                fut.set_exception(err)
            else:
                fut.set_result(self._metadata())

        self._block.on_done(done)
        return fut


class BatchFuture:
    """The result of one ``produce_batch()``: every record of the call, in its blocks."""

    __slots__ = ("_parts", "topic")

    def __init__(self, topic: str, parts: list[tuple[BlockResult, int]]) -> None:
        self.topic = topic
        self._parts = parts

    @property
    def records(self) -> int:
        return sum(n for _, n in self._parts)

    def done(self) -> bool:
        return all(r.done() for r, _ in self._parts)

    def exception(self, timeout: float | None = None) -> MemqError | None:
        """The first error among the call's blocks (None: all acknowledged)."""
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        for r, _ in self._parts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not r.wait(left):
                raise r.not_delivered(f"{self.records} records of {self.topic!r}", timeout)
        return next((r.error for r, _ in self._parts if r.error is not None), None)

    def result(self, timeout: float | None = None) -> int:
        """How many records were acknowledged (all of them), or raise the first error."""
        err = self.exception(timeout)
        if err is not None:
            raise err
        return self.records

    def as_future(self) -> concurrent.futures.Future[int]:
        """The call's outcome as a standard :class:`concurrent.futures.Future` (see
        :meth:`RecordFuture.as_future`): the record count once every block is
        acknowledged, else the first error (in the call's order)."""
        fut: concurrent.futures.Future[int] = concurrent.futures.Future()
        fut.set_running_or_notify_cancel()
        left = [len(self._parts)]
        lock = threading.Lock()

        def one_done() -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            err = next((r.error for r, _ in self._parts if r.error is not None), None)
            if err is not None:
                fut.set_exception(err)
            else:
                fut.set_result(self.records)

        if not self._parts:  # (no records)
            fut.set_result(0)
        for r, _ in self._parts:
            r.on_done(one_done)
        return fut
