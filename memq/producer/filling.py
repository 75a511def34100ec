"""Filling the producer's open blocks: where a record goes, buffer.memory, sealing.

An unkeyed record goes to the calling thread's open block of its topic (no lock per
record); a keyed record to the open block of its key lane (:mod:`memq.producer.lanes`),
shared by every thread so a key's records keep the order of the produce() calls. Opening a
block of a quiet topic reserves :data:`FIRST_RESERVE` bytes of ``buffer.memory`` (or its
first record's size) and takes more as it grows, up to its limit; a block of a busy
topic (its last block was at least half full) reserves its limit at once. Both wait up
to ``max.block.ms`` for memory. So a thousand trickling topics hold a thousand small
reservations, not a thousand ``batch.size`` ones (which made produce() wait for lingers
to free them). A block is sealed when full, when ``linger.ms`` passes (a key lane's block
keeps filling while an earlier block of its lane is in flight), or on flush, and handed
to the sender.

:class:`BlockFilling` is the part of :class:`memq.producer.producer.Producer` that does
this; the producer owns the state it works on (declared below) and sets it up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from itertools import accumulate

from memq.aio import LoopInbox
from memq.errors import ClientClosedError, MemqError
from memq.formats.block import BLOCK_FRAME, Header
from memq.producer.accumulator import OpenBlock, SealedBlock
from memq.producer.config import ProducerConfig
from memq.producer.futures import BatchFuture, BlockResult, DeliveryCallback, RecordFuture
from memq.producer.lanes import lane_of
from memq.producer.sender import Sender

__all__ = ["BlockFilling", "BufferFullError", "partly_queued"]

log = logging.getLogger(__name__)


#: buffer.memory taken when a block opens (at most its limit); it doubles as it fills.
FIRST_RESERVE = 16 * 1024


class BufferFullError(MemqError, BufferError):
    """produce() waited ``max.block.ms`` for buffer space: the brokers do not keep up."""

    retriable = True


def partly_queued(
    e: MemqError, topic: str, parts: list[tuple[BlockResult, int]], queued: Sequence[int], n: int
) -> MemqError:
    """``e`` raised by produce_batch() once ``queued`` (indexes) of its ``n`` records
    were in blocks: those are delivered all the same, so a retry of the whole batch
    would store them twice. ``e.queued`` lists them, ``e.future`` is their future."""
    e.queued = list(queued)  # type: ignore[attr-defined]
    e.future = BatchFuture(topic, parts) if parts else None  # type: ignore[attr-defined]
    if queued:
        e.args = (
            f"{e.args[0] if e.args else e}; {len(queued)} of these {n} records were queued "
            "before it and will be delivered: retry only the others (e.queued lists "
            "their indexes, e.future is their BatchFuture)",
        )
    return e


class BlockFilling:
    """Puts records into open blocks and seals them (a base of ``Producer``)."""

    config: ProducerConfig
    _sender: Sender
    _loop: asyncio.AbstractEventLoop
    #: Hands blocks to the I/O loop: one wake-up per burst of opened or sealed blocks.
    _inbox: LoopInbox
    _thread: threading.Thread
    _lock: threading.Lock
    _changed: threading.Condition
    #: Per thread: ``blocks``, the open block of each topic (unkeyed records).
    _local: threading.local
    _open: set[OpenBlock]
    #: Sealed blocks not completed yet (close() fails any the sender never finished).
    _inflight: set[SealedBlock]
    #: Next block sequence number per topic.
    _seq: dict[str, int]
    #: Topics whose last sealed block was at least half full: their next block reserves
    #: its whole limit (at most buffer.memory) at once, waiting for room before it
    #: exists, as a busy topic fills it anyway; a growing block could wait mid-fill and
    #: be sealed by linger.
    _busy: set[str]
    #: Open blocks of the key lanes, by (topic, writer): shared by every thread, so
    #: a key's records keep the order of the produce() calls.
    _keyed: dict[tuple[str, str], OpenBlock]
    #: Blocks opened so far per key lane (a block's place in its lane).
    _lane_opened: dict[tuple[str, str], int]
    #: Per topic: the metadata object the lanes were computed from, and its writers.
    _lane_writers: dict[str, tuple[object, list[str]]]
    #: Bytes of buffer.memory taken by open, sealed and in-flight blocks.
    _buffered: int
    #: Records in sealed blocks not completed yet.
    _pending_records: int
    #: What each thread waiting for buffer.memory in ``_reserve`` needs (bytes).
    _needs: list[int]
    _closed: bool

    def _on_io_thread(self) -> bool:
        """True inside a delivery callback (they run on the I/O thread), where produce()
        must never block: what it would wait for is done by this very thread."""
        return threading.current_thread() is self._thread

    def _fill(
        self,
        topic: str,
        lane: str | None,
        ts: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes],
        totals: Sequence[int],
        limit: int,
        parts: list[tuple[BlockResult, int]],
    ) -> None:
        """Add ``values`` (cumulative sizes ``totals``), in order, to the open block(s) of
        the calling thread (``lane`` None) or of the key lane ``lane``; ``parts`` gets each
        block's future and record count."""
        blocks: dict[str, OpenBlock] | None = getattr(self._local, "blocks", None)
        if blocks is None:
            blocks = self._local.blocks = {}
        done, n = 0, len(values)
        while done < n:
            acc = blocks.get(topic) if lane is None else self._keyed.get((topic, lane))
            need = totals[done + 1] - totals[done]  # the next record's size
            if acc is not None:
                added = acc.try_add_many(ts, keys, values, totals, done)
                if added:
                    parts.append((acc.result, added))
                    done += added
                    continue
                if self._grow(acc, need):
                    continue
                self._seal(acc)  # full
            if lane is None:
                blocks[topic] = self._open_block(topic, limit, need)
            else:
                self._open_lane_block((topic, lane), acc, limit, need)

    # --- keyed records -----------------------------------------------------------------

    def _lanes(self, topic: str) -> list[str]:
        """``topic``'s writers (sorted addresses) that key lanes map to.

        Taken from the last metadata seen (kept when the cache entry is dropped after an
        error, so the mapping changes only when fresh metadata names other writers).
        """
        tmeta = self._sender.meta.cached(topic)
        seen = self._lane_writers.get(topic)
        if seen is not None and (tmeta is None or tmeta is seen[0]):
            return seen[1]
        writers = self._sender.writers_of(tmeta)
        if tmeta is not None:
            if seen is not None and seen[1] != writers:
                log.info("topic %s: key lanes now map to writers %s", topic, writers)
            self._lane_writers[topic] = (tmeta, writers)
        return writers

    def _produce_keyed(
        self,
        topic: str,
        ts: int,
        key: bytes,
        value: bytes,
        headers: tuple[Header, ...] | None,
        size: int,
        limit: int,
        on_delivery: DeliveryCallback | None,
    ) -> RecordFuture:
        """Add a keyed record to the open block of its key lane (shared by all threads)."""
        lane = (topic, lane_of(key, self._lanes(topic)))
        while True:
            acc = self._keyed.get(lane)
            if acc is not None:
                fut = acc.try_add(ts, key, value, headers, size, on_delivery)
                if fut is not None:
                    return fut
                if self._grow(acc, size):
                    continue
                self._seal(acc)  # full
            self._open_lane_block(lane, acc, limit, size)

    def _produce_keyed_many(
        self,
        topic: str,
        ts: int,
        keys: Sequence[bytes | None],
        values: Sequence[bytes],
        sizes: Sequence[int],
        limit: int,
    ) -> list[tuple[BlockResult, int]]:
        """produce_batch() with keys: each key lane's records (and the unkeyed ones) go,
        in their order, to that lane's open block(s)."""
        writers = self._lanes(topic)
        groups: dict[str | None, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(None if k is None else lane_of(k, writers), []).append(i)
        parts: list[tuple[BlockResult, int]] = []
        queued: list[int] = []
        for lane, idx in groups.items():
            totals = list(accumulate((sizes[i] for i in idx), initial=0))
            sub_keys = [keys[i] for i in idx]
            before = len(parts)
            try:
                self._fill(
                    topic, lane, ts, sub_keys, [values[i] for i in idx], totals, limit, parts
                )
            except MemqError as e:
                queued += idx[: sum(c for _, c in parts[before:])]
                raise partly_queued(e, topic, parts, sorted(queued), len(keys)) from None
            queued += idx
        return parts

    def _open_lane_block(
        self, lane: tuple[str, str], old: OpenBlock | None, limit: int, need: int
    ) -> None:
        """Replace ``lane``'s open block ``old`` (None: it has none) by a new one, unless
        another thread did already; it reserves room for a first record of ``need`` bytes.

        A lane sends one block at a time, so while an earlier block of the lane is in
        flight the new one may grow past batch.size, up to 3/4 of the topic's largest
        block (a quarter of buffer.memory at most): under load a lane then sends blocks
        that fill over half a broker batch, which the broker seals at once (trigger
        ``keyed``) instead of after batch.ms, so one block per round trip still moves
        tens of MB/s.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("producer is closed")
            if self._keyed.get(lane) is not old:
                return
            if self._sender.lanes.busy_before(lane, self._lane_opened.get(lane, 0)):
                tmeta = self._sender.meta.cached(lane[0])
                if tmeta is not None and tmeta.max_block_bytes:
                    grown = min(tmeta.max_block_bytes * 3 // 4, self.config.buffer_memory // 4)
                    limit = max(limit, grown)
            first = self._first_reserve(lane[0], limit, need)
            self._reserve(first)  # may wait (releasing the lock)
            if self._keyed.get(lane) is not old:  # another thread opened one meanwhile
                self._buffered -= first
                self._freed()
                return
            seq = self._lane_opened.get(lane, 0)
            self._lane_opened[lane] = seq + 1
            acc = OpenBlock(lane[0], capacity=first - BLOCK_FRAME, reserved=first, limit=limit)
            acc.lane, acc.lane_seq = lane[1], seq
            self._keyed[lane] = acc
            self._open.add(acc)
        self._inbox.call(self._arm_linger, acc)

    def _open_block(self, topic: str, limit: int, need: int) -> OpenBlock:
        """A new open block for the calling thread, of at most ``limit`` bytes; it holds
        room for its first record (``need`` bytes), at least :data:`FIRST_RESERVE`
        bytes of budget (at most ``limit``), and grows (``_grow``)."""
        first = self._first_reserve(topic, limit, need)
        with self._lock:
            if self._closed:
                raise ClientClosedError("producer is closed")
            self._reserve(first)
            acc = OpenBlock(topic, capacity=first - BLOCK_FRAME, reserved=first, limit=limit)
            self._open.add(acc)
        self._inbox.call(self._arm_linger, acc)
        return acc

    def _first_reserve(self, topic: str, limit: int, need: int) -> int:
        """What a new block reserves: room for its first record (``need`` bytes and the
        block header; so it never has to grow to take it), at least
        :data:`FIRST_RESERVE`, or for a busy topic its limit (at most buffer.memory:
        more would be admitted only once nothing else is buffered); at most ``limit``."""
        first = max(FIRST_RESERVE, need + BLOCK_FRAME)
        if topic in self._busy:
            first = max(first, self.config.buffer_memory)
        return min(limit, first)

    def _grow(self, acc: OpenBlock, need: int) -> bool:
        """Let ``acc`` take ``need`` more record bytes: double its reservation (or more,
        for a large record), up to its limit and to buffer.memory, waiting for memory
        as opening a block does (up to max.block.ms, then BufferFullError; never in a
        delivery callback). Under load blocks so stay as large as batch.size allows.
        False: it is sealed or can grow no more (the caller seals it)."""
        want = acc.size + need + BLOCK_FRAME
        cap = self.config.buffer_memory
        if want > acc.limit or want > cap:
            return False
        with self._lock:
            old = acc.reserved
            new = min(acc.limit, cap, max(old * 2, want))
            extra = new - old
            if extra <= 0 or acc.sealed:  # as large as it may be, or sealed: seal it
                return False
            self._reserve(extra)  # may wait (releasing the lock) or raise BufferFullError
            with acc.lock:  # a seal accounts for ``reserved`` under self._lock too
                if acc.sealed or acc.reserved != old:  # sealed, or grown by another thread
                    self._buffered -= extra
                    self._freed()
                    return not acc.sealed
                acc.reserved = new
                acc.capacity = new - BLOCK_FRAME
        return True

    def _reserve(self, size: int) -> None:
        """Take ``size`` bytes of buffer.memory (under the lock), waiting up to max.block.ms."""
        if self._fits(size):
            self._buffered += size
            return
        # Inside a delivery callback nothing frees buffer space while we wait: don't.
        in_callback = self._on_io_thread()
        block_ms = 0 if in_callback else self.config.max_block_ms
        deadline = time.monotonic() + block_ms / 1000
        self._needs.append(size)
        try:
            while not self._fits(size):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    if self._closed:
                        raise ClientClosedError("producer is closed")
                    raise BufferFullError(
                        f"producer buffer full ({self._buffered} of "
                        f"buffer.memory={self.config.buffer_memory} "
                        f"bytes) for max.block.ms={block_ms}"
                        + (
                            " (produce() in a delivery callback never blocks)"
                            if in_callback
                            else ""
                        )
                        + ": the brokers are not keeping up; slow down, raise buffer.memory, "
                        "or check broker health"
                    )
                self._changed.wait(left)
        finally:
            self._needs.remove(size)
        self._buffered += size

    def _freed(self) -> None:
        """buffer.memory was given back (under the lock): wake the threads waiting in
        ``_reserve`` if one of them now fits. Not on every small give-back: at full
        load each woken producer would find too little room and wait again, and the
        wake-ups (a lock hand-off and a GIL switch each) were ~12% of the I/O thread."""
        if self._needs and self._fits(min(self._needs)):
            self._changed.notify_all()

    def _fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit in buffer.memory now (under the lock); anything
        fits when nothing is buffered, so one record larger than buffer.memory still goes."""
        return self._buffered + size <= self.config.buffer_memory or self._buffered == 0

    def _seal(self, acc: OpenBlock) -> None:
        """Seal an open block (from any thread) and hand it to the sender."""
        if not acc.close():
            return
        with self._lock:
            self._open.discard(acc)
            self._buffered -= acc.reserved - acc.size  # keep only what the records use
            acc.reserved = acc.size
            self._freed()
            if acc.lane is not None and self._keyed.get((acc.topic, acc.lane)) is acc:
                del self._keyed[(acc.topic, acc.lane)]
            if not acc.count:
                if acc.lane is not None:  # never sent: the lane's next block may go
                    self._inbox.call(self._sender.lanes.done, (acc.topic, acc.lane), acc.lane_seq)
                return
            self._pending_records += acc.count
            seq = self._seq.get(acc.topic, 0)
            self._seq[acc.topic] = seq + 1
            if acc.size * 2 >= acc.limit:
                self._busy.add(acc.topic)
            else:
                self._busy.discard(acc.topic)
            block = acc.seal(seq)
            self._inflight.add(block)
        self._inbox.call(self._sender.spawn, block)

    def _arm_linger(self, acc: OpenBlock) -> None:
        self._loop.call_later(self.config.linger_ms / 1000, self._linger, acc)

    def _linger(self, acc: OpenBlock) -> None:
        """linger.ms passed: seal the block; a key lane's block keeps filling (up to
        batch.size) while an earlier block of its lane is still in flight, as it could not
        be sent before anyway."""
        if (
            acc.lane is not None
            and not acc.sealed
            and self._sender.lanes.busy_before((acc.topic, acc.lane), acc.lane_seq)
        ):
            self._arm_linger(acc)
            return
        self._seal(acc)
