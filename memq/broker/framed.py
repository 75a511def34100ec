"""The receiving half of a broker connection, for both of its protocols: frames received
straight into their buffers (``asyncio.BufferedProtocol`` over a
:class:`memq.formats.frames.PrefixedReceiver`), queued in arrival order, with read flow
control. What a frame means, and when the queue is emptied, is the subclass's business
(:class:`memq.broker.connection.BrokerConnection` for MemQ's protocol,
:class:`memq.broker.kafka_stream.KafkaStream` for the Kafka port).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Generic, TypeVar

from memq.errors import MemqFormatError
from memq.formats.frames import PrefixedReceiver

__all__ = ["FramedProtocol"]

F = TypeVar("F")


class FramedProtocol(asyncio.BufferedProtocol, Generic[F]):
    """Frames of one connection in arrival order (``_frames``); it stops reading while
    more than ``read_limit`` bytes of them wait, and for good once a length prefix is
    refused (``broken``: the frames before it are still there to handle)."""

    def __init__(self, receiver: PrefixedReceiver[F], read_limit: int) -> None:
        self.receiver = receiver
        self.read_limit = read_limit
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._frames: deque[F] = deque()
        self._queued = 0  # bytes of the frames in _frames
        self._eof = False  # the peer closed it: handle what already arrived, then stop
        self._last_rx = 0.0  # (monotonic) when bytes last arrived
        self._reading_paused = False
        self._wake = asyncio.Event()  # set when frames arrive or the stream ends

    @property
    def broken(self) -> MemqFormatError | None:
        """Why the byte stream is lost (a refused length prefix), or None."""
        return self.receiver.broken

    def _frame_bytes(self, frame: F) -> int:
        """What one queued frame counts against ``read_limit``."""
        raise NotImplementedError

    # --- asyncio.BufferedProtocol -------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._last_rx = time.monotonic()
        frames = self.receiver.received(nbytes)
        if frames:
            self._frames.extend(frames)
            self._queued += sum(map(self._frame_bytes, frames))
            self._wake.set()
        if self.receiver.broken is not None:  # a bad length prefix: the stream is lost
            self._pause_reading()
            self._wake.set()
        elif self._queued > self.read_limit:
            self._pause_reading()

    # --- flow control -------------------------------------------------------------------

    def _next_frame(self) -> F:
        frame = self._frames.popleft()
        self._queued -= self._frame_bytes(frame)
        return frame

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        """Read again (never once the stream is broken)."""
        if self._reading_paused and self.transport is not None and self.broken is None:
            self._reading_paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
