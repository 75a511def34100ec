from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.errors import ChecksumError, MalformedError, MemqFormatError, TruncatedError
from memq.formats import (
    BATCH_PREFIX_SIZE,
    BatchBuilder,
    Compression,
    batch_header_length,
    decode_batch,
    decode_batch_header,
    decode_records,
    encode_batch,
    encode_block,
    verify_batch_block,
    verify_block,
)
from memq.formats.batch import _PREFIX
from tests.unit.corruption import every_bit_flip, every_truncation, random_flips
from tests.unit.strategies import compressions, record_lists


def _blocks(n: int, codec: Compression = Compression.NONE) -> list[bytes]:
    return [
        encode_block(
            [(100 * i + j, None, b"r%d-%d" % (i, j), None) for j in range(i + 1)],
            producer_id=i,
            epoch=0,
            sequence=i,
            compression=codec,
        )
        for i in range(n)
    ]


@given(st.lists(st.tuples(record_lists, compressions), min_size=1, max_size=6))
@settings(max_examples=150)
def test_round_trip(spec):
    blocks = [
        encode_block(recs, producer_id=i, epoch=1, sequence=i, compression=c)
        for i, (recs, c) in enumerate(spec)
    ]
    obj = encode_batch(blocks)
    header, decoded = decode_batch(obj)
    assert header.block_count == len(blocks)
    assert header.object_size == len(obj)
    assert header.record_count == sum(len(r) for r, _ in spec)
    assert [recs for _, recs in decoded] == [recs for recs, _ in spec]
    # The blocks are in the object byte-for-byte, where the index says.
    for e, b in zip(header.entries, blocks, strict=True):
        assert obj[e.offset : e.offset + e.length] == b


def test_range_read_header_then_single_block():
    blocks = _blocks(5, Compression.ZSTD)
    obj = encode_batch(blocks)
    hlen = batch_header_length(obj[:BATCH_PREFIX_SIZE])
    header = decode_batch_header(obj[:hlen])
    e = header.entries[3]
    h = verify_batch_block(obj[e.offset : e.offset + e.length], e, index=3)
    assert decode_records(obj[e.offset : e.offset + e.length], h) == [
        (300 + j, None, b"r3-%d" % j, None) for j in range(4)
    ]


def test_every_truncation_and_bit_flip_is_rejected():
    obj = encode_batch(_blocks(3))
    every_truncation(decode_batch, obj)
    every_bit_flip(decode_batch, obj)
    random_flips(decode_batch, obj, seed=3)


def test_header_checksum_covers_block_crcs():
    obj = bytearray(encode_batch(_blocks(2)))
    # Corrupt one block and fix its own CRC: the index CRC no longer matches.
    header = decode_batch_header(obj)
    e = header.entries[1]
    block = bytearray(obj[e.offset : e.offset + e.length])
    block[-1] ^= 0xFF
    import zlib

    crc = zlib.crc32(memoryview(block)[8:], zlib.crc32(block[:4]))
    block[4:8] = crc.to_bytes(4, "big")
    verify_block(bytes(block))  # a valid block on its own...
    obj[e.offset : e.offset + e.length] = block
    with pytest.raises(ChecksumError, match="index entry"):
        decode_batch(bytes(obj))  # ...but not the one the header names


def test_huge_block_count_does_not_allocate():
    prefix = _PREFIX.pack(b"MEMQ", 1, 0, 0, 20 + 36 * 65536, 65536)
    tracemalloc.start()
    with pytest.raises(TruncatedError):
        decode_batch_header(prefix + b"\x00" * 100)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(MalformedError):
        batch_header_length(_PREFIX.pack(b"MEMQ", 1, 0, 0, 20 + 36 * 70000, 70000))


def test_builder_reuses_its_buffer_and_matches_encode_batch():
    blocks = _blocks(4)
    b = BatchBuilder(capacity=4096, max_blocks=8)
    buf_id = id(b._buf)
    for _round in range(3):
        for blk in blocks:
            assert b.fits(len(blk))
            b.append(blk, verify_block(blk))
        assert b.block_count == 4
        assert b.record_count == 1 + 2 + 3 + 4
        sealed = bytes(b.seal())
        assert sealed == encode_batch(blocks)
        assert b.header_crc == decode_batch_header(sealed).crc
        b.reset()
    assert id(b._buf) == buf_id


def test_builder_append_copies_once_from_any_buffer():
    """A block is copied into the batch buffer once, whatever buffer it arrives in: no
    block-sized temporary (a bytearray's own slice assignment makes one for any source
    that is not a bytearray); bytes, bytearray, memoryview and a view of another item
    format all land byte for byte."""
    big = encode_block(
        [(1, None, bytes(range(256)) * 4096, None)],
        producer_id=1, epoch=0, sequence=0, compression=Compression.NONE,
    )  # fmt: skip
    header = verify_block(big)
    kinds = [big, bytearray(big), memoryview(big), memoryview(bytearray(big))]
    if len(big) % 4 == 0:
        kinds.append(memoryview(big).cast("I"))
    b = BatchBuilder(capacity=len(big) * len(kinds), max_blocks=8)
    tracemalloc.start()
    try:
        for blk in kinds[:3]:
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            b.append(blk, header)
            _, peak = tracemalloc.get_traced_memory()
            assert peak - before < 64 * 1024, type(blk).__name__
    finally:
        tracemalloc.stop()
    for blk in kinds[3:]:
        b.append(blk, header)
    assert bytes(b.seal()) == encode_batch([big] * len(kinds))


def test_builder_limits():
    blocks = _blocks(3)
    b = BatchBuilder(capacity=len(blocks[0]) + len(blocks[1]), max_blocks=2)
    b.append(blocks[0], verify_block(blocks[0]))
    assert not b.fits(len(blocks[1]) + 1)
    b.append(blocks[1], verify_block(blocks[1]))
    assert not b.fits(1)  # block count limit reached
    with pytest.raises(MemqFormatError):
        b.append(blocks[2], verify_block(blocks[2]))
    with pytest.raises(MalformedError):
        BatchBuilder(10).seal()
