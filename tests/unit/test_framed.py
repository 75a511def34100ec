"""Read flow control of a broker connection's receiving half (memq.broker.framed), driven
through the Kafka port's stream: frames in arrival order, reading paused over the limit
and resumed at half of it, and never resumed once a length prefix was refused.

The transport is a stand-in that records pause/resume calls (the protocol never writes
to it here); the real sockets are in tests/integration/test_kafka_listener.py and
test_broker_protocol.py."""

from __future__ import annotations

import asyncio
import struct

import pytest

from memq.broker.kafka_stream import READ_LIMIT, KafkaStream
from memq.errors import FrameTooLargeError

MAX = 16 << 20


class _Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> None:
        return None


def _stream() -> tuple[KafkaStream, _Transport]:
    s = KafkaStream(MAX)
    t = _Transport()
    s.transport = t  # type: ignore[assignment]
    return s, t


def _feed(s: KafkaStream, data: bytes, chunk: int = 100_000) -> None:
    """Deliver ``data`` as the event loop would: into get_buffer(), at most ``chunk`` at
    a time."""
    pos = 0
    while pos < len(data):
        buf = s.get_buffer(-1)
        n = min(len(buf), chunk, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        s.buffer_updated(n)
        pos += n


def _frame(i: int, size: int) -> bytes:
    body = struct.pack(">hhi", 0, 8, i) + bytes([i % 251]) * (size - 8)
    return struct.pack(">i", len(body)) + body


def _read(s: KafkaStream) -> memoryview | None:
    return asyncio.run(s.read_frame(idle=5.0))


def test_frames_come_out_in_order_and_reading_pauses_over_the_limit_resumes_at_half() -> None:
    s, t = _stream()
    size = 1 << 20
    n = READ_LIMIT // size + 2  # one frame over the limit (and one more, still received)
    _feed(s, b"".join(_frame(i, size) for i in range(n)))
    assert t.calls == ["pause"]  # once, however many frames arrived over the limit
    got = []
    while s._frames:
        frame = _read(s)
        assert frame is not None
        got.append(struct.unpack_from(">i", frame, 4)[0])
        queued = sum(map(len, s._frames))
        assert s._queued == queued
        # resumed exactly when what waits fell to half the limit, not before
        assert ("resume" in t.calls) == (queued <= READ_LIMIT // 2)
    assert got == list(range(n))
    assert t.calls == ["pause", "resume"]


def test_a_refused_length_keeps_the_frames_before_it_and_never_reads_again() -> None:
    s, t = _stream()
    good = [_frame(i, 1000) for i in range(3)]
    _feed(s, b"".join(good) + struct.pack(">i", MAX + 1) + b"\0" * 64)
    assert isinstance(s.broken, FrameTooLargeError)
    assert t.calls == ["pause"]
    for i in range(3):  # the requests before the bad length are still there, in order
        frame = _read(s)
        assert frame is not None and bytes(frame) == good[i][4:]
    assert _read(s) is None  # then the stream ends: dropped as too large
    assert s._closed
    assert t.calls == ["pause"]  # draining the queue did not resume reading


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_frames_split_anywhere_are_reassembled_byte_exact(chunk: int) -> None:
    s, t = _stream()
    frames = [_frame(i, 8 + i * 37) for i in range(12)]
    _feed(s, b"".join(frames), chunk=chunk)
    assert [bytes(_read(s) or b"") for _ in frames] == [f[4:] for f in frames]
    assert s._queued == 0 and t.calls == []
