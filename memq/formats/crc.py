"""CRC-32 (ISO-HDLC, the zlib polynomial) for every format: one function, the fastest
available.

ISA-L's SIMD implementation (the ``isal`` package) computes exactly what ``zlib.crc32``
does, same polynomial, same initial value and chaining, about 7x faster here (14 vs 2
GiB/s), which matters because every byte is checked several times on its way (block,
frame, storage checksum). Without ``isal`` the standard library's is used.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["IMPLEMENTATION", "crc32"]

try:
    from isal.isal_zlib import crc32 as _isal_crc32

    crc32: Callable[..., int] = _isal_crc32
    IMPLEMENTATION = "isal"
except ImportError:  # pragma: no cover - isal is a dependency; this is the fallback
    crc32 = zlib.crc32
    IMPLEMENTATION = "zlib"
