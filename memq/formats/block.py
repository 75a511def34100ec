"""Producer block: what one WRITE request carries (pure, no I/O).

A block is a fixed 56-byte header followed by a body. The body is the block's
records encoded as one msgpack array, then compressed. The header's CRC-32 covers
every byte of the block except the CRC field itself, so a flipped bit anywhere is
detected. Brokers check blocks with :func:`verify_block` (one CRC pass, no
record decoding); readers call :func:`decode_records`.

Layout (big-endian)::

    0   2  magic            b"MB"
    2   1  version          1 or 2 (the payload's layout)
    3   1  compression      0 none, 1 gzip, 2 zstd, 3 lz4
    4   4  crc32            CRC-32 (ISO-HDLC, zlib.crc32) of bytes [0, 4) then [8, end)
    8   8  producer_id      u64
    16  4  epoch            u32
    20  8  sequence         u64
    28  4  record_count     u32, >= 1
    32  8  min_timestamp    i64, ms since the Unix epoch
    40  8  max_timestamp    i64, >= min_timestamp
    48  4  uncompressed_len u32, body size after decompression
    52  4  body_len         u32, body size as stored
    56  .  body

Version 1's payload is one msgpack array of records, each the array ``[timestamp, key,
value, headers]``: ``timestamp`` an int (ms), ``key`` bin or nil, ``value`` bin,
``headers`` nil or an array of ``[name (str), value (bin or nil)]`` pairs. Version 2's
(the default) holds the same records as columns, the values joined behind Arrow-style
offsets, so readers slice values out instead of copying each (:mod:`memq.formats.columnar`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from memq.errors import (
    BadMagicError,
    ChecksumError,
    MalformedError,
    MessageTooLargeError,
    TruncatedError,
)
from memq.errors import UnsupportedVersionError as _UnsupportedVersion
from memq.formats.columnar import BinaryColumn, header_pairs_ok, join_columns, split_columns
from memq.formats.compression import Compression, compress, decompress
from memq.formats.crc import crc32
from memq.formats.payload import join_records

__all__ = [
    "BLOCK_FRAME",
    "BLOCK_HEADER_SIZE",
    "BLOCK_MAGIC",
    "BLOCK_VERSION",
    "BLOCK_VERSIONS",
    "DEFAULT_MAX_UNCOMPRESSED",
    "INT64_MAX",
    "INT64_MIN",
    "RECORD_OVERHEAD",
    "BinaryColumn",
    "BlockHeader",
    "Header",
    "Record",
    "check_records_fit",
    "decode_block",
    "decode_block_header",
    "decode_columns",
    "decode_columns_with_crc",
    "decode_records",
    "encode_block",
    "encode_block_parts",
    "encode_block_with_crc",
    "record_size",
    "record_too_large",
    "verify_block",
]

BLOCK_MAGIC = b"MB"
#: The version writers use unless told otherwise; readers know all of BLOCK_VERSIONS.
BLOCK_VERSION = 2
BLOCK_VERSIONS = (1, 2)
_HEADER = struct.Struct(">2sBBIQIQIqqII")
BLOCK_HEADER_SIZE = _HEADER.size  # 56
#: The most a block takes beyond its records' own bounds (a producer's ``record_size``):
#: the header and a payload's fixed part (version 2: columns byte and padding, the first
#: value and key offsets, the headers array's head: 21 bytes; version 1: the array head).
BLOCK_FRAME = BLOCK_HEADER_SIZE + 24
_CRC_START = 8
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
#: The range of a signed 64-bit integer (timestamps, Kafka longs).
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

Header = tuple[str, bytes | None]
#: A record as stored: (timestamp ms, key, value, headers).
Record = tuple[int, bytes | None, bytes, tuple[Header, ...] | None]

#: A record's bytes beside its key, value and headers, at most: version 2 blocks take 18
#: (timestamp, value offset, key offset and bitmap bit, headers entry), version 1 17
#: (msgpack's array head, int64 timestamp, nil key, bin head, nil headers); plus slack.
RECORD_OVERHEAD = 24


def record_size(key: bytes | None, value: bytes, headers: tuple[Header, ...] | None) -> int:
    """Upper bound of a record's encoded (uncompressed) size."""
    n = len(value) + RECORD_OVERHEAD
    if key is not None:
        n += len(key)
    if headers:
        # Names are str: count their UTF-8 bytes, not characters.
        n += sum(len(h[0].encode()) + (len(h[1]) if h[1] is not None else 0) + 12 for h in headers)
    return n


def record_too_large(size: int, block_limit: int, what: str, whose: str) -> MessageTooLargeError:
    """The one error for a record over the largest a topic takes (its max_block_bytes less
    the block framing, before compression), whichever way it came in: ``what`` names the
    record ("a record", "record 3"), ``whose`` the topic ("topic 't'", "this topic")."""
    return MessageTooLargeError(
        f"{what} of {size} bytes is over the largest record {whose} takes: "
        f"{block_limit - BLOCK_FRAME} bytes of key, value and headers (its max_block_bytes "
        f"{block_limit} less {BLOCK_FRAME} of block framing)"
    )


def check_records_fit(records: Sequence[Record], block_limit: int, whose: str) -> None:
    """:func:`record_too_large` for the first record of ``records`` over the limit."""
    for i, (_, k, v, h) in enumerate(records):
        if (size := record_size(k, v, h)) + BLOCK_FRAME > block_limit:
            raise record_too_large(size, block_limit, f"record {i}", whose)


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """The decoded fixed header of a producer block."""

    compression: Compression
    crc: int
    producer_id: int
    epoch: int
    sequence: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    uncompressed_length: int
    body_length: int
    version: int = BLOCK_VERSION

    @property
    def size(self) -> int:
        """Total encoded size of the block (header + body)."""
        return BLOCK_HEADER_SIZE + self.body_length


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise MalformedError(f"block {name} must be an int in [{lo}, {hi}], got {value!r}")


def encode_block(
    records: Sequence[Record] | Sequence[Sequence[Any]],
    *,
    producer_id: int,
    epoch: int,
    sequence: int,
    compression: Compression = Compression.ZSTD,
    min_timestamp: int | None = None,
    max_timestamp: int | None = None,
    version: int = BLOCK_VERSION,
) -> bytes:
    """Encode ``records`` into one block of format ``version`` (1 or 2).

    ``min_timestamp``/``max_timestamp`` may be given when the caller already tracked
    them (the producer does); otherwise they are computed.
    """
    return _encode(
        records, producer_id, epoch, sequence, compression, min_timestamp, max_timestamp, version
    )[0]


def encode_block_with_crc(
    records: Sequence[Record] | Sequence[Sequence[Any]],
    *,
    producer_id: int,
    epoch: int,
    sequence: int,
    compression: Compression = Compression.ZSTD,
    min_timestamp: int | None = None,
    max_timestamp: int | None = None,
    version: int = BLOCK_VERSION,
) -> tuple[bytes, int]:
    """:func:`encode_block` plus the CRC-32 of the uncompressed record payload.

    That CRC (the audit records' ``content_crc``) is what a reader computes after
    decompression with :func:`decode_columns_with_crc`.
    """
    block, raw = _encode(
        records, producer_id, epoch, sequence, compression, min_timestamp, max_timestamp, version
    )
    return block, crc32(raw)


def _encode(
    records: Sequence[Record] | Sequence[Sequence[Any]],
    producer_id: int,
    epoch: int,
    sequence: int,
    compression: Compression,
    min_timestamp: int | None,
    max_timestamp: int | None,
    version: int,
) -> tuple[bytes, bytes]:
    if not records:
        raise MalformedError("a block needs at least one record")
    if version == 2:
        try:
            ts, keys, values, hdrs = zip(*records, strict=True)
        except (TypeError, ValueError):
            raise MalformedError("records must be [timestamp, key, value, headers]") from None
        raw, least, greatest = _join_v2(ts, keys, values, hdrs, checked=False)
    else:
        _check_version(version)
        raw = _pack(records)
        least = greatest = 0
        if min_timestamp is None or max_timestamp is None:
            stamps = [r[0] for r in records]
            least, greatest = min(stamps), max(stamps)
    if min_timestamp is None or max_timestamp is None:
        min_timestamp, max_timestamp = least, greatest
    head, body = _frame(
        raw,
        len(records),
        producer_id,
        epoch,
        sequence,
        compression,
        min_timestamp,
        max_timestamp,
        version,
    )
    return head + body, raw


def _check_version(version: int) -> None:
    if version not in BLOCK_VERSIONS:
        raise MalformedError(f"block version must be one of {BLOCK_VERSIONS}, got {version!r}")


def _as_bytes(column: Sequence[Any], what: str, nullable: bool) -> Sequence[Any]:
    """``column`` with bytes-like items as ``bytes`` (a ``memoryview``'s ``len`` need not
    be its size in bytes); anything else is a :class:`MalformedError`."""
    kinds = set(map(type, column))
    if kinds <= ({bytes, type(None)} if nullable else {bytes}):
        return column
    out: list[bytes | None] = []
    for v in column:
        if v is None and nullable:
            out.append(None)
        elif isinstance(v, bytes | bytearray | memoryview):
            out.append(bytes(v))
        else:
            raise MalformedError(f"a record {what} must be bytes, got {type(v).__name__}")
    return out


def _check_headers(headers: Sequence[Any]) -> None:
    for h in headers:
        if not header_pairs_ok(h, decoded=False):
            raise MalformedError(
                f"record headers must be (name: str, value: bytes | None) pairs, got {h!r:.80}"
            )


def _join_v2(
    timestamps: Sequence[Any],
    keys: Sequence[Any],
    values: Sequence[Any],
    headers: Sequence[Any],
    *,
    checked: bool,
) -> tuple[bytes, int, int]:
    """A version 2 payload; unless ``checked``, every column's types are checked first."""
    if not checked:
        if set(map(type, timestamps)) != {int}:
            raise MalformedError("record timestamps must be ints (ms since the Unix epoch)")
        values = _as_bytes(values, "value", False)
        keys = _as_bytes(keys, "key", True)
    if headers.count(None) != len(headers):
        _check_headers(headers)
    return join_columns(timestamps, keys, values, headers)


def encode_block_parts(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes],
    headers: Sequence[tuple[Header, ...] | None],
    *,
    producer_id: int,
    epoch: int,
    sequence: int,
    compression: Compression = Compression.ZSTD,
    checked: bool = False,
    version: int = BLOCK_VERSION,
) -> tuple[bytes, bytes | memoryview, bytes]:
    """The block of records given column by column (equal-length sequences), as
    ``(header, body, raw)``: the 56-byte header, the body, and the uncompressed record
    payload (``body`` itself without compression). ``header + body`` is byte for byte
    what :func:`encode_block` makes of the same records; keeping the two parts apart
    lets a sender write them without joining them (a copy of the body).

    Records without headers (the common case) are encoded without a tuple per record
    or msgpack's buffer: the payload is joined once from the values and a few distinct
    byte strings (each record's array header, timestamp, key and bin header, cached
    per distinct timestamp and length), in C-level loops. Others go through msgpack.
    ``checked``: the caller guarantees values are ``bytes``, keys ``bytes`` or None
    and timestamps ``int`` (not ``bool``; the producer's ``produce()`` and
    ``produce_batch()`` make sure), so their types are not checked again. A caller that
    breaks this gets a corrupt block with a valid CRC (a ``memoryview`` value of wider
    items gets a wrong length; ``True`` and ``1`` share one encoding): leave it False.
    """
    n = len(values)
    if not n:
        raise MalformedError("a block needs at least one record")
    if not len(timestamps) == len(keys) == len(headers) == n:
        raise MalformedError(
            f"record columns differ in length: {len(timestamps)} timestamps, {len(keys)} "
            f"keys, {n} values, {len(headers)} headers"
        )
    _check_version(version)
    joined = None
    if version == 2:
        joined = _join_v2(timestamps, keys, values, headers, checked=checked)
    elif headers.count(None) == n and (
        checked or (set(map(type, values)) == {bytes} and set(map(type, timestamps)) == {int})
    ):
        joined = join_records(timestamps, keys, values, checked=checked)
    if joined is not None:
        raw, min_timestamp, max_timestamp = joined
    else:
        min_timestamp, max_timestamp = min(timestamps), max(timestamps)
        raw = _pack(list(zip(timestamps, keys, values, headers, strict=True)))
    head, body = _frame(
        raw, n, producer_id, epoch, sequence, compression, min_timestamp, max_timestamp, version
    )
    return head, body, raw


def _pack(records: Sequence[Any]) -> bytes:
    """The msgpack payload of ``records`` (tuples), by msgpack itself."""
    try:
        raw: bytes = msgpack.packb(records, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise MalformedError(f"records cannot be encoded: {e}") from None
    return raw


def _frame(
    raw: bytes,
    count: int,
    producer_id: int,
    epoch: int,
    sequence: int,
    compression: Compression,
    min_timestamp: int,
    max_timestamp: int,
    version: int = BLOCK_VERSION,
) -> tuple[bytes, bytes | memoryview]:
    """The header (with its CRC) and the body of a block whose record payload is ``raw``."""
    _check_range("producer_id", producer_id, 0, _U64)
    _check_range("epoch", epoch, 0, _U32)
    _check_range("sequence", sequence, 0, _U64)
    if count > _U32:
        raise MalformedError(f"too many records for one block: {count}")
    _check_range("min_timestamp", min_timestamp, INT64_MIN, INT64_MAX)
    _check_range("max_timestamp", max_timestamp, min_timestamp, INT64_MAX)
    if len(raw) > _U32:
        raise MalformedError(f"block body of {len(raw)} bytes exceeds the 4 GiB format limit")
    body = compress(compression, raw)
    if len(body) >= len(raw) and compression != Compression.NONE:
        # A codec that does not shrink the payload (incompressible values) would only
        # cost the reader a decompression, and could push the block over a size limit
        # its records fit: the block is stored uncompressed instead.
        body, compression = raw, Compression.NONE
    rest = _HEADER.pack(
        BLOCK_MAGIC,
        version,
        compression,
        0,
        producer_id,
        epoch,
        sequence,
        count,
        min_timestamp,
        max_timestamp,
        len(raw),
        len(body),
    )
    crc = crc32(body, crc32(memoryview(rest)[_CRC_START:], crc32(rest[:4])))
    return b"".join((rest[:4], crc.to_bytes(4, "big"), rest[_CRC_START:])), body


def decode_block_header(
    buf: bytes | bytearray | memoryview, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> BlockHeader:
    """Decode and validate the fixed header (no CRC check: see :func:`verify_block`)."""
    if len(buf) < BLOCK_HEADER_SIZE:
        raise TruncatedError(
            f"block header needs {BLOCK_HEADER_SIZE} bytes, only {len(buf)} available"
        )
    (magic, version, codec, crc, pid, epoch, seq, count, tmin, tmax, ulen, blen) = (
        _HEADER.unpack_from(buf)
    )
    if magic != BLOCK_MAGIC:
        raise BadMagicError(f"not a MemQ producer block: magic {bytes(magic)!r}, want b'MB'")
    if version not in BLOCK_VERSIONS:
        raise _UnsupportedVersion(
            f"producer block version {version} is not supported (this reader knows "
            f"{', '.join(map(str, BLOCK_VERSIONS))}): upgrade the reader"
        )
    try:
        compression = Compression(codec)
    except ValueError:
        raise MalformedError(f"unknown compression id {codec} in block header") from None
    if count == 0:
        raise MalformedError("block header says it holds 0 records")
    if tmin > tmax:
        raise MalformedError(f"block min_timestamp {tmin} is after max_timestamp {tmax}")
    if ulen > max_uncompressed:
        raise MalformedError(
            f"block expands to {ulen} bytes, over the {max_uncompressed}-byte limit"
        )
    if compression is Compression.NONE and ulen != blen:
        raise MalformedError(f"uncompressed block with body {blen} bytes but length {ulen}")
    return BlockHeader(compression, crc, pid, epoch, seq, count, tmin, tmax, ulen, blen, version)


def verify_block(
    buf: bytes | bytearray | memoryview,
    *,
    exact: bool = True,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> BlockHeader:
    """Validate a block's header and CRC without decoding its records.

    With ``exact`` the buffer must hold exactly one block; otherwise it may continue
    past the block's end.
    """
    header = decode_block_header(buf, max_uncompressed=max_uncompressed)
    end = header.size
    if len(buf) < end:
        raise TruncatedError(f"block needs {end} bytes, only {len(buf)} available")
    if exact and len(buf) != end:
        raise MalformedError(f"{len(buf) - end} unexpected bytes after a {end}-byte block")
    view = memoryview(buf)
    crc = crc32(view[_CRC_START:end], crc32(view[:4]))
    if crc != header.crc:
        raise ChecksumError(
            f"block CRC mismatch: stored {header.crc:#010x}, computed {crc:#010x} "
            f"(producer {header.producer_id} sequence {header.sequence})"
        )
    return header


def _bad_record(i: int, r: object) -> MalformedError:
    return MalformedError(
        f"record {i} of the block is not [timestamp, key, value, headers]: {r!r:.80}"
    )


_NONE = type(None)
_KEY_TYPES = frozenset({bytes, _NONE})
_HEADERS_TYPES = frozenset({tuple, _NONE})

#: A block's records column by column: timestamps, keys, values, headers.
#: Tuples; with ``views`` (version 2) the timestamps are an ``array('q')`` and the values
#: a :class:`BinaryColumn`.
Columns = tuple[Sequence[int], tuple[bytes | None, ...], Sequence[bytes], tuple[Any, ...]]


def _payload(buf: bytes | bytearray | memoryview, header: BlockHeader) -> Any:
    """The uncompressed record payload."""
    body = memoryview(buf)[BLOCK_HEADER_SIZE : header.size]
    return decompress(header.compression, body, header.uncompressed_length)


def _unpack_raw(raw: Any, header: BlockHeader) -> tuple[Any, ...]:
    try:
        recs = msgpack.unpackb(raw, use_list=False, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises assorted ValueError/TypeError subclasses
        raise MalformedError(f"block body is not valid msgpack: {type(e).__name__}: {e}") from None
    if type(recs) is not tuple or len(recs) != header.record_count:
        got = len(recs) if type(recs) is tuple else type(recs).__name__
        raise MalformedError(f"block header says {header.record_count} records, body has {got}")
    return recs


def _first_bad(recs: tuple[Any, ...], header: BlockHeader) -> MalformedError:
    """The precise error for a block that failed the bulk checks (slow path, rare)."""
    tmin, tmax = header.min_timestamp, header.max_timestamp
    for i, r in enumerate(recs):
        if (
            type(r) is not tuple
            or len(r) != 4
            or type(r[0]) is not int
            or not tmin <= r[0] <= tmax
            or type(r[2]) is not bytes
            or (r[1] is not None and type(r[1]) is not bytes)
        ):
            return _bad_record(i, r)
        if not header_pairs_ok(r[3]):
            return _bad_record(i, r)
    return MalformedError("block records are malformed")


def decode_columns(
    buf: bytes | bytearray | memoryview, header: BlockHeader, *, views: bool = False
) -> Columns:
    """Decode a verified block's records column-wise, every record's shape and types checked.

    Version 1: the checks run in C (``map``, ``zip``, ``set``, ``min``/``max``), not in a
    Python loop per record; only a block that fails them is walked record by record for
    the error. Version 2: lengths and offsets are checked, then ``views`` gives the values
    as a :class:`BinaryColumn` over the payload (no copy per value) instead of a tuple,
    where ``buf`` is ``bytes`` or a read-only view (of a buffer that must not change
    while the values live).
    """
    return _decode(_payload(buf, header), header, views and _immutable(buf))


def _immutable(buf: bytes | bytearray | memoryview) -> bool:
    """Whether ``buf`` is bytes, or a view of bytes, or a read-only view (whose owner
    keeps its bytes as they are while any view of them lives, as the consumer's receive
    buffers do): values may then be views into it; a writable buffer's are copied (the
    caller may change or reuse it)."""
    return type(buf) is bytes or (
        type(buf) is memoryview and (buf.readonly or type(buf.obj) is bytes)
    )


def decode_columns_with_crc(
    buf: bytes | bytearray | memoryview, header: BlockHeader, *, views: bool = False
) -> tuple[Columns, int]:
    """:func:`decode_columns` plus the CRC-32 of the uncompressed record payload."""
    raw = _payload(buf, header)
    return _decode(raw, header, views and _immutable(buf)), crc32(raw)


def _decode(raw: Any, header: BlockHeader, views: bool) -> Columns:
    if header.version == 1:
        return _columns(_unpack_raw(raw, header), header)
    ts, keys, values, hdrs = split_columns(
        raw, header.record_count, header.min_timestamp, header.max_timestamp
    )
    return (ts, keys, values, hdrs) if views else (tuple(ts), keys, values.materialize(), hdrs)


def _columns(recs: tuple[Any, ...], header: BlockHeader) -> Columns:
    # Transposing checks the shape: four columns only if every record has exactly four
    # items (``strict``); a record that is not a tuple (msgpack makes bytes, str or a map
    # of one) then puts a wrong type into the timestamp, key or value column, so the type
    # checks below catch it without a pass over the records of their own.
    try:
        cols = tuple(zip(*recs, strict=True))
    except (TypeError, ValueError):
        raise _first_bad(recs, header) from None
    if len(cols) != 4:
        raise _first_bad(recs, header)
    ts, keys, values, hdrs = cols
    n = len(ts)
    # Keys and headers are mostly all None: counting them (identity, in C) is cheapest.
    no_keys = keys.count(None) == n
    no_headers = hdrs.count(None) == n
    header_types = {_NONE} if no_headers else set(map(type, hdrs))
    if (
        set(map(type, ts)) != {int}
        or min(ts) < header.min_timestamp
        or max(ts) > header.max_timestamp
        or set(map(type, values)) != {bytes}
        or not (no_keys or set(map(type, keys)) <= _KEY_TYPES)
        or not header_types <= _HEADERS_TYPES
    ):
        raise _first_bad(recs, header)
    if tuple in header_types and not all(map(header_pairs_ok, hdrs)):  # (rare: present)
        raise _first_bad(recs, header)
    return ts, keys, values, hdrs


def decode_records(buf: bytes | bytearray | memoryview, header: BlockHeader) -> list[Record]:
    """Decode the records of a block already checked by :func:`verify_block`."""
    ts, keys, values, hdrs = decode_columns(buf, header)
    return list(zip(ts, keys, values, hdrs, strict=True))


def decode_block(
    buf: bytes | bytearray | memoryview, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> tuple[BlockHeader, list[Record]]:
    """Verify one whole block and decode its records."""
    header = verify_block(buf, max_uncompressed=max_uncompressed)
    return header, decode_records(buf, header)
