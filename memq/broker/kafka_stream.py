"""The byte stream of one Kafka-port connection: requests received straight into their
buffers (``asyncio.BufferedProtocol``: a large Produce costs no user-space copy on the
way in), in order, with read and write flow control. What a request means is
:class:`memq.broker.kafka_connection.KafkaConnection`'s business.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from memq.broker.framed import FramedProtocol
from memq.broker.kafka_codec import KafkaFrameReceiver

__all__ = ["READ_LIMIT", "KafkaStream"]

#: Bytes of received, unhandled requests at which a connection stops reading.
READ_LIMIT = 4 << 20


class KafkaStream(FramedProtocol[memoryview]):
    """Requests of one connection, in order (:meth:`read_frame`); it stops reading while
    ``READ_LIMIT`` bytes of received requests wait."""

    def __init__(
        self, max_frame_bytes: int, take: Callable[[int], memoryview | None] | None = None
    ) -> None:
        super().__init__(KafkaFrameReceiver(max_frame_bytes, take), READ_LIMIT)
        self._reset = False  # the connection was reset (not closed cleanly)
        self._drained: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._closed = False

    def _frame_bytes(self, frame: memoryview) -> int:
        return len(frame)

    # --- asyncio.Protocol ---------------------------------------------------------------

    def eof_received(self) -> bool:
        # Requests already received are still answered: keep the sending half open
        # (a TLS transport cannot half-close: it closes, answers are lost as before).
        self._eof = True
        self._wake.set()
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        # Reset (exc): requests not yet handled are dropped, as a stream reader does; the
        # client resends what it has no answer for.
        self._reset = exc is not None
        self._wake.set()
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def _drain(self) -> None:
        if self._writing_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def _closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def _drop(self, what: str, kind: str) -> None:
        """Stop reading requests: ``what`` went wrong (``kind``: its metric label)."""
        self._closed = True

    async def read_frame(self, idle: float) -> memoryview | None:
        """The next request (None: stop); the connection is dropped when no byte of it
        arrives for ``idle`` seconds."""
        start = time.monotonic()
        while not self._frames or self._reset:
            if self._closed or self._reset:
                return None
            if self.broken is not None:
                self._drop(str(self.broken), "too_large")
                return None
            if self._eof:
                if self.receiver.buffered:
                    self._drop(f"a truncated request ({self.receiver.buffered} bytes)", "corrupt")
                return None  # (else a clean close between requests)
            self._resume_reading()
            left = max(start, self._last_rx) + idle - time.monotonic()
            if left <= 0:
                self._drop(f"no request bytes for {idle:.0f} s", "idle_timeout")
                return None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)
        frame = self._next_frame()
        if self._queued <= READ_LIMIT // 2:
            self._resume_reading()
        return frame
