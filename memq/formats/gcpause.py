"""Pause the cyclic garbage collector while bulk-decoding records (pure, no I/O).

Decoding a batch object allocates one tuple per record (msgpack arrays) and, in the
consumer, one ``Message`` per record. None of them can form a reference cycle, but each
allocation counts towards CPython's generation-0 threshold (700), so a 8 MiB object
triggers a dozen young collections that traverse every live tuple, and the older
generations' passes then walk the whole prefetch window again: measured at about half
of ``spark.decode.decode_object``'s time. Reference counting still frees everything
while the collector is paused; the first collection after the pause untracks the
atomic-only tuples once.

The pause is process-wide (``gc.disable``) and nests across threads: the first entry
disables, the last exit restores what it found. A process that disabled GC itself
keeps it disabled.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


class _Pause:
    """Nesting counter behind :func:`gc_paused` (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.depth += 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.was_enabled:
                gc.enable()


_PAUSE = _Pause()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic GC off (reference counting keeps freeing memory)."""
    _PAUSE.enter()
    try:
        yield
    finally:
        _PAUSE.exit()
