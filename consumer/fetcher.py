"""Fetching batch objects straight from storage, verified, decoded into record columns.

Runs in the consumer's fetch pool, so GETs, checksum checks and decoding overlap the
application's processing. Records stay in their blocks' decoded columns
(:class:`~memq.consumer.message.Records`): a ``Message`` is built only when one is
handed out by ``Consumer.consume``, never for ``Consumer.consume_batch``. A fetch that starts mid-object (after a seek) range-reads the
header and then only the blocks it needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from memq.consumer.message import Chunk, Message, Records
from memq.errors import CorruptObjectError, InvalidPositionError, MemqFormatError
from memq.formats.batch import (
    BATCH_PREFIX_SIZE,
    BatchHeader,
    batch_header_length,
    decode_batch_header,
    verify_batch_block,
)
from memq.formats.block import decode_columns, decode_columns_with_crc
from memq.formats.gcpause import gc_paused
from memq.formats.notification import Notification
from memq.storage_handlers.base import StorageReader
from memq.storage_handlers.receive import ReceiveBuffers

__all__ = ["BlockAudit", "BlockSpan", "FetchedObject", "Start", "fetch_object"]


@dataclass(frozen=True, slots=True)
class Start:
    """Where to start inside an object: a (block, record) position and/or a time floor."""

    block: int = 0
    record: int = 0
    min_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class BlockAudit:
    """What a consumer reports about one block it hands out (audit records)."""

    index: int
    producer_id: int
    epoch: int
    sequence: int
    records: int  # messages handed out from the block (fewer after a seek into it)
    content_crc: int
    min_timestamp: int


class BlockSpan(NamedTuple):
    """One block's run of records in :attr:`FetchedObject.records`, with its id."""

    block: int  # index in the object
    producer_id: int
    epoch: int
    sequence: int
    length: int  # messages of the block (fewer after a seek into it)


@dataclass(slots=True)
class FetchedObject:
    notification: Notification
    partition: int
    offset: int
    records: Records
    bytes_read: int
    seconds: float
    #: Per block, when fetched with ``audit=True``.
    blocks: list[BlockAudit] = field(default_factory=list)
    #: Per block with records, in order: where its records are (for dedup).
    spans: list[BlockSpan] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        """Every record as a :class:`Message` (built now)."""
        return list(self.records)


def _verify_header(header: BatchHeader, note: Notification) -> None:
    if header.crc != note.checksum or header.object_size != note.size:
        raise CorruptObjectError(
            f"object {note.key} does not match its notification (checksum "
            f"{header.crc:#010x} vs {note.checksum:#010x}, size {header.object_size} vs "
            f"{note.size}): it was replaced or corrupted",
            key=note.key,
        )


def fetch_object(
    reader: StorageReader,
    note: Notification,
    partition: int,
    offset: int,
    start: Start | None = None,
    clock: Callable[[], float] = time.monotonic,
    audit: bool = False,
    views: bool = True,
    buffers: ReceiveBuffers | None = None,
) -> FetchedObject:
    """GET (part of) one object, verify it against its notification, decode its records
    (``views``: block format 2 values as a ``BinaryColumn`` over the object's bytes,
    else as ``bytes``). A whole object is received into one of ``buffers`` if given."""
    t0 = clock()
    start = start or Start()
    try:
        if start.block == 0 and start.min_timestamp is None:
            data = reader.read_whole(note.bucket, note.key, note.size, buffers)
            header = decode_batch_header(data)
            _verify_header(header, note)
            if len(data) != header.object_size:
                raise CorruptObjectError(
                    f"object {note.key} is {len(data)} bytes, its header says {header.object_size}",
                    key=note.key,
                )
            base, first, nbytes = 0, 0, len(data)
        else:
            prefix = reader.read(note.bucket, note.key, 0, BATCH_PREFIX_SIZE)
            hlen = batch_header_length(prefix)
            header = decode_batch_header(reader.read(note.bucket, note.key, 0, hlen))
            _verify_header(header, note)
            first = start.block
            if first > header.block_count or (first == header.block_count and start.record):
                raise _no_such_record(note, partition, offset, start, header.block_count)
            if start.min_timestamp is not None:  # skip whole blocks older than the floor
                while (
                    first < header.block_count
                    and header.entries[first].max_timestamp < start.min_timestamp
                ):
                    first += 1
            if first >= header.block_count:
                return FetchedObject(note, partition, offset, Records(()), hlen, clock() - t0)
            base = header.entries[first].offset
            data = reader.read(note.bucket, note.key, base, header.object_size)
            nbytes = hlen + len(data)
        blocks: list[BlockAudit] | None = [] if audit else None
        spans: list[BlockSpan] = []
        with gc_paused():
            records = _decode(
                data, header, base, first, note, partition, offset, start, blocks, spans, views
            )
    except CorruptObjectError:
        raise
    except MemqFormatError as e:
        raise CorruptObjectError(f"object {note.key} is corrupt: {e}", key=note.key) from e
    return FetchedObject(
        note, partition, offset, records, nbytes, clock() - t0, blocks or [], spans
    )


def _decode(
    data: bytes | bytearray | memoryview,
    header: BatchHeader,
    base: int,
    first: int,
    note: Notification,
    partition: int,
    offset: int,
    start: Start,
    blocks: list[BlockAudit] | None,
    spans: list[BlockSpan],
    views: bool = True,
) -> Records:
    """Blocks ``first..`` of a verified header into record columns (``data`` starts at
    ``base``): one :class:`Chunk` per block (more where a time floor cuts records out).

    Appends each block's :class:`BlockSpan` to ``spans`` and, with ``blocks`` (a list),
    its :class:`BlockAudit`.
    """
    view = memoryview(data)
    chunks: list[Chunk] = []
    topic, key = note.topic, note.key
    floor = start.min_timestamp
    for bi in range(first, header.block_count):
        e = header.entries[bi]
        block = view[e.offset - base : e.offset - base + e.length]
        bh = verify_batch_block(block, e, index=bi)
        if blocks is None:
            ts, keys, values, hdrs = decode_columns(block, bh, views=views)
        else:
            (ts, keys, values, hdrs), crc = decode_columns_with_crc(block, bh, views=views)
        whole = Chunk(
            topic, partition, offset, key, bi, 0, ts, keys, values, hdrs,
            bh.producer_id, bh.epoch, bh.sequence,
        )  # fmt: skip
        skip = start.record if bi == start.block else 0
        if skip > len(ts):
            raise _no_such_record(note, partition, offset, start, header.block_count, len(ts))
        parts = [whole.part(skip, len(ts))] if skip < len(ts) else []
        if floor is not None and parts and min(ts) < floor:
            parts = _at_or_after(parts[0], floor)
        count = sum(p.length for p in parts)
        chunks.extend(parts)
        if count:
            spans.append(BlockSpan(bi, bh.producer_id, bh.epoch, bh.sequence, count))
        if blocks is not None and count:
            blocks.append(
                BlockAudit(bi, bh.producer_id, bh.epoch, bh.sequence, count, crc, bh.min_timestamp)
            )
    return Records(chunks)


def _no_such_record(
    note: Notification,
    partition: int,
    offset: int,
    start: Start,
    blocks: int,
    records: int | None = None,
) -> InvalidPositionError:
    """A start position past the end of its object (or of its block): one line."""
    what = (
        f"its block {start.block} has {records} records"
        if records is not None
        else f"it has {blocks} blocks"
    )
    return InvalidPositionError(
        f"{note.topic}[{partition}] offset {offset}: there is no record "
        f"{partition}:{offset}:{start.block}:{start.record}, {what} (object {note.key}); "
        "start at an id a consumer handed out, or at an offset"
    )


def _at_or_after(chunk: Chunk, floor: int) -> list[Chunk]:
    """The runs of ``chunk``'s records with timestamp >= ``floor`` (rare: after a
    seek to a time, in the first object)."""
    keep = [t >= floor for t in chunk.timestamps]
    out: list[Chunk] = []
    i, n = 0, len(keep)
    while i < n:
        if not keep[i]:
            i += 1
            continue
        j = i
        while j < n and keep[j]:
            j += 1
        out.append(chunk.part(i, j))
        i = j
    return out
