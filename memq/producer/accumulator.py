"""Per-topic record accumulation into blocks (called under the producer's lock)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from memq.formats.block import Header, Record, encode_block
from memq.formats.compression import Compression
from memq.producer.futures import BlockResult, DeliveryCallback, RecordFuture

__all__ = ["RECORD_OVERHEAD", "OpenBlock", "SealedBlock", "record_size"]

#: msgpack framing of one record (array header, int64 timestamp, bin headers) plus slack.
RECORD_OVERHEAD = 24


def record_size(key: bytes | None, value: bytes, headers: tuple[Header, ...] | None) -> int:
    """Upper bound of a record's encoded (uncompressed) size."""
    n = len(value) + RECORD_OVERHEAD
    if key is not None:
        n += len(key)
    if headers:
        n += sum(len(h[0]) + (len(h[1]) if h[1] is not None else 0) + 12 for h in headers)
    return n


@dataclass(eq=False)
class OpenBlock:
    """Records waiting for a linger or size trigger."""

    topic: str
    created: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    size: int = 0
    min_ts: int = 0
    max_ts: int = 0
    result: BlockResult = field(default_factory=BlockResult)
    callbacks: list[tuple[int, DeliveryCallback]] = field(default_factory=list)
    #: Record timestamps, kept once the records themselves are released after encoding.
    timestamps: list[int] | None = None
    count: int = 0

    def add(
        self,
        ts: int,
        key: bytes | None,
        value: bytes,
        headers: tuple[Header, ...] | None,
        size: int,
        on_delivery: DeliveryCallback | None,
    ) -> RecordFuture:
        index = len(self.records)
        if index == 0:
            self.min_ts = self.max_ts = ts
        elif ts < self.min_ts:
            self.min_ts = ts
        elif ts > self.max_ts:
            self.max_ts = ts
        self.records.append((ts, key, value, headers))
        self.count += 1
        self.size += size
        if on_delivery is not None:
            self.callbacks.append((index, on_delivery))
        return RecordFuture(self.result, self.topic, index, ts)

    def seal(self, sequence: int) -> SealedBlock:
        return SealedBlock(self, sequence)

    def timestamp(self, index: int) -> int:
        return self.timestamps[index] if self.timestamps is not None else self.records[index][0]

    def release_records(self) -> None:
        """Drop the record objects (the encoded block holds them now); keep timestamps."""
        self.timestamps = [r[0] for r in self.records]
        self.records = []


@dataclass(eq=False)
class SealedBlock:
    """A block with its sequence number, ready to be encoded and sent (and re-sent)."""

    open: OpenBlock
    sequence: int

    @property
    def topic(self) -> str:
        return self.open.topic

    @property
    def record_count(self) -> int:
        return self.open.count

    def encode(self, producer_id: int, epoch: int, compression: Compression) -> bytes:
        o = self.open
        return encode_block(
            o.records,
            producer_id=producer_id,
            epoch=epoch,
            sequence=self.sequence,
            compression=compression,
            min_timestamp=o.min_ts,
            max_timestamp=o.max_ts,
        )
