"""Block body codecs: none, gzip, zstd, lz4 (pure, bounded).

Every ``decompress`` call is bounded by the uncompressed length the block header
announces, which the caller has already checked against its own limit: a hostile
header cannot make us allocate more than that limit.
"""

from __future__ import annotations

import threading
import zlib
from enum import IntEnum

import lz4.block
import zstandard

from memq.errors import CompressionError, MalformedError

__all__ = ["Compression", "compress", "decompress", "parse_compression"]


class Compression(IntEnum):
    """Codec ids as stored in the block header. Wire constants: never renumber."""

    NONE = 0
    GZIP = 1
    ZSTD = 2
    LZ4 = 3


_NAMES = {c.name.lower(): c for c in Compression}

GZIP_LEVEL = 6
ZSTD_LEVEL = 3

_local = threading.local()


def parse_compression(value: str | int | Compression) -> Compression:
    """Accept ``"zstd"``, ``"ZSTD"``, ``2`` or ``Compression.ZSTD``."""
    if isinstance(value, Compression):
        return value
    if isinstance(value, int):
        try:
            return Compression(value)
        except ValueError:
            raise MalformedError(f"unknown compression id {value}") from None
    try:
        return _NAMES[value.strip().lower()]
    except KeyError:
        raise MalformedError(
            f"unknown compression {value!r}: use one of {', '.join(_NAMES)}"
        ) from None


def _zstd_compressor() -> zstandard.ZstdCompressor:
    # zstandard contexts are not thread-safe: one per thread, reused across calls.
    c: zstandard.ZstdCompressor | None = getattr(_local, "zc", None)
    if c is None:
        c = _local.zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """Compress ``data`` with ``codec``. ``NONE`` returns the input unchanged (no copy)."""
    if codec is Compression.NONE:
        return data if isinstance(data, bytes | memoryview) else memoryview(data)
    if codec is Compression.ZSTD:
        return _zstd_compressor().compress(data)
    if codec is Compression.LZ4:
        out: bytes = lz4.block.compress(data, store_size=False)
        return out
    if codec is Compression.GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: gzip container
        return c.compress(data) + c.flush()
    raise MalformedError(f"unknown compression {codec!r}")


def decompress(codec: Compression, data: bytes | memoryview, size: int) -> bytes | memoryview:
    """Decompress ``data`` that must expand to exactly ``size`` bytes.

    Raises :class:`CompressionError` when the data is not valid for the codec or
    does not expand to exactly ``size`` bytes; never allocates more than ``size``
    (plus codec constant overhead).
    """
    if codec is Compression.NONE:
        if len(data) != size:
            raise CompressionError(
                f"uncompressed body is {len(data)} bytes but the header says {size}"
            )
        return data
    try:
        if codec is Compression.ZSTD:
            params = zstandard.get_frame_parameters(data)
            if params.content_size != size:
                raise CompressionError(
                    f"zstd frame announces {params.content_size} bytes, header says {size}"
                )
            out: bytes = _zstd_decompressor().decompress(data, max_output_size=size)
        elif codec is Compression.LZ4:
            out = lz4.block.decompress(data, uncompressed_size=size)
        elif codec is Compression.GZIP:
            d = zlib.decompressobj(31)
            out = d.decompress(data, size)
            if not d.eof or d.unconsumed_tail or d.unused_data:
                raise CompressionError(
                    f"gzip body does not end after {size} bytes of output as the header says"
                )
        else:
            raise MalformedError(f"unknown compression {codec!r}")
    except (zstandard.ZstdError, zlib.error, lz4.block.LZ4BlockError) as e:
        raise CompressionError(f"{codec.name.lower()} body does not decompress: {e}") from None
    if len(out) != size:
        raise CompressionError(
            f"{codec.name.lower()} body expands to {len(out)} bytes, header says {size}"
        )
    return out
