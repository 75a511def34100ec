"""Receive buffers reused for large reads (a consumer's whole objects, a broker's large
requests), instead of fresh memory for each.

A fetched object's bytes live as long as anything decoded from them refers to them:
a block format 2 value column, or an Arrow array handed to the application, which may
keep it for as long as it likes. A fresh 8 MiB buffer per GET is fresh memory to the
kernel, which takes a page fault per 4 KiB to map it while the bytes arrive: measured
at 0.2-0.3 CPU-seconds per GiB, about a tenth of a consumer's CPU, when the objects
outlive their GET (``benchmarks/profile_consume.py``; the allocator gives memory back
to the system between objects and maps it again).

The broker has the same problem with large requests (a producer's blocks, a Kafka
client's record sets), each received into a buffer of its own and dropped once its
blocks are copied into a batch: its connections take those buffers from here too.

So the fetcher receives into buffers it takes from here, and a buffer is reused only
when nothing but this pool refers to it. Every view of a buffer (a ``memoryview``
slice, an Arrow buffer over one) holds a reference to it, so the reference count says
exactly whether any is alive; the pool is off where the count is not exact (a
free-threaded build, another Python implementation). What it keeps is bounded: at most
``max_bytes`` of buffers, idle ones first to go when a new one would not fit.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["ReceiveBuffers"]

#: Buffers are sized in steps of this, so objects of slightly different sizes share
#: them; and objects under it are not pooled (fresh memory that small is cheap: glibc
#: keeps it in its heap instead of mapping it for each, from 128 KiB up).
_STEP = 256 << 10


def _exact_refcounts() -> bool:
    gil = getattr(sys, "_is_gil_enabled", None)
    return sys.implementation.name == "cpython" and (gil is None or bool(gil()))


class ReceiveBuffers:
    """A bounded set of reusable receive buffers (thread-safe).

    ``take(n)`` gives a writable ``memoryview`` of exactly ``n`` bytes over a buffer no
    one else refers to, or ``None`` (then the caller reads into fresh memory as usual):
    for objects under ``min_size``, where the reference counts are not exact, or when
    ``max_bytes`` would not hold one more buffer of ``n`` bytes.
    """

    def __init__(self, max_bytes: int, min_size: int = _STEP) -> None:
        self.max_bytes = max_bytes
        self.min_size = min_size
        self.enabled = _exact_refcounts()
        self._lock = threading.Lock()
        self._buffers: list[bytearray] = []  # oldest first
        self._bytes = 0
        probe = [bytearray(1)]
        #: The reference count of a buffer only its list refers to, read as below.
        self._idle_refs = sys.getrefcount(probe[0])
        self.reused = 0
        self.made = 0

    def _is_idle(self, i: int) -> bool:
        return sys.getrefcount(self._buffers[i]) == self._idle_refs

    def take(self, n: int) -> memoryview | None:
        if not self.enabled or n < self.min_size:
            return None
        with self._lock:
            best = self._best_idle(n)
            if best is not None:
                self.reused += 1
                return memoryview(self._buffers[best])[:n]
            size = -(-n // _STEP) * _STEP
            if not self._make_room(size):
                return None
            self._buffers.append(bytearray(size))
            self._bytes += size
            self.made += 1
            return memoryview(self._buffers[-1])[:n]

    def _best_idle(self, n: int) -> int | None:
        """The index of the smallest idle buffer of at least ``n`` bytes (and not much
        more: a small object does not take a big buffer a big one will want)."""
        best: int | None = None
        for i in range(len(self._buffers)):
            size = len(self._buffers[i])
            fits = n <= size <= 2 * n + _STEP
            if fits and (best is None or size < len(self._buffers[best])) and self._is_idle(i):
                best = i
        return best

    def _make_room(self, size: int) -> bool:
        """Forget buffers until ``size`` more fit: idle ones first, then the oldest in use
        (its holders keep it alive; it is simply not reused)."""
        if size > self.max_bytes:
            return False
        while self._bytes + size > self.max_bytes:
            idle = [i for i in range(len(self._buffers)) if self._is_idle(i)]
            self._bytes -= len(self._buffers.pop(idle[0] if idle else 0))
        return True

    def clear(self) -> None:
        """Let every buffer go (those still referred to live on with their holders)."""
        with self._lock:
            self._buffers.clear()
            self._bytes = 0

    @property
    def held_bytes(self) -> int:
        """Bytes of the buffers the pool keeps (idle or in use)."""
        return self._bytes
