"""Block format 2's columns: BinaryColumn (values as slices of the payload) and the
column decoder's view of a block, checked against the records as tuples."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.formats import Compression, encode_block, verify_block
from memq.formats.block import BinaryColumn, decode_columns
from memq.formats.columnar import int64_arrow
from tests.unit.strategies import record_lists


def column_of(values: list[bytes], *, view: bool) -> BinaryColumn:
    """``view``: over the block's own bytes (no compression), else over its payload
    decompressed (zstd)."""
    recs = [(5, None, v, None) for v in values]
    data = encode_block(recs, producer_id=1, epoch=0, sequence=0, compression=Compression.NONE)
    if not view:
        data = encode_block(recs, producer_id=1, epoch=0, sequence=0)
        assert verify_block(data).compression is Compression.ZSTD
    col = decode_columns(data, verify_block(data), views=True)[2]
    assert type(col) is BinaryColumn
    return col


@pytest.mark.parametrize("view", [True, False])
def test_a_binary_column_is_a_sequence_of_its_values(view: bool) -> None:
    rng = random.Random(3)
    values = [b"a" * 200] + [rng.randbytes(rng.choice([0, 1, 7, 300])) for _ in range(60)]
    col = column_of(values, view=view)
    assert len(col) == len(values) and list(col) == values and col == values
    assert col == tuple(values) and tuple(values) == col and col != values[:-1]
    assert col.materialize() == tuple(values) and col.nbytes() == sum(map(len, values))
    for i in (0, 1, 30, -1, -61):
        assert col[i] == values[i] and type(col[i]) is bytes
    for i in (61, -62):
        with pytest.raises(IndexError):
            col[i]
    for a, b in [(0, 61), (3, 9), (9, 3), (-5, None), (None, -50), (60, 61), (61, 70)]:
        part = col[a:b]
        assert type(part) is BinaryColumn and list(part) == values[a:b]
        assert part.nbytes() == sum(map(len, values[a:b]))
        assert part.to_arrow().to_pylist() == values[a:b]
        assert list(part[1:3]) == values[a:b][1:3]
    assert col[::2] == tuple(values[::2])
    arr = col.to_arrow()
    arr.validate(full=True)
    assert arr.type == pa.binary() and arr.to_pylist() == values
    assert repr(col) == f"BinaryColumn(61 values, {sum(map(len, values))} bytes)"


def test_to_arrow_shares_the_payload_instead_of_copying_it() -> None:
    col = column_of([b"x" * 100_000] * 20, view=True)
    before = pa.total_allocated_bytes()
    arr = col.to_arrow()
    assert pa.total_allocated_bytes() - before < 1000  # (Arrow allocated nothing for it)
    assert arr.nbytes >= 2_000_000


@given(record_lists, st.sampled_from(list(Compression)))
@settings(max_examples=100)
def test_views_hold_the_records_of_the_block(records, codec) -> None:
    data = encode_block(records, producer_id=1, epoch=0, sequence=0, compression=codec)
    ts, keys, values, hdrs = decode_columns(data, verify_block(data), views=True)
    assert list(zip(ts, keys, values, hdrs, strict=True)) == records
    assert int64_arrow(ts).to_pylist() == [r[0] for r in records]


def test_slices_make_the_values_once_and_share_them() -> None:
    values = [b"%d" % i * 3 for i in range(50)]
    col = column_of(values, view=True)
    first, second = col[3:9], col[20:50]
    assert first.materialize() == tuple(values[3:9])
    made = second.materialize()
    assert made == tuple(values[20:50])
    assert made[0] is col[0:50].materialize()[20]  # (the same objects, made once)
    assert col[7:7].materialize() == ()


def test_writers_headers_may_be_subclasses_as_msgpack_packs_them() -> None:
    """A StrEnum header name and a bytes subclass value (what produce() passes on) are
    written by both formats, and read back as plain str and bytes."""
    import enum

    class Name(enum.StrEnum):
        TRACE = "trace"

    class Blob(bytes):
        pass

    recs = [(1, None, b"v", [(Name.TRACE, Blob(b"x"))]), (2, None, b"w", None)]
    for version in (1, 2):
        data = encode_block(recs, producer_id=1, epoch=0, sequence=0, version=version)
        _, _, _, hdrs = decode_columns(data, verify_block(data))
        assert hdrs == ((("trace", b"x"),), None)
        assert type(hdrs[0][0][0]) is str and type(hdrs[0][0][1]) is bytes


def test_views_only_over_immutable_bytes_and_columns_pickle_as_tuples() -> None:
    import pickle

    data = encode_block([(1, None, b"abc", None)] * 3, producer_id=1, epoch=0, sequence=0)
    header = verify_block(data)
    assert type(decode_columns(memoryview(data)[0:], header, views=True)[2]) is BinaryColumn
    mutable = bytearray(data)
    values = decode_columns(mutable, header, views=True)[2]
    assert type(values) is tuple  # (copied: the caller may change or reuse its buffer)
    mutable[-1:] = b"X"
    assert values == (b"abc",) * 3
    col = decode_columns(data, header, views=True)[2]
    assert pickle.loads(pickle.dumps(col[1:])) == (b"abc", b"abc")


def test_split_columns_wants_a_record() -> None:
    from memq.errors import MalformedError
    from memq.formats.columnar import split_columns

    with pytest.raises(MalformedError, match="at least one record"):
        split_columns(bytes(12), 0, 0, 1)
