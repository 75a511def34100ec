"""The broker-wide pool of batch buffers, bounded by ``memory_limit_bytes``.

Every topic processor takes the buffer for its next batch from this pool when it opens
the batch and gives it back once the batch is uploaded (or failed), so an idle topic
holds no batch memory, however many topics a broker serves. A batch starts in a small
buffer and moves up through size classes (64 KiB, 512 KiB, 4 MiB, ... up to its topic's
``batch.bytes``) as blocks arrive, so a trickle topic's open batch costs kilobytes, not
``batch.bytes``; moving copies the blocks once per class (per batch, never per record).
A topic's next batch starts in the class its last batch needed if the pool has it at
once (a steady hot topic then copies nothing up through the classes).
When the pool cannot give the next class at once, the batch is sealed as it is instead
of waiting. Buffers are reused: a free buffer of the same shape is handed out again
without allocating; free buffers of other shapes are dropped when their memory is needed.

Fairness:

- writers that wait for a buffer are served first come, first served, across topics: a
  newcomer never takes a buffer while others queue for one;
- a topic holds at most ``ring_size`` buffers at once (its open batch plus its uploads in
  flight): a hot topic whose uploads lag waits for its own buffers and cannot starve the
  others; its waiting writers do not hold up writers of other topics.

The pool's memory (free and held buffers) never exceeds the limit; when it is all held,
writers wait up to the topic's throttle timeout (their connections stop being read
meanwhile: TCP back-pressure) and then get a retriable THROTTLED error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

from memq.broker.metrics import BrokerMetrics
from memq.errors import MemqError
from memq.formats.batch import BatchBuilder, batch_header_size

__all__ = ["SMALLEST_CLASS", "BufferPool", "buffer_bytes", "size_classes"]

Shape = tuple[int, int]  # (capacity, max_blocks)

#: The first buffer of every batch; each next class is 8 times larger.
SMALLEST_CLASS = 64 * 1024
#: Fewest bytes a block takes (its 56-byte header and a record): bounds blocks per class.
_MIN_BLOCK = 64


def size_classes(batch_bytes: int, max_blocks: int) -> list[Shape]:
    """The buffer shapes a batch of a topic moves through, smallest first; the last is
    the topic's full ``batch.bytes`` and ``batch.max_blocks``."""
    shapes: list[Shape] = []
    cap = SMALLEST_CLASS
    while cap < batch_bytes:
        shapes.append((cap, min(max_blocks, max(1, cap // _MIN_BLOCK))))
        cap *= 8
    shapes.append((batch_bytes, max_blocks))
    return shapes


def buffer_bytes(capacity: int, max_blocks: int) -> int:
    """Memory of one batch buffer: the blocks plus the largest header it may need."""
    return capacity + batch_header_size(max_blocks)


@dataclass(eq=False)
class _Waiter:
    topic: str
    shape: Shape
    max_held: int
    fut: asyncio.Future[BatchBuilder]


class BufferPool:
    def __init__(self, limit_bytes: int, metrics: BrokerMetrics | None = None) -> None:
        self.limit = limit_bytes
        self.metrics = metrics
        self._free: dict[Shape, list[BatchBuilder]] = {}
        self._allocated = 0  # bytes of every buffer alive, free or held
        self._held: dict[str, int] = {}
        self._waiters: deque[_Waiter] = deque()
        if metrics is not None:
            metrics.pool_limit.set(limit_bytes)

    # --- state ------------------------------------------------------------------------

    @property
    def allocated_bytes(self) -> int:
        return self._allocated

    @property
    def held_bytes(self) -> int:
        """Memory of the buffers topics hold now (open batches and uploads)."""
        return self._allocated - self._free_buffer_bytes()

    @property
    def free_bytes(self) -> int:
        """Memory no topic holds (free buffers count: they are reused or dropped on demand)."""
        return self.limit - self.held_bytes

    def _free_buffer_bytes(self) -> int:
        return sum(buffer_bytes(*shape) * len(bs) for shape, bs in self._free.items())

    def held(self, topic: str) -> int:
        return self._held.get(topic, 0)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    # --- acquire / release ------------------------------------------------------------

    async def acquire(
        self,
        topic: str,
        capacity: int,
        max_blocks: int,
        max_held: int,
        timeout: float,
        prefer: Shape | None = None,
    ) -> BatchBuilder:
        """A buffer for ``topic``'s next batch; TimeoutError after ``timeout`` seconds.

        ``prefer``: a larger shape to hand out instead if the pool has it at once (the
        class the topic's last batch needed: a steady topic then skips the moves up
        through the smaller classes); otherwise the buffer is of the asked shape."""
        shape = (capacity, max_blocks)
        if prefer is not None and prefer[0] > capacity and not self._waiters:
            builder = self._grant(topic, prefer, max_held)
            if builder is not None:
                return builder
        if buffer_bytes(*shape) > self.limit:
            raise MemqError(
                f"topic {topic!r}: a batch buffer of {buffer_bytes(*shape)} bytes exceeds the "
                f"broker's memory_limit_bytes ({self.limit}): lower batch.bytes"
            )
        if not self._waiters:
            builder = self._grant(topic, shape, max_held)
            if builder is not None:
                return builder
        fut: asyncio.Future[BatchBuilder] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(topic, shape, max_held, fut)
        self._waiters.append(waiter)
        if self.metrics is not None:
            self.metrics.throttled_waits.labels(topic).inc()
        self._dispatch()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(0.0, timeout))
        except BaseException:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(topic, fut.result())  # granted just as we gave up: pass it on
            else:
                fut.cancel()
            self._dispatch()  # a capped head left the queue: others may go now
            raise

    def grow(self, topic: str, builder: BatchBuilder, shape: Shape) -> BatchBuilder | None:
        """Move ``topic``'s open batch from ``builder`` into a buffer of ``shape`` (the next
        size class) and take the old one back; None (nothing moved) when the pool has no
        room for it right now: the caller then seals the batch as it is."""
        if self._waiters:  # others queue for memory: do not take more than we hold
            return None
        bigger = self._take(shape)
        if bigger is None:
            return None
        builder.move_to(bigger)
        self._free.setdefault((builder.capacity, builder.max_blocks), []).append(builder)
        self._dispatch()
        return bigger

    def release(self, topic: str, builder: BatchBuilder) -> None:
        """Give a buffer back (its batch is stored or failed); serves the queue."""
        left = self._held.get(topic, 0) - 1
        if left > 0:
            self._held[topic] = left
        else:
            self._held.pop(topic, None)
        builder.reset()
        self._free.setdefault((builder.capacity, builder.max_blocks), []).append(builder)
        self._dispatch()

    def fail_waiters(self, topic: str, error: MemqError) -> None:
        """Fail every writer of ``topic`` still waiting (the topic is closing)."""
        for w in [w for w in self._waiters if w.topic == topic]:
            self._waiters.remove(w)
            if not w.fut.done():
                w.fut.set_exception(error)
                w.fut.exception()  # retrieved: the waiter may have timed out already
        self._dispatch()

    # --- internals --------------------------------------------------------------------

    def _grant(self, topic: str, shape: Shape, max_held: int) -> BatchBuilder | None:
        if self._held.get(topic, 0) >= max_held:
            return None
        builder = self._take(shape)
        if builder is None:
            return None
        self._held[topic] = self._held.get(topic, 0) + 1
        self._observe()
        return builder

    def _take(self, shape: Shape) -> BatchBuilder | None:
        """A free buffer of ``shape``, or a new one if memory allows (dropping free
        buffers of other shapes to make room); None when the limit does not allow it."""
        free = self._free.get(shape)
        if free:
            return free.pop()
        need = buffer_bytes(*shape)
        if self._allocated + need > self.limit:
            self._drop_free(self._allocated + need - self.limit)
        if self._allocated + need > self.limit:
            return None
        self._allocated += need
        return BatchBuilder(*shape)

    def _drop_free(self, nbytes: int) -> None:
        """Drop free buffers (of any shape) until ``nbytes`` are released or none is left."""
        for shape in list(self._free):
            bs = self._free[shape]
            while bs and nbytes > 0:
                bs.pop()
                self._allocated -= buffer_bytes(*shape)
                nbytes -= buffer_bytes(*shape)
            if not bs:
                del self._free[shape]
            if nbytes <= 0:
                return

    def _dispatch(self) -> None:
        """Serve waiters in arrival order; a waiter whose topic is at its cap is passed
        over (only its own releases can help it); one blocked by memory stops the round."""
        for w in list(self._waiters):
            if w.fut.done():
                self._waiters.remove(w)
                continue
            builder = self._grant(w.topic, w.shape, w.max_held)
            if builder is None:
                if self._held.get(w.topic, 0) >= w.max_held:
                    continue
                break
            self._waiters.remove(w)
            w.fut.set_result(builder)
        self._observe()

    def _observe(self) -> None:
        m = self.metrics
        if m is None:
            return
        m.pool_allocated.set(self._allocated)
        m.pool_held.set(self.held_bytes)
