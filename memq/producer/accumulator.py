"""Per-topic record accumulation into blocks (called under the producer's lock)."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

from memq.formats.block import BLOCK_VERSION, Header, encode_block_parts
from memq.formats.compression import Compression
from memq.formats.crc import crc32
from memq.producer.futures import BlockResult, DeliveryCallback, RecordFuture

__all__ = ["OpenBlock", "SealedBlock"]


@dataclass(eq=False)
class OpenBlock:
    """Records waiting for a linger or size trigger.

    Each producing thread fills its own open block per topic; ``lock`` is only
    contended when the linger timer or a flush seals the block from another thread.
    """

    topic: str
    #: Record bytes this block may take now (its reservation minus the block header).
    capacity: int = 1 << 62
    #: Bytes of the producer's buffer.memory this block holds.
    reserved: int = 0
    #: The most it may reserve (the block limit): it grows while it fills.
    limit: int = 1 << 62
    created: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sealed: bool = False
    # Records are kept column-wise: bytes and ints are not tracked by Python's cyclic
    # GC, so a million in-flight records add no GC work (a tuple per record would).
    #: Record timestamps (kept after the records are released once encoded).
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    headers: list[tuple[Header, ...] | None] = field(default_factory=list)
    size: int = 0
    result: BlockResult = field(default_factory=BlockResult)
    #: Records with an on_delivery callback: their indexes and callbacks.
    cb_index: list[int] = field(default_factory=list)
    cb_fn: list[DeliveryCallback] = field(default_factory=list)
    count: int = 0
    #: The writer (address) of the key lane this block belongs to; None: unkeyed.
    lane: str | None = None
    #: The block's place in its lane (numbered as opened): lane blocks are sent in order.
    lane_seq: int = 0
    #: Opened once its topic's block limit was known (not the batch.size fallback of a
    #: topic without metadata yet): produce() may then add to it without a limit check.
    limit_known: bool = False

    @property
    def min_ts(self) -> int:
        return min(self.timestamps)

    @property
    def max_ts(self) -> int:
        return max(self.timestamps)

    def try_add(
        self,
        ts: int,
        key: bytes | None,
        value: bytes,
        headers: tuple[Header, ...] | None,
        size: int,
        on_delivery: DeliveryCallback | None,
    ) -> RecordFuture | None:
        """Add the record unless the block is sealed or full (then None)."""
        # Per-record hot path (once per produce()): appends and counters only; bounds
        # are computed once at seal. (acquire/release: half the cost of ``with`` here.)
        lock = self.lock
        lock.acquire()
        try:
            if self.sealed or self.size + size > self.capacity:
                return None
            index = self.count
            self.timestamps.append(ts)
            self.keys.append(key)
            self.values.append(value)
            self.headers.append(headers)
            self.count = index + 1
            self.size += size
            if on_delivery is not None:
                self.cb_index.append(index)
                self.cb_fn.append(on_delivery)
        finally:
            lock.release()
        return RecordFuture(self.result, self.topic, index, ts)

    def try_add_many(
        self,
        ts: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes],
        totals: Sequence[int],
        start: int,
    ) -> int:
        """Add as many of ``values[start:]`` (in order) as fit; returns how many.

        The bulk path: list extends only (C loops), no per-record future or callback.
        ``totals[i]`` is the size of records ``0..i-1`` together (``totals[0] == 0``).
        """
        with self.lock:
            if self.sealed:
                return 0
            end = bisect.bisect_right(totals, totals[start] + self.capacity - self.size) - 1
            n = end - start
            if n <= 0:
                return 0
            self.timestamps.extend(repeat(ts, n))
            self.keys.extend(repeat(None, n) if keys is None else keys[start:end])
            self.values.extend(values[start:end])
            self.headers.extend(repeat(None, n))
            self.count += n
            self.size += totals[end] - totals[start]
            return n

    def close(self) -> bool:
        """Mark sealed; False if it already was (someone else seals it)."""
        with self.lock:
            if self.sealed:
                return False
            self.sealed = True
            return True

    def seal(self, sequence: int) -> SealedBlock:
        return SealedBlock(self, sequence)

    def release_records(self) -> None:
        """Drop the record payloads (the encoded block holds them now); keep timestamps."""
        self.keys, self.values, self.headers = [], [], []


@dataclass(eq=False)
class SealedBlock:
    """A block with its sequence number, ready to be encoded and sent (and re-sent)."""

    open: OpenBlock
    sequence: int
    #: CRC-32 of the uncompressed record payload, when encoded with ``content_crc=True``.
    content_crc: int | None = None

    @property
    def topic(self) -> str:
        return self.open.topic

    @property
    def record_count(self) -> int:
        return self.open.count

    @property
    def lane(self) -> str | None:
        return self.open.lane

    def encode(
        self,
        producer_id: int,
        epoch: int,
        compression: Compression,
        content_crc: bool = False,
        version: int = BLOCK_VERSION,
    ) -> tuple[bytes, bytes | memoryview]:
        """The block's header and body (sent as two parts: never joined) in block format
        ``version``; with ``content_crc`` also sets :attr:`content_crc` (audit)."""
        o = self.open
        head, body, raw = encode_block_parts(
            o.timestamps,
            o.keys,
            o.values,
            o.headers,
            producer_id=producer_id,
            epoch=epoch,
            sequence=self.sequence,
            compression=compression,
            checked=True,  # (produce() and produce_batch() took bytes and int only)
            version=version,
        )
        if content_crc:
            self.content_crc = crc32(raw)
        return head, body
