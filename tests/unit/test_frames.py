from __future__ import annotations

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
    Request,
    RequestType,
    Response,
    decode_frame,
    encode_request,
    encode_response,
    parse_frame,
    request_frame_parts,
)
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
