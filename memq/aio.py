"""Event-loop plumbing shared by the broker and the clients: fewer wake-ups and syscalls
when many small things happen at once (a thousand trickling topics, say).

:class:`LoopInbox` runs callbacks from other threads on the event loop with one wake-up
per burst: ``loop.call_soon_threadsafe`` writes a byte to the loop's self-pipe on *every*
call, so a thousand uploads or Kafka acknowledgements finishing within a millisecond
cost a thousand ``send`` syscalls and a thousand ``recv`` ones on the loop's side.

:class:`WriteCoalescer` merges the small writes made to one transport during one turn of
the event loop into one ``transport.write`` (one ``send`` syscall): a request or a
response is several small parts (frame header, protocol header, body), and a burst of
them used to be a ``send`` each. Large parts are written at once, as before, so
back-pressure (``pause_writing``) still sees them when they are made.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar

__all__ = ["COALESCE_BYTES", "LoopInbox", "WriteCoalescer"]

T = TypeVar("T")

#: Writes smaller than this wait (at most to the end of the loop's turn) to be merged;
#: once this much is pending it is written at once.
COALESCE_BYTES = 64 * 1024


class LoopInbox:
    """Callbacks posted from any thread, run on ``loop`` in posting order; the loop is
    woken once per burst, not once per callback."""

    __slots__ = ("__weakref__", "_armed", "_items", "_loop_ref", "_loop_thread")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # A weak reference: :meth:`of` keeps inboxes in a WeakKeyDictionary by loop.
        self._loop_ref = weakref.ref(loop)
        self._items: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._armed = False
        #: The loop's thread (known once the inbox first drains on it).
        self._loop_thread: int | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopInbox:
        """The inbox shared by everything on ``loop`` (one wake-up for all of them)."""
        inbox = _INBOXES.get(loop)
        if inbox is None:
            inbox = _INBOXES[loop] = cls(loop)
        return inbox

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop_ref()
        if loop is None:
            raise RuntimeError("the event loop is gone")
        return loop

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon (from any thread). Raises RuntimeError
        if the loop is closed (as ``loop.call_soon_threadsafe`` does)."""
        # Append first, then look at the flag: a drain that cleared the flag before this
        # read pops this item or is followed by the drain scheduled here (under the GIL
        # the deque and the flag are seen in one order by every thread).
        item = (fn, args)
        self._items.append(item)
        if self._armed:
            return
        self._armed = True
        try:
            if threading.get_ident() == self._loop_thread:
                self.loop.call_soon(self._drain)  # on the loop: no self-pipe write
            else:
                self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed (or gone): this call did not happen
            self._armed = False
            with contextlib.suppress(ValueError):
                self._items.remove(item)
            raise

    def _drain(self) -> None:
        """Run what was posted before this drain began (what is posted meanwhile arms
        the next one): the loop gets back to I/O and timers between bursts."""
        self._loop_thread = threading.get_ident()
        self._armed = False
        items = self._items
        left = len(items)
        try:
            while left:
                left -= 1
                fn, args = items.popleft()
                try:
                    fn(*args)
                except Exception as e:  # as a Handle would: report it, run the rest
                    self.loop.call_exception_handler(
                        {"message": f"exception in callback {fn!r}", "exception": e}
                    )
        finally:
            if left and not self._armed:  # a BaseException left some: run them later
                self._armed = True
                self.loop.call_soon(self._drain)

    def wrap(self, cf: ConcurrentFuture[T]) -> asyncio.Future[T]:
        """An asyncio future on the loop with ``cf``'s outcome (``asyncio.wrap_future``
        with a batched wake-up). Cancelling it cancels ``cf`` if it has not started."""
        fut: asyncio.Future[T] = self.loop.create_future()

        def done(src: ConcurrentFuture[T]) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed: nobody waits any more
                self.call(_copy_outcome, src, fut)

        def cancelled(dst: asyncio.Future[T]) -> None:
            if dst.cancelled():
                cf.cancel()

        fut.add_done_callback(cancelled)
        cf.add_done_callback(done)
        return fut

    def run(self, executor: Executor, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``loop.run_in_executor(executor, fn, *args)`` with a batched wake-up."""
        return self.wrap(executor.submit(fn, *args))


_INBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = (
    weakref.WeakKeyDictionary()
)


def _copy_outcome(src: ConcurrentFuture[T], dst: asyncio.Future[T]) -> None:
    if dst.done():  # cancelled meanwhile
        return
    if src.cancelled():
        dst.cancel()
        return
    err = src.exception()
    if err is not None:
        dst.set_exception(err)
    else:
        dst.set_result(src.result())


class WriteCoalescer:
    """Writes to ``transport``: parts smaller than :data:`COALESCE_BYTES` in all are kept
    until the end of the event loop's turn and written together; a write that brings
    the pending bytes to :data:`COALESCE_BYTES` or more is written at once, with what is
    pending before it. Order is kept. Call :meth:`flush` before closing the transport.
    """

    __slots__ = ("_loop", "_parts", "_pending", "_scheduled", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport) -> None:
        self._loop = loop
        self.transport = transport
        self._parts: list[bytes | bytearray | memoryview] = []
        self._pending = 0
        self._scheduled = False

    def write(self, *parts: bytes | bytearray | memoryview) -> None:
        for p in parts:
            n = _nbytes(p)
            if n:  # an empty part would be a no-op write (and, buffered, never drain)
                self._parts.append(p)
                self._pending += n
        if self._pending >= COALESCE_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_scheduled)

    def _flush_scheduled(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Write whatever is pending now (dropped if the transport is closing)."""
        parts = self._parts
        if not parts:
            return
        self._parts, self._pending = [], 0
        t = self.transport
        if t.is_closing():
            return
        # Not ``writelines``: before 3.12 it joins every part (a copy of large bodies),
        # and on 3.12.0-3.12.8 and 3.13.0-3.13.1 it never calls pause_writing (CPython
        # gh-127655), which back-pressure relies on. Small parts are joined (one copy of
        # a few bytes), large ones written as they are.
        if len(parts) == 1:
            t.write(parts[0])
        else:
            small: list[bytes | bytearray | memoryview] = []
            for p in parts:
                if _nbytes(p) < COALESCE_BYTES:
                    small.append(p)
                    continue
                if small:
                    t.write(b"".join(small))
                    small = []
                t.write(p)
            if small:
                t.write(b"".join(small) if len(small) > 1 else small[0])


def _nbytes(part: bytes | bytearray | memoryview) -> int:
    """Bytes in ``part`` (a memoryview's ``len`` counts items, not bytes)."""
    return part.nbytes if type(part) is memoryview else len(part)
