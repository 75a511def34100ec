"""Fetching batch objects straight from storage, verified, decoded into messages.

Runs in the consumer's fetch pool, so GETs, checksum checks and decoding overlap the
application's processing. A fetch that starts mid-object (after a seek) range-reads the
header and then only the blocks it needs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import NamedTuple

from memq.consumer.message import Message
from memq.errors import CorruptObjectError, MemqFormatError
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
    """One block's run of messages in :attr:`FetchedObject.messages`, with its id."""

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
    messages: list[Message]
    bytes_read: int
    seconds: float
    #: Per block, when fetched with ``audit=True``.
    blocks: list[BlockAudit] = field(default_factory=list)
    #: Per block with messages, in order: where its messages are (for dedup).
    spans: list[BlockSpan] = field(default_factory=list)


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
) -> FetchedObject:
    """GET (part of) one object, verify it against its notification, decode its records."""
    t0 = clock()
    start = start or Start()
    try:
        if start.block == 0 and start.min_timestamp is None:
            data = reader.read(note.bucket, note.key)
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
            if start.min_timestamp is not None:  # skip whole blocks older than the floor
                while (
                    first < header.block_count
                    and header.entries[first].max_timestamp < start.min_timestamp
                ):
                    first += 1
            if first >= header.block_count:
                return FetchedObject(note, partition, offset, [], hlen, clock() - t0)
            base = header.entries[first].offset
            data = reader.read(note.bucket, note.key, base, header.object_size)
            nbytes = hlen + len(data)
        blocks: list[BlockAudit] | None = [] if audit else None
        spans: list[BlockSpan] = []
        with gc_paused():
            messages = _decode(
                data, header, base, first, note, partition, offset, start, blocks, spans
            )
    except CorruptObjectError:
        raise
    except MemqFormatError as e:
        raise CorruptObjectError(f"object {note.key} is corrupt: {e}", key=note.key) from e
    return FetchedObject(
        note, partition, offset, messages, nbytes, clock() - t0, blocks or [], spans
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
) -> list[Message]:
    """Blocks ``first..`` of a verified header into Messages (``data`` starts at ``base``).

    Appends each block's :class:`BlockSpan` to ``spans`` and, with ``blocks`` (a list),
    its :class:`BlockAudit`.
    """
    view = memoryview(data)
    messages: list[Message] = []
    make = functools.partial(tuple.__new__, Message)
    topic, key = note.topic, note.key
    floor = start.min_timestamp
    for bi in range(first, header.block_count):
        e = header.entries[bi]
        block = view[e.offset - base : e.offset - base + e.length]
        bh = verify_batch_block(block, e, index=bi)
        if blocks is None:
            ts, keys, values, hdrs = decode_columns(block, bh)
        else:
            (ts, keys, values, hdrs), crc = decode_columns_with_crc(block, bh)
        skip = start.record if bi == start.block else 0
        n = len(ts)
        # One C-level pass builds the block's Message tuples (no per-record bytecode).
        rows = zip(
            repeat(topic, n),
            repeat(partition, n),
            repeat(offset, n),
            repeat(bi, n),
            range(n),
            ts,
            keys,
            values,
            hdrs,
            repeat(bh.producer_id, n),
            repeat(bh.epoch, n),
            repeat(bh.sequence, n),
            repeat(key, n),
            strict=True,
        )
        block_messages = list(map(make, islice(rows, skip, None)))
        if floor is not None and min(ts) < floor:
            block_messages = [m for m in block_messages if m.timestamp >= floor]
        messages.extend(block_messages)
        if block_messages:
            spans.append(BlockSpan(bi, bh.producer_id, bh.epoch, bh.sequence, len(block_messages)))
        if blocks is not None and block_messages:
            blocks.append(
                BlockAudit(
                    bi, bh.producer_id, bh.epoch, bh.sequence, len(block_messages), crc,
                    bh.min_timestamp,
                )
            )  # fmt: skip
    return messages
