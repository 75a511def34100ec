from __future__ import annotations

import contextlib
import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.errors import (
    BadMagicError,
    ChecksumError,
    CompressionError,
    MalformedError,
    MemqFormatError,
    TruncatedError,
    UnsupportedVersionError,
)
from memq.formats import Compression, decode_block, encode_block, verify_block
from memq.formats.block import _HEADER, BLOCK_HEADER_SIZE, decode_block_header
from memq.formats.compression import compress
from tests.unit.corruption import every_bit_flip, every_truncation, random_flips
from tests.unit.strategies import compressions, record_lists, u32, u64

RECS = [
    (1000 + i, b"k%d" % i, b"v" * (i * 7), (("h", b"x"),) if i % 2 else None) for i in range(12)
]


@given(record_lists, compressions, u64, u32, u64, st.sampled_from([1, 2]))
@settings(max_examples=300)
def test_round_trip(records, codec, pid, epoch, seq, version):
    data = encode_block(
        records, producer_id=pid, epoch=epoch, sequence=seq, compression=codec, version=version
    )
    header, out = decode_block(data)
    assert out == records
    assert header.version == version
    assert (header.producer_id, header.epoch, header.sequence) == (pid, epoch, seq)
    assert header.record_count == len(records)
    assert header.min_timestamp == min(r[0] for r in records)
    assert header.max_timestamp == max(r[0] for r in records)
    # The codec asked for, or none where it would not shrink the payload (never larger).
    raw_len = header.uncompressed_length
    if codec is not Compression.NONE and header.compression is Compression.NONE:
        assert len(compress(codec, data[BLOCK_HEADER_SIZE:])) >= raw_len  # the body is raw
    else:
        assert header.compression is codec
    assert header.body_length <= raw_len
    assert header.size == len(data)


@pytest.mark.parametrize("codec", list(Compression))
def test_every_truncation_and_bit_flip_is_rejected(codec):
    data = encode_block(RECS, producer_id=9, epoch=1, sequence=2, compression=codec)
    every_truncation(decode_block, data)
    every_bit_flip(decode_block, data)
    random_flips(decode_block, data, seed=int(codec))


@given(record_lists, compressions, st.data())
@settings(max_examples=100)
def test_random_corruption_is_typed(records, codec, data):
    raw = bytearray(encode_block(records, producer_id=1, epoch=0, sequence=0, compression=codec))
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    with contextlib.suppress(MemqFormatError):
        decode_block(bytes(raw))


def test_specific_errors():
    data = bytearray(encode_block(RECS, producer_id=1, epoch=0, sequence=0))
    with pytest.raises(BadMagicError):
        decode_block(b"XX" + data[2:])
    for version in (0, 3, 255):
        with pytest.raises(UnsupportedVersionError, match="knows 1, 2"):
            decode_block(data[:2] + bytes((version,)) + data[3:])
    with pytest.raises(TruncatedError):
        decode_block(data[:-1])
    with pytest.raises(MalformedError):
        decode_block(data + b"\x00")
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(ChecksumError):
        decode_block(bytes(flipped))


def _forge(
    records_body: bytes,
    count: int,
    codec: Compression = Compression.NONE,
    ulen: int | None = None,
    version: int = 1,
) -> bytes:
    """A block with a valid CRC around arbitrary body bytes (a hostile producer)."""
    import zlib

    ulen = len(records_body) if ulen is None else ulen
    head = _HEADER.pack(b"MB", version, codec, 0, 1, 0, 0, count, 0, 10, ulen, len(records_body))
    crc = zlib.crc32(records_body, zlib.crc32(head[8:], zlib.crc32(head[:4])))
    return head[:4] + crc.to_bytes(4, "big") + head[8:] + records_body


@pytest.mark.parametrize(
    "body",
    [
        b"\x91\x01",  # array of one int
        b"\x91\x94\x05\xc0\x05\xc0",  # value is an int
        b"\x91\x93\x05\xc0\xc4\x00",  # three fields
        b"\x91\x94\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xc0\xc4\x00\xc0",  # float timestamp
        b"\x91\x94\x0b\xc0\xc4\x00\xc0",  # timestamp 11 outside [0, 10]
        b"\x91\x94\x05\xc0\xc4\x00\x91\x92\x01\xc0",  # header name is an int
        b"\xc1",  # never-used msgpack byte
        b"\x92\x94\x05\xc0\xc4\x00\xc0",  # count 2 but one record
    ],
)
def test_crc_valid_but_hostile_bodies_are_malformed(body):
    with pytest.raises(MalformedError):
        decode_block(_forge(body, 1))


def _v2(*parts: bytes, flags: int = 0, reserved: bytes = bytes(7)) -> bytes:
    return bytes((flags,)) + reserved + b"".join(parts)


def _i64(*xs: int) -> bytes:
    return b"".join(x.to_bytes(8, "little", signed=True) for x in xs)


def _i32(*xs: int) -> bytes:
    return b"".join(x.to_bytes(4, "little", signed=True) for x in xs)


V2_GOOD = _v2(_i64(5, 6), _i32(0, 1, 3), b"abc")


@pytest.mark.parametrize(
    "body",
    [
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", flags=0x04),  # reserved columns bit
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", reserved=b"\x01" + bytes(6)),
        _v2(_i64(5, 6), _i32(0, 1)),  # too short for 2 records
        _v2(_i64(5, 11), _i32(0, 1, 3), b"abc"),  # timestamp 11 outside [0, 10]
        _v2(_i64(-1, 6), _i32(0, 1, 3), b"abc"),  # timestamp -1 outside [0, 10]
        _v2(_i64(5, 6), _i32(1, 1, 3), b"abc"),  # offsets do not start at 0
        _v2(_i64(5, 6), _i32(0, 2, 1), b"abc"),  # offsets go down
        _v2(_i64(5, 6), _i32(0, -1, 3), b"abc"),  # a negative offset
        _v2(_i64(5, 6), _i32(0, 1, 4), b"abc"),  # values past the payload
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abcd"),  # a byte after the columns
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x04", _i32(0, 0, 0), flags=1),  # key bit 2
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x01", _i32(0, 1, 2), b"kk", flags=1),
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x01", _i32(0, 1, 5), b"k", flags=1),
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x03", _i32(0, 1), flags=1),  # short
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x92\xc0", flags=2),  # one header of two
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x91\xc0", flags=2),  # one entry for 2
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x92\xc0\x91\x92\x01\xc0", flags=2),
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\xc1", flags=2),  # not msgpack
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x92\xc0\xc0\xc0", flags=2),  # trailing
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", flags=2),  # headers flagged, none there
    ],
)
def test_crc_valid_but_hostile_version_2_bodies_are_malformed(body):
    assert decode_block(_forge(V2_GOOD, 2, version=2))[1] == [
        (5, None, b"a", None),
        (6, None, b"bc", None),
    ]
    with pytest.raises(MalformedError):
        decode_block(_forge(body, 2, version=2))


def test_version_2_keys_and_headers_decode_from_their_columns():
    body = _v2(
        _i64(5, 6, 7), _i32(0, 1, 1, 3), b"abc", b"\x05", _i32(0, 2, 2, 3), b"k1z",
        b"\x93\x91\x92\xa1h\xc4\x01x\xc0\x90",
        flags=3,
    )  # fmt: skip
    assert decode_block(_forge(body, 3, version=2))[1] == [
        (5, b"k1", b"a", (("h", b"x"),)),
        (6, None, b"", None),
        (7, b"z", b"bc", ()),
    ]


def test_version_2_refuses_what_it_cannot_hold_in_one_line():
    enc = lambda recs: encode_block(recs, producer_id=1, epoch=0, sequence=0)  # noqa: E731
    for bad, match in [
        ([(True, None, b"v", None)], "timestamps must be ints"),
        ([(1.5, None, b"v", None)], "timestamps must be ints"),
        ([(1 << 63, None, b"v", None)], "signed 64-bit"),
        ([(1, None, "text", None)], "value must be bytes, got str"),
        ([(1, 7, b"v", None)], "key must be bytes, got int"),
        ([(1, None, b"v", [(b"name", b"v")])], "headers must be"),
        ([(1, None, b"v", [("name", "v")])], "headers must be"),
        ([(1, None, b"v")], "timestamp, key, value, headers"),
    ]:
        with pytest.raises(MalformedError, match=match):
            enc(bad)
    # bytes-like values and keys are taken as their bytes (a memoryview by its size)
    wide = memoryview(bytes(range(8))).cast("I")
    _, out = decode_block(enc([(1, bytearray(b"k"), wide, [["h", None]])]))
    assert out == [(1, b"k", bytes(range(8)), (("h", None),))]


def test_decompression_is_bounded_by_the_header_limit():
    # A body claiming to expand to 3 GiB is refused before anything is allocated.
    forged = _forge(b"\x28\xb5\x2f\xfd", 1, Compression.ZSTD, ulen=3 << 30)
    tracemalloc.start()
    with pytest.raises(MalformedError, match="over the"):
        decode_block(forged)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20


def test_lying_uncompressed_length_is_a_compression_error():
    good = encode_block(RECS, producer_id=1, epoch=0, sequence=0, compression=Compression.LZ4)
    h = decode_block_header(good)
    body = good[BLOCK_HEADER_SIZE:]
    with pytest.raises(CompressionError):
        decode_block(_forge(body, h.record_count, Compression.LZ4, ulen=h.uncompressed_length - 1))


def test_verify_without_exact_accepts_trailing_bytes():
    data = encode_block(RECS, producer_id=1, epoch=0, sequence=0)
    assert verify_block(data + b"rest", exact=False).size == len(data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"producer_id": -1, "epoch": 0, "sequence": 0},
        {"producer_id": 1 << 64, "epoch": 0, "sequence": 0},
        {"producer_id": 0, "epoch": 1 << 32, "sequence": 0},
    ],
)
def test_encode_rejects_out_of_range_ids(kwargs):
    with pytest.raises(MalformedError):
        encode_block(RECS, **kwargs)


def test_encode_rejects_empty_and_unencodable():
    with pytest.raises(MalformedError):
        encode_block([], producer_id=0, epoch=0, sequence=0)
    with pytest.raises(MalformedError):
        encode_block([(1, None, object(), None)], producer_id=0, epoch=0, sequence=0)


# --- encode_block_parts: the producer's column path, byte for byte encode_block's ------

_LENGTHS = st.sampled_from([0, 1, 255, 256, 65535, 65536, 70000])


@st.composite
def _column_records(draw: st.DrawFn) -> list[tuple[object, ...]]:
    """Records whose timestamps and lengths sit on msgpack's encoding boundaries."""
    stamp = st.sampled_from(
        [0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, -1, -32, -33, -128,
         -129, -(1 << 15) - 1, -(1 << 31) - 1, (1 << 63) - 1, -(1 << 63), 1764000000000]
    ) | st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)  # fmt: skip
    keyed = draw(st.booleans())
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=20))):
        key = draw(st.none() | _LENGTHS.map(lambda n: b"k" * n)) if keyed else None
        out.append((draw(stamp), key, b"v" * draw(_LENGTHS), None))
    return out


@st.composite
def _run_records(draw: st.DrawFn) -> list[tuple[object, ...]]:
    """Unkeyed records in runs of one timestamp (a produce_batch() call's, a
    millisecond's), of one value length or several: the join's paths by runs."""
    stamp = st.sampled_from([0, 127, 128, -33, 1 << 32, 1764000000000, -(1 << 63)])
    lengths = draw(st.lists(_LENGTHS, min_size=1, max_size=3))
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        ts = draw(stamp)
        for _ in range(draw(st.integers(min_value=1, max_value=40))):
            out.append((ts, None, b"v" * draw(st.sampled_from(lengths)), None))
    return out


@given(
    st.one_of(_column_records(), _run_records(), record_lists),
    compressions,
    u64,
    u32,
    u64,
    st.booleans(),
    st.sampled_from([1, 2]),
)
@settings(max_examples=300, deadline=None)
def test_block_parts_equal_encode_block(records, codec, pid, epoch, seq, checked, version):
    """Headerless records are joined without msgpack, the rest go through it: either
    way header + body are exactly encode_block's bytes, and raw is the payload."""
    from memq.formats.block import encode_block_parts

    ts, keys, values, hdrs = (list(c) for c in zip(*records, strict=True))
    head, body, raw = encode_block_parts(
        ts, keys, values, hdrs, producer_id=pid, epoch=epoch, sequence=seq, compression=codec,
        checked=checked,  # (the strategies make only bytes values and int timestamps)
        version=version,
    )  # fmt: skip
    want = encode_block(
        records, producer_id=pid, epoch=epoch, sequence=seq, compression=codec, version=version
    )
    assert bytes(head) + bytes(body) == want
    assert decode_block(want)[1] == records
    if codec is Compression.NONE:
        assert bytes(raw) == bytes(body)


def test_block_parts_many_records_use_array16_and_array32_headers():
    from memq.formats.block import encode_block_parts

    for n in (15, 16, 65535, 65536):
        recs = [(7, None, b"", None)] * n
        head, body, _ = encode_block_parts(
            [7] * n, [None] * n, [b""] * n, [None] * n,
            producer_id=1, epoch=0, sequence=0, compression=Compression.NONE, version=1,
        )  # fmt: skip
        assert head + body == encode_block(
            recs, producer_id=1, epoch=0, sequence=0, compression=Compression.NONE, version=1
        )


def test_block_parts_reject_what_encode_block_rejects():
    from memq.formats.block import encode_block_parts

    def parts(ts: list, keys: list, values: list, hdrs: list, version: int = 1) -> object:
        return encode_block_parts(
            ts, keys, values, hdrs, producer_id=1, epoch=0, sequence=0, version=version
        )

    for v in (1, 2):
        with pytest.raises(MalformedError, match="block version must be one of"):
            parts([1], [None], [b"a"], [None], version=v + 2)
    with pytest.raises(MalformedError, match="must be bytes, got object"):
        parts([1], [None], [object()], [None], version=2)
    with pytest.raises(MalformedError, match="timestamp"):
        parts([1 << 63], [None], [b"a"], [None], version=2)
    with pytest.raises(MalformedError, match="timestamps must be ints"):
        parts([True], [None], [b"a"], [None], version=2)

    with pytest.raises(MalformedError, match="at least one record"):
        parts([], [], [], [])
    with pytest.raises(MalformedError, match="differ in length"):
        parts([1, 2], [None], [b"a"], [None])
    with pytest.raises(MalformedError, match="cannot be encoded"):
        parts([1], [None], [object()], [None])
    with pytest.raises(MalformedError, match="timestamp"):
        parts([1 << 63], [None], [b"a"], [None])  # msgpack holds it, the header does not
    with pytest.raises(MalformedError, match="cannot be encoded"):
        parts([1 << 64], [None], [b"a"], [None])  # msgpack does not hold it
    with pytest.raises(MalformedError, match="timestamp"):  # a bool is not an int here
        parts([True], [None], [b"a"], [None])


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_a_block_is_never_larger_than_its_uncompressed_form(codec):
    """Incompressible values: every codec would grow them; the block is stored as is, so
    a record the producer sized to fit its block limit (56 + its msgpack form) fits."""
    value = random.Random(7).randbytes(1 << 20)
    for n in (1, 100, 4096, 1 << 20):
        data = encode_block([(5, None, value[:n], None)], producer_id=1, epoch=0, sequence=0,
                            compression=codec)  # fmt: skip
        header = decode_block_header(data)
        assert len(data) <= BLOCK_HEADER_SIZE + header.uncompressed_length
        if n <= 100:  # (version 2: its 24 bytes of columns, mostly zeros, may shrink)
            continue
        assert header.compression is Compression.NONE
        assert len(data) == BLOCK_HEADER_SIZE + header.uncompressed_length
        assert decode_block(data)[1] == [(5, None, value[:n], None)]
    # ...while what a codec shrinks stays compressed with it.
    data = encode_block([(5, None, b"a" * 4096, None)], producer_id=1, epoch=0, sequence=0,
                        compression=codec)  # fmt: skip
    assert decode_block_header(data).compression is codec


def test_long_offsets_lists_are_checked_pair_by_pair_with_the_same_verdicts(monkeypatch):
    """Past ``SORT_CHECK_MAX`` offsets the check is linear (a shuffled list would cost
    ``sorted()`` n log n); both checks accept and refuse the same bodies."""
    from memq.formats import columnar

    bodies = [
        _v2(_i64(5, 6), _i32(0, 2, 1), b"abc"),  # offsets go down
        _v2(_i64(5, 6), _i32(0, -1, 3), b"abc"),  # a negative offset
        _v2(_i64(5, 6), _i32(1, 1, 3), b"abc"),  # offsets do not start at 0
        _v2(_i64(5, 6), _i32(0, 1, 3), b"abc", b"\x03", _i32(0, 2, 1), b"kk", flags=1),  # keys'
    ]
    for limit in (columnar.SORT_CHECK_MAX, 0):
        monkeypatch.setattr(columnar, "SORT_CHECK_MAX", limit)
        assert decode_block(_forge(V2_GOOD, 2, version=2))[1][1] == (6, None, b"bc", None)
        for body in bodies:
            with pytest.raises(MalformedError, match="offsets are not a run"):
                decode_block(_forge(body, 2, version=2))
    # A real block past the limit: the linear check, the records intact.
    monkeypatch.undo()
    n = columnar.SORT_CHECK_MAX + 1
    recs = [(i, None, b"v%d" % (i % 7), None) for i in range(n)]
    block = encode_block(recs, producer_id=1, epoch=0, sequence=0, compression=Compression.NONE)
    assert decode_block(block)[1] == recs
