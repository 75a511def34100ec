"""Batch object: one S3 object holding many producer blocks byte-for-byte (pure, no I/O).

Layout (big-endian)::

    0   4   magic          b"MEMQ"
    4   1   version        1
    5   1   flags          0 (reserved)
    6   2   reserved       0
    8   4   header_length  20 + 36 * block_count: bytes from 0 through header_crc
    12  4   block_count    >= 1
    16  36n index          per block: offset u64 (from object start), length u32,
                           crc u32 (the block's own CRC), record_count u32,
                           min_timestamp i64, max_timestamp i64
    ..  4   header_crc     CRC-32 of bytes [0, header_length - 4)
    ..      blocks         back to back, block i at index[i].offset

Blocks are contiguous: block 0 starts at ``header_length`` and each next block starts
where the previous one ends; the object ends with the last block. The header CRC
covers every block's CRC, so ``header_crc`` identifies the whole object's content and
is the ``checksum`` carried by notifications.

A reader range-reads the first :data:`BATCH_PREFIX_SIZE` bytes, learns
``header_length`` (:func:`batch_header_length`), reads the rest of the header, then any
single block by its (offset, length).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from memq.errors import (
    BadMagicError,
    ChecksumError,
    MalformedError,
    MemqFormatError,
    TruncatedError,
    UnsupportedVersionError,
)
from memq.formats.block import (
    DEFAULT_MAX_UNCOMPRESSED,
    BlockHeader,
    Record,
    decode_records,
    verify_block,
)
from memq.formats.crc import crc32

__all__ = [
    "BATCH_MAGIC",
    "BATCH_PREFIX_SIZE",
    "BATCH_VERSION",
    "DEFAULT_MAX_BLOCKS",
    "BatchBuilder",
    "BatchHeader",
    "IndexEntry",
    "batch_header_length",
    "batch_header_size",
    "decode_batch",
    "decode_batch_header",
    "encode_batch",
    "encode_batch_header",
    "iter_batch_blocks",
    "verify_batch_block",
]

BATCH_MAGIC = b"MEMQ"
BATCH_VERSION = 1
_PREFIX = struct.Struct(">4sBBHII")
BATCH_PREFIX_SIZE = _PREFIX.size  # 16
_ENTRY = struct.Struct(">QIIIqq")
_ENTRY_SIZE = _ENTRY.size  # 36
_CRC = struct.Struct(">I")
DEFAULT_MAX_BLOCKS = 65536


class IndexEntry(NamedTuple):
    """Where one block lives in the object, and what it holds."""

    offset: int
    length: int
    crc: int
    record_count: int
    min_timestamp: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded, checksum-verified header of a batch object."""

    header_length: int
    entries: tuple[IndexEntry, ...]
    crc: int
    version: int = BATCH_VERSION

    @property
    def block_count(self) -> int:
        return len(self.entries)

    @property
    def object_size(self) -> int:
        last = self.entries[-1]
        return last.offset + last.length

    @property
    def record_count(self) -> int:
        return sum(e.record_count for e in self.entries)

    @property
    def min_timestamp(self) -> int:
        return min(e.min_timestamp for e in self.entries)

    @property
    def max_timestamp(self) -> int:
        return max(e.max_timestamp for e in self.entries)


def batch_header_size(block_count: int) -> int:
    """Header bytes for ``block_count`` blocks."""
    return BATCH_PREFIX_SIZE + _ENTRY_SIZE * block_count + _CRC.size


def _entry_for(header: BlockHeader, offset: int) -> IndexEntry:
    return IndexEntry(
        offset,
        header.size,
        header.crc,
        header.record_count,
        header.min_timestamp,
        header.max_timestamp,
    )


def encode_batch_header(headers: Sequence[BlockHeader]) -> bytes:
    """Encode the header for blocks (in order) whose headers are ``headers``."""
    if not headers:
        raise MalformedError("a batch needs at least one block")
    n = len(headers)
    hlen = batch_header_size(n)
    out = bytearray(hlen)
    _PREFIX.pack_into(out, 0, BATCH_MAGIC, BATCH_VERSION, 0, 0, hlen, n)
    offset = hlen
    pos = BATCH_PREFIX_SIZE
    for h in headers:
        _ENTRY.pack_into(out, pos, *_entry_for(h, offset))
        offset += h.size
        pos += _ENTRY_SIZE
    _CRC.pack_into(out, pos, crc32(memoryview(out)[:pos]))
    return bytes(out)


def encode_batch(blocks: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """Build a whole batch object from encoded blocks (each verified first)."""
    headers = [verify_block(b) for b in blocks]
    return b"".join([encode_batch_header(headers), *blocks])


def batch_header_length(
    prefix: bytes | bytearray | memoryview, *, max_blocks: int = DEFAULT_MAX_BLOCKS
) -> int:
    """From the first :data:`BATCH_PREFIX_SIZE` bytes, the full header length to read."""
    if len(prefix) < BATCH_PREFIX_SIZE:
        raise TruncatedError(
            f"batch object needs at least {BATCH_PREFIX_SIZE} bytes, got {len(prefix)}"
        )
    magic, version, flags, reserved, hlen, count = _PREFIX.unpack_from(prefix)
    if magic != BATCH_MAGIC:
        raise BadMagicError(f"not a MemQ batch object: magic {bytes(magic)!r}, want b'MEMQ'")
    if version != BATCH_VERSION:
        raise UnsupportedVersionError(
            f"batch object version {version} is not supported (this reader knows "
            f"{BATCH_VERSION}): upgrade the reader"
        )
    if flags or reserved:
        raise MalformedError(
            f"reserved batch header bits are set: flags={flags} reserved={reserved}"
        )
    if not 1 <= count <= max_blocks:
        raise MalformedError(f"batch block count {count} is outside [1, {max_blocks}]")
    if hlen != batch_header_size(count):
        raise MalformedError(
            f"batch header length {hlen} does not match {count} blocks "
            f"(expected {batch_header_size(count)})"
        )
    return int(hlen)


def decode_batch_header(
    buf: bytes | bytearray | memoryview, *, max_blocks: int = DEFAULT_MAX_BLOCKS
) -> BatchHeader:
    """Decode and checksum-verify a batch header (``buf`` may continue past it)."""
    hlen = batch_header_length(buf, max_blocks=max_blocks)
    if len(buf) < hlen:
        raise TruncatedError(f"batch header needs {hlen} bytes, only {len(buf)} available")
    view = memoryview(buf)
    crc_pos = hlen - _CRC.size
    (stored,) = _CRC.unpack_from(view, crc_pos)
    computed = crc32(view[:crc_pos])
    if stored != computed:
        raise ChecksumError(
            f"batch header CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )
    entries = tuple(
        IndexEntry._make(e) for e in _ENTRY.iter_unpack(view[BATCH_PREFIX_SIZE:crc_pos])
    )
    expected = hlen
    for i, e in enumerate(entries):
        if e.offset != expected:
            raise MalformedError(f"batch block {i} at offset {e.offset}, expected {expected}")
        if e.record_count == 0 or e.min_timestamp > e.max_timestamp:
            raise MalformedError(f"batch index entry {i} is inconsistent: {e}")
        expected += e.length
    return BatchHeader(hlen, entries, stored)


def verify_batch_block(
    block: bytes | bytearray | memoryview,
    entry: IndexEntry,
    *,
    index: int = 0,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> BlockHeader:
    """Check that ``block`` (exactly the bytes at ``entry``) is the block the index names."""
    if len(block) != entry.length:
        raise TruncatedError(f"batch block {index} needs {entry.length} bytes, got {len(block)}")
    header = verify_block(block, max_uncompressed=max_uncompressed)
    if (
        header.crc != entry.crc
        or header.record_count != entry.record_count
        or header.min_timestamp != entry.min_timestamp
        or header.max_timestamp != entry.max_timestamp
    ):
        raise ChecksumError(f"batch block {index} does not match its index entry")
    return header


def iter_batch_blocks(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader | None = None,
    *,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> Iterator[tuple[BlockHeader, memoryview]]:
    """Yield every block of a whole batch object, each verified against the index."""
    if header is None:
        header = decode_batch_header(buf)
    view = memoryview(buf)
    if len(view) != header.object_size:
        kind = TruncatedError if len(view) < header.object_size else MalformedError
        raise kind(f"batch object is {len(view)} bytes, its header says {header.object_size}")
    for i, e in enumerate(header.entries):
        block = view[e.offset : e.offset + e.length]
        yield verify_batch_block(block, e, index=i, max_uncompressed=max_uncompressed), block


def decode_batch(
    buf: bytes | bytearray | memoryview, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> tuple[BatchHeader, list[tuple[BlockHeader, list[Record]]]]:
    """Verify a whole batch object and decode every record of every block."""
    header = decode_batch_header(buf)
    blocks = [
        (h, decode_records(b, h))
        for h, b in iter_batch_blocks(buf, header, max_uncompressed=max_uncompressed)
    ]
    return header, blocks


class BatchBuilder:
    """Appends verified blocks into a reusable buffer and seals them into a batch object.

    The buffer is preallocated once (the broker keeps a ring of builders) and reused
    after :meth:`reset`. Space for the largest header (``max_blocks``) is reserved at
    the front; :meth:`seal` writes the real header right before the first block and
    returns a view of the finished object, so no block is copied twice.
    """

    __slots__ = (
        "_buf",
        "_end",
        "_headers",
        "_reserve",
        "_sealed",
        "capacity",
        "header_crc",
        "max_blocks",
    )

    def __init__(self, capacity: int, max_blocks: int = 4096) -> None:
        if capacity <= 0 or max_blocks <= 0:
            raise MalformedError("batch capacity and max_blocks must be positive")
        self.capacity = capacity
        self.max_blocks = max_blocks
        self._reserve = batch_header_size(max_blocks)
        self._buf = bytearray(self._reserve + capacity)
        self._end = self._reserve
        self._headers: list[BlockHeader] = []
        self._sealed = False
        #: CRC of the header written by the last :meth:`seal` (the notification checksum).
        self.header_crc = 0

    @property
    def block_count(self) -> int:
        return len(self._headers)

    @property
    def size(self) -> int:
        """Bytes of blocks appended so far."""
        return self._end - self._reserve

    @property
    def record_count(self) -> int:
        return sum(h.record_count for h in self._headers)

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def headers(self) -> list[BlockHeader]:
        return self._headers

    def fits(self, nbytes: int) -> bool:
        """Whether a block of ``nbytes`` still fits (by bytes and by block count)."""
        return (
            not self._sealed
            and len(self._headers) < self.max_blocks
            and self._end + nbytes <= len(self._buf)
        )

    def append(self, block: bytes | bytearray | memoryview, header: BlockHeader) -> int:
        """Copy a verified block in; returns its index in the batch."""
        src = memoryview(block).cast("B")
        n = len(src)
        if n != header.size:
            raise MalformedError(f"block is {n} bytes, its header says {header.size}")
        if not self.fits(n):
            raise MemqFormatError(f"block of {n} bytes does not fit the open batch")
        # Into a view of the buffer: a bytearray's own slice assignment first copies any
        # source that is not a bytearray into a new one (a second copy, and a fresh
        # allocation the size of the block).
        memoryview(self._buf)[self._end : self._end + n] = src
        self._end += n
        self._headers.append(header)
        return len(self._headers) - 1

    def move_to(self, other: BatchBuilder) -> None:
        """Copy this open batch's blocks into the empty, larger ``other`` (a buffer of a
        bigger size class: batches start small and grow), leaving this one empty."""
        n = self.size
        if self._sealed or other._headers or other.capacity < n:
            raise MalformedError("can only move an open batch into a larger, empty buffer")
        if other.max_blocks < len(self._headers):
            raise MalformedError("the target buffer indexes fewer blocks than the batch has")
        # through memoryviews: slicing the bytearray itself would copy the blocks twice
        memoryview(other._buf)[other._reserve : other._reserve + n] = memoryview(self._buf)[
            self._reserve : self._end
        ]
        other._end = other._reserve + n
        other._headers = self._headers
        self.reset()

    def seal(self) -> memoryview:
        """Write the header and return the finished object (valid until :meth:`reset`)."""
        if not self._headers:
            raise MalformedError("cannot seal an empty batch")
        header = encode_batch_header(self._headers)
        start = self._reserve - len(header)
        memoryview(self._buf)[start : self._reserve] = header
        self.header_crc = int.from_bytes(header[-4:], "big")
        self._sealed = True
        return memoryview(self._buf)[start : self._end]

    def reset(self) -> None:
        """Empty the builder for reuse (the previous sealed view must be released)."""
        self._end = self._reserve
        self._headers = []
        self._sealed = False
