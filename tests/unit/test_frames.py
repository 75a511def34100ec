from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.errors import (
    ChecksumError,
    FrameTooLargeError,
    MalformedError,
    MemqFormatError,
    TruncatedError,
    UnsupportedVersionError,
)
from memq.formats import (
    FrameDecoder,
    FrameReceiver,
    Request,
    RequestType,
    Response,
    decode_frame,
    encode_request,
    encode_response,
    parse_frame,
    request_frame_parts,
)
from memq.storage_handlers.receive import ReceiveBuffers
from tests.unit.corruption import every_bit_flip, every_truncation, random_flips

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)


@given(u16, u32, st.binary(max_size=2000))
def test_request_round_trip(t, rid, body):
    assert decode_frame(encode_request(t, rid, body)) == Request(t, rid, body)


@given(u16, u32, u16, st.text(max_size=200), st.binary(max_size=500))
def test_response_round_trip(t, rid, status, error, body):
    assert decode_frame(encode_response(t, rid, status, error, body)) == Response(
        t, rid, status, error, body
    )


def test_parts_are_zero_copy_and_equal_to_encoding():
    body = memoryview(b"x" * 1000)
    parts = request_frame_parts(RequestType.WRITE, 9, b"head", body)
    assert parts[-1] is body
    assert b"".join(parts) == encode_request(RequestType.WRITE, 9, b"head" + bytes(body))


@given(st.lists(st.tuples(u32, st.binary(max_size=300)), min_size=1, max_size=20), st.data())
@settings(max_examples=100)
def test_decoder_reassembles_any_chunking(frames, data):
    stream = b"".join(encode_request(RequestType.WRITE, rid, body) for rid, body in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    dec = FrameDecoder()
    out = []
    prev = 0
    for c in [*cuts, len(stream)]:
        dec.feed(stream[prev:c])
        prev = c
        out.extend(parse_frame(f) for f in dec.frames())
    assert out == [Request(RequestType.WRITE, rid, body) for rid, body in frames]
    assert dec.buffered == 0


@pytest.mark.parametrize(
    "frame",
    [
        encode_request(RequestType.WRITE, 77, b"some body bytes"),
        encode_response(RequestType.METADATA, 78, 6, "unknown topic", b"payload"),
    ],
)
def test_every_truncation_and_bit_flip_is_rejected(frame):
    every_truncation(decode_frame, frame)
    every_bit_flip(decode_frame, frame)
    random_flips(decode_frame, frame, seed=len(frame))


def test_too_large_and_too_small_lengths_are_fatal():
    dec = FrameDecoder(max_frame_size=1024)
    dec.feed((1025).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError):
        list(dec.frames())
    dec = FrameDecoder()  # an HTTP port's answer: said so (it said "send smaller blocks")
    dec.feed(b"HTTP/1.1 400 Bad Request\r\n")
    with pytest.raises(MalformedError, match="answered in HTTP"):
        list(dec.frames())
    dec = FrameDecoder()
    dec.feed((3).to_bytes(4, "big") + b"abc")
    with pytest.raises(MalformedError):
        list(dec.frames())


def test_partial_large_frame_waits_without_allocating():
    dec = FrameDecoder()
    dec.feed((16 * 1024 * 1024).to_bytes(4, "big") + b"\x00" * 10)
    assert list(dec.frames()) == []
    assert dec.buffered == 14


def test_unknown_version_keeps_request_id_for_the_answer():
    frame = bytearray(encode_request(RequestType.PING, 4242, b""))
    frame[8] = 9  # version byte
    import zlib

    frame[4:8] = zlib.crc32(frame[8:]).to_bytes(4, "big")
    dec = FrameDecoder()
    dec.feed(frame)
    (raw,) = list(dec.frames())
    assert raw.request_id == 4242 and raw.crc_ok
    with pytest.raises(UnsupportedVersionError):
        parse_frame(raw)


def test_bad_crc_is_a_checksum_error():
    frame = bytearray(encode_request(RequestType.PING, 1, b"abc"))
    frame[-1] ^= 1
    with pytest.raises(ChecksumError):
        decode_frame(bytes(frame))
    with pytest.raises(TruncatedError):
        decode_frame(b"")
    with pytest.raises(MemqFormatError):
        decode_frame(encode_request(1, 1) + b"\x00")


def test_long_error_text_is_cut_to_fit():
    r = decode_frame(encode_response(1, 1, 1, "é" * 40000))
    assert isinstance(r, Response)
    assert r.error == "é" * 32767


def _receive_all(rx: FrameReceiver, stream: bytes, cuts: list[int]) -> list:
    out = []
    prev = 0
    for c in [*cuts, len(stream)]:
        chunk = stream[prev:c]
        prev = c
        while chunk:  # like the event loop: fill whatever buffer the receiver offers
            buf = rx.get_buffer()
            n = min(len(buf), len(chunk))
            buf[:n] = chunk[:n]
            chunk = chunk[n:]
            out.extend(parse_frame(f) for f in rx.received(n))
    return out


@given(
    st.lists(
        st.tuples(u32, st.integers(0, 300) | st.integers(70_000, 90_000), st.integers(0, 2**32)),
        min_size=1,
        max_size=8,
    ),
    st.data(),
)
@settings(max_examples=60, deadline=None)
def test_receiver_matches_the_decoder_under_any_chunking(specs, data):
    # Big bodies come from a seed: hypothesis draws sizes, not megabytes of entropy.
    frames = [(rid, random.Random(seed).randbytes(size)) for rid, size, seed in specs]
    stream = b"".join(encode_request(RequestType.WRITE, rid, body) for rid, body in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    rx = FrameReceiver(staging=4096 + data.draw(st.integers(0, 200_000)), big_frame=1024)
    got = _receive_all(rx, stream, cuts)
    assert [(r.request_id, bytes(r.body)) for r in got] == frames
    assert rx.buffered == 0


def test_receiver_puts_big_frames_in_their_own_buffer():
    body = os.urandom(500_000)
    frame = encode_request(RequestType.WRITE, 3, body)
    rx = FrameReceiver(staging=65536, big_frame=65536)
    got = _receive_all(rx, frame, [100, 70_000])
    (req,) = got
    assert isinstance(req.body, memoryview) and bytes(req.body) == body
    # A corrupted big frame is reported by crc_ok, not silently accepted.
    bad = bytearray(frame)
    bad[-1] ^= 1
    rx = FrameReceiver(staging=65536, big_frame=65536)
    buf = rx.get_buffer()
    buf[:4096] = bad[:4096]
    assert rx.received(4096) == []
    rest = bad[4096:]
    buf = rx.get_buffer()
    assert len(buf) == len(rest)  # exactly the rest of the frame
    buf[:] = rest
    (raw,) = rx.received(len(rest))
    assert not raw.crc_ok


def test_receiver_takes_big_frame_buffers_from_a_pool_and_reuses_only_idle_ones():
    """With ``take`` (the broker's ReceiveBuffers), a big frame lands in a pooled buffer:
    the next frame reuses it once nothing refers to the first, and never while a frame
    (or any view of it) is kept; a frame larger than the pool's bound gets fresh memory."""
    pool = ReceiveBuffers(max_bytes=2 << 20, min_size=128 << 10)
    bodies = [random.Random(i).randbytes(600_000) for i in range(4)]
    frames = [encode_request(RequestType.WRITE, i, b) for i, b in enumerate(bodies)]
    rx = FrameReceiver(staging=65536, big_frame=65536, take=pool.take)

    (first,) = _receive_all(rx, frames[0], [1000])
    assert bytes(first.body) == bodies[0]
    del first  # (handled: nothing refers to its buffer any more)
    (second,) = _receive_all(rx, frames[1], [50_000])
    assert (pool.made, pool.reused) == (1, 1)
    kept = second.body  # a view the application keeps: its buffer is not reused
    (third,) = _receive_all(rx, frames[2], [])
    assert (pool.made, pool.reused) == (2, 1)
    assert bytes(kept) == bodies[1] and bytes(third.body) == bodies[2]
    held = third.body  # no room for a third 768 KiB buffer: the oldest is let go
    (fourth,) = _receive_all(rx, frames[3], [7])
    assert (pool.made, pool.reused) == (3, 1)
    assert bytes(fourth.body) == bodies[3]
    assert bytes(kept) == bodies[1] and bytes(held) == bodies[2]
    huge = random.Random(9).randbytes(3 << 20)  # over the pool's bound: fresh memory
    (fifth,) = _receive_all(rx, encode_request(RequestType.WRITE, 9, huge), [])
    assert bytes(fifth.body) == huge and (pool.made, pool.reused) == (3, 1)


def test_receiver_rejects_bad_lengths_after_the_frames_before_them():
    good = [encode_request(RequestType.WRITE, rid, b"body-%d" % rid) for rid in (1, 2)]
    for prefix, error in (((2000).to_bytes(4, "big"), FrameTooLargeError),
                          ((3).to_bytes(4, "big"), MalformedError)):  # fmt: skip
        rx = FrameReceiver(max_frame_size=1024)
        stream = b"".join(good) + prefix + b"x" * 64
        got = _receive_all(rx, stream, [])
        assert [r.request_id for r in got] == [1, 2]  # (in the same read as the bad prefix)
        assert isinstance(rx.broken, error)
        assert rx.received(0) == [] and len(rx.get_buffer()) > 0  # never parsed again
