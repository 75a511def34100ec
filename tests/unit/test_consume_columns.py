"""The columnar consume path: block column checks, lazy records, batches of columns.

Each new decode path is compared with a reference: the previous column checks (kept
here verbatim) and Messages built straight from ``decode_batch``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.consumer.dedup import DedupWindow
from memq.consumer.fetcher import Start, _decode, fetch_object
from memq.consumer.handout import Current, Deduplicator
from memq.consumer.message import Chunk, Message, RecordBatch, Records
from memq.consumer.pending import Pending
from memq.errors import CorruptObjectError, InvalidPositionError, MalformedError
from memq.formats import Compression, encode_batch, encode_block
from memq.formats.batch import decode_batch, decode_batch_header
from memq.formats.block import (
    _HEADERS_TYPES,
    _KEY_TYPES,
    BlockHeader,
    _columns,
    _first_bad,
    _payload,
    _unpack_raw,
    decode_columns,
    decode_columns_with_crc,
    verify_block,
)
from memq.formats.notification import Notification
from tests.unit.strategies import compressions, record_lists

VEC = Path(__file__).parent.parent / "vectors"


def pending() -> Pending:
    """A queue entry for a :class:`Current` made by hand (its audit lists only)."""
    return Pending(("n", 0), 0, None, None, None)


def reference_columns(recs: tuple[Any, ...], header: BlockHeader) -> Any:
    """The column checks as they were before the fast path (the reference)."""
    try:
        if set(map(type, recs)) != {tuple} or set(map(len, recs)) != {4}:
            raise _first_bad(recs, header)
        ts, keys, values, hdrs = zip(*recs, strict=True)
    except (TypeError, ValueError):
        raise _first_bad(recs, header) from None
    header_types = set(map(type, hdrs))
    if (
        set(map(type, ts)) != {int}
        or min(ts) < header.min_timestamp
        or max(ts) > header.max_timestamp
        or set(map(type, values)) != {bytes}
        or not set(map(type, keys)) <= _KEY_TYPES
        or not header_types <= _HEADERS_TYPES
    ):
        raise _first_bad(recs, header)
    for h in hdrs if tuple in header_types else ():
        if h is not None and not all(
            type(x) is tuple
            and len(x) == 2
            and type(x[0]) is str
            and (x[1] is None or type(x[1]) is bytes)
            for x in h
        ):
            raise _first_bad(recs, header)
    return ts, keys, values, hdrs


def outcome(f: Any, recs: tuple[Any, ...], header: BlockHeader) -> Any:
    try:
        return ("ok", f(recs, header))
    except MalformedError as e:
        return ("error", type(e), str(e))


def header_for(n: int, tmin: int = 0, tmax: int = 10**13) -> BlockHeader:
    return BlockHeader(Compression.NONE, 0, 1, 0, 0, n, tmin, tmax, 0, 0)


def test_columns_of_the_golden_vectors_are_the_reference_ones() -> None:
    names = json.loads((VEC / "manifest.json").read_text())["blocks"]
    for name in names:
        data = (VEC / name).read_bytes()
        header = verify_block(data)
        cols = decode_columns(data, header)
        (same, crc) = decode_columns_with_crc(data, header)
        assert same == cols
        assert isinstance(crc, int)
        recs = tuple(zip(*cols, strict=True))
        assert reference_columns(recs, header) == cols


@given(record_lists, compressions)
@settings(max_examples=200)
def test_columns_of_random_blocks_are_the_reference_ones(records, codec) -> None:
    data = encode_block(records, producer_id=1, epoch=0, sequence=0, compression=codec, version=1)
    header = verify_block(data)
    recs = _unpack_raw(_payload(data, header), header)
    cols = decode_columns(data, header)
    assert cols == reference_columns(recs, header)
    # Version 2 holds the same records: the same columns, as tuples or as views.
    data2 = encode_block(records, producer_id=1, epoch=0, sequence=0, compression=codec)
    header2 = verify_block(data2)
    assert header2.version == 2
    assert decode_columns(data2, header2) == cols
    ts, keys, values, hdrs = decode_columns(data2, header2, views=True)
    assert (tuple(ts), keys, tuple(values), hdrs) == cols
    assert values.to_arrow().to_pylist() == list(cols[2])


BAD_RECORDS: list[Any] = [
    (1, None, b"v"),  # three items
    (1, None, b"v", None, 5),  # five
    b"abcd",  # bytes of four
    "abcd",  # str of four
    {"a": 1, "b": 2, "c": 3, "d": 4},  # a map of four
    (1.5, None, b"v", None),  # float timestamp
    (True, None, b"v", None),  # bool timestamp
    (1, 7, b"v", None),  # int key
    (1, None, "v", None),  # str value
    (1, None, b"v", 3),  # int headers
    (1, None, b"v", (("h", 1),)),  # header value int
    (1, None, b"v", (("h",),)),  # header of one item
    (1, None, b"v", ((b"h", None),)),  # header name bytes
    (10**14, None, b"v", None),  # timestamp past the header's max
    (-1, None, b"v", None),  # before its min
    msgpack.ExtType(1, b"x"),
    None,
    5,
]


@pytest.mark.parametrize("bad", BAD_RECORDS, ids=range(len(BAD_RECORDS)))
@pytest.mark.parametrize("where", [0, 2, 4])
def test_malformed_records_raise_the_reference_error(bad: Any, where: int) -> None:
    good = [(5, None, b"x", None), (6, b"k", b"y", (("h", b"z"), ("n", None)))] * 3
    recs = list(good[:5])
    recs.insert(where, bad)
    recs_t = tuple(recs)
    header = header_for(len(recs_t))
    got = outcome(_columns, recs_t, header)
    assert got[0] == "error"
    assert got == outcome(reference_columns, recs_t, header)


@given(st.lists(st.sampled_from(BAD_RECORDS + [(5, None, b"x", None)] * 6), min_size=1))
@settings(max_examples=300)
def test_random_mixtures_match_the_reference(recs: list[Any]) -> None:
    header = header_for(len(recs))
    assert outcome(_columns, tuple(recs), header) == outcome(reference_columns, tuple(recs), header)


# --- lazy records ----------------------------------------------------------------------------


def note_for(data: bytes, key: str = "obj") -> Notification:
    h = decode_batch_header(data)
    return Notification(
        topic="t",
        cluster="c",
        broker="b",
        storage="s3",
        bucket="bk",
        key=key,
        size=len(data),
        block_count=h.block_count,
        record_count=h.record_count,
        min_timestamp=h.min_timestamp,
        max_timestamp=h.max_timestamp,
        checksum=h.crc,
        batch_id="b1",
        created_at=0,
    )


def reference_messages(data: bytes, start: Start, partition: int = 3, offset: int = 9) -> Any:
    """What the consumer handed out before: one Message per record, from decode_batch."""
    _, blocks = decode_batch(data)
    out = []
    for bi, (bh, recs) in enumerate(blocks):
        for ri, (ts, k, v, h) in enumerate(recs):
            if (bi, ri) < (start.block, start.record):
                continue
            if start.min_timestamp is not None and ts < start.min_timestamp:
                continue
            out.append(
                Message(
                    "t", partition, offset, bi, ri, ts, k, v, h,
                    bh.producer_id, bh.epoch, bh.sequence, "obj",
                )
            )  # fmt: skip
    return out


def batch_of(blocks: list[list[Any]], codec: Compression = Compression.NONE) -> bytes:
    return encode_batch(
        [
            encode_block(recs, producer_id=7, epoch=1, sequence=i, compression=codec)
            for i, recs in enumerate(blocks)
        ]
    )


def test_golden_batch_decodes_to_the_reference_messages() -> None:
    data = (VEC / "batch.bin").read_bytes()
    header = decode_batch_header(data)
    recs = _decode(data, header, 0, 0, note_for(data), 3, 9, Start(), None, [])
    assert list(recs) == reference_messages(data, Start())


blocks_st = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 50), st.none() | st.binary(max_size=4), st.binary(max_size=8), st.none()
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=5,
)


@given(blocks_st, compressions, st.data())
@settings(max_examples=150)
def test_records_are_the_reference_messages(blocks, codec, data) -> None:
    obj = batch_of(blocks, codec)
    header = decode_batch_header(obj)
    b = data.draw(st.integers(0, len(blocks) - 1))
    start = Start(
        b,
        data.draw(st.integers(0, len(blocks[b]))),
        data.draw(st.none() | st.integers(0, 50)),
    )
    spans: list[Any] = []
    audits: list[Any] = []
    recs = _decode(obj, header, 0, start.block, note_for(obj), 3, 9, start, audits, spans)
    want = reference_messages(obj, start)
    assert list(recs) == want
    assert len(recs) == len(want)
    assert sum(s.length for s in spans) == len(want)
    assert sum(a.records for a in audits) == len(want)
    i = data.draw(st.integers(-len(want) - 1, len(want)))
    j = data.draw(st.integers(-len(want) - 1, len(want) + 1))
    assert recs[i:j] == want[i:j]
    if want:
        k = data.draw(st.integers(-len(want), len(want) - 1))
        assert recs[k] == want[k]
    runs = sorted({data.draw(st.integers(0, len(want))) for _ in range(4)})
    pairs = list(zip(runs[::2], runs[1::2], strict=False))
    assert list(recs.select(pairs)) == list(chain.from_iterable(want[a:b] for a, b in pairs))
    batch = RecordBatch(recs.between(0, len(recs)))
    assert batch.messages() == want == list(batch)
    assert batch.values == [m.value for m in want]
    assert batch.keys == [m.key for m in want]
    assert batch.timestamps == [m.timestamp for m in want]
    assert batch.headers == [m.headers for m in want]
    assert batch.ids() == [m.id for m in want]
    assert batch.value_bytes() == sum(len(m.value) for m in want)
    assert len(batch) == len(want) and bool(batch) == bool(want)


def test_index_out_of_range() -> None:
    recs = Records([])
    assert len(recs) == 0 and recs[0:5] == []
    with pytest.raises(IndexError):
        recs[0]


@dataclass
class Counters:
    duplicate_blocks_dropped: int = 0
    duplicate_records_dropped: int = 0
    dedup_out_of_window: int = 0


def test_take_chunks_hands_out_what_take_does_with_dedup() -> None:
    """Both ways of taking: the same records, and dedup remembers the same blocks."""
    obj = batch_of([[(i, None, b"%d/%d" % (b, i), None) for i in range(5)] for b in range(4)])
    header = decode_batch_header(obj)

    def run(columns: bool) -> tuple[list[Message], Any]:
        d = Deduplicator(DedupWindow(blocks=100, producers=10, window_ms=10**9), Counters())
        got: list[Message] = []
        for _ in range(2):  # the second time: every block handed out is a copy
            spans: list[Any] = []
            recs = _decode(obj, header, 0, 0, note_for(obj), 0, 0, Start(), None, spans)
            adm = d.admit("t", recs, spans)
            assert isinstance(adm.messages, Records)
            cur = Current(pending(), adm.messages, adm.tracked, d)
            for n in (3, 4, 100):
                if columns:
                    got += RecordBatch(cur.take_chunks(n)).messages()
                else:
                    got += cur.take(n)
            assert cur.exhausted
        return got, d._stats

    by_messages, stats_m = run(False)
    by_chunks, stats_c = run(True)
    assert by_chunks == by_messages
    assert len(by_messages) == 20  # the second fetch was all copies
    assert stats_c == stats_m == Counters(4, 20, 0)


def test_take_chunks_of_ready_messages() -> None:
    msgs = [Message("t", 0, 0, 0, r, r, None, b"v%d" % r, None, 1, 0, 0, "k") for r in range(4)]
    cur = Current(pending(), list(msgs))
    assert RecordBatch(cur.take_chunks(3)).messages() == msgs[:3]
    assert cur.take(5) == msgs[3:]


def test_chunk_parts() -> None:
    c = Chunk(
        "t", 0, 0, "k", 2, 4, (1, 2, 3), (None,) * 3, (b"a", b"b", b"c"), (None,) * 3, 1, 0, 0
    )
    assert c.part(0, 3) is c
    p = c.part(1, 3)
    assert (p.record, p.values, p.length) == (5, (b"b", b"c"), 2)
    assert [m.record for m in p.messages()] == [5, 6]


class MemoryReader:
    """A StorageReader over bytes in memory (unit tests only)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        return self.data[start:end]

    def read_whole(self, bucket: str, key: str, size: int, buffers: object = None) -> bytes:
        return self.data


def test_corrupt_objects_raise_typed_errors_through_the_columnar_path() -> None:
    obj = batch_of([[(i, None, b"x" * 20, None) for i in range(5)]] * 2)
    note = note_for(obj)
    got = fetch_object(MemoryReader(obj), note, 0, 0)  # type: ignore[arg-type]
    assert len(got.records) == 10 and len(got.messages) == 10
    hlen = decode_batch_header(obj).header_length
    for pos in (hlen + 60, hlen + 4, len(obj) - 1):  # a body byte, a block CRC, the last
        bad = bytearray(obj)
        bad[pos] ^= 0x10
        with pytest.raises(CorruptObjectError):
            fetch_object(MemoryReader(bytes(bad)), note, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(CorruptObjectError):  # starting mid-object (range reads), block 1 bad
        fetch_object(MemoryReader(bytes(bad)), note, 0, 0, Start(1, 2))  # type: ignore[arg-type]


def test_format_2_values_are_views_or_bytes_as_the_fetch_is_asked() -> None:
    """``views`` (consume_batch) keeps a format 2 block's values over the object's bytes;
    without (consume) they are made into bytes in the fetch thread: the same records."""
    obj = batch_of([[(i, None, b"x%d" % i, None) for i in range(5)]] * 2)
    note = note_for(obj)
    lazy = fetch_object(MemoryReader(obj), note, 0, 0, views=True)  # type: ignore[arg-type]
    eager = fetch_object(MemoryReader(obj), note, 0, 0, views=False)  # type: ignore[arg-type]
    assert {type(c.values).__name__ for c in lazy.records.chunks} == {"BinaryColumn"}
    assert {type(c.values) for c in eager.records.chunks} == {tuple}
    assert {type(c.timestamps) for c in eager.records.chunks} == {tuple}
    assert list(lazy.records) == list(eager.records) and len(eager.records) == 10


def test_a_start_past_the_end_of_its_object_or_block_is_an_error() -> None:
    """A position that names no record is an error, never "nothing there, next object"."""
    obj = batch_of([[(i, None, b"x" * 20, None) for i in range(5)]] * 2)
    note, reader = note_for(obj), MemoryReader(obj)

    def fetched(start: Start) -> list[bytes]:
        got = fetch_object(reader, note, 3, 9, start)  # type: ignore[arg-type]
        return [m.value for m in got.messages]

    # Every real position and both ends: the rest of the object from there.
    assert len(fetched(Start(0, 0))) == 10 and len(fetched(Start(0, 4))) == 6
    assert len(fetched(Start(1, 0))) == 5 and len(fetched(Start(1, 5))) == 0
    assert fetched(Start(2, 0)) == []  # just after the last block: where a commit may point
    assert len(fetched(Start(0, 5))) == 5  # the end of block 0: block 1 follows
    for start, what in (
        (Start(0, 6), "its block 0 has 5 records"),
        (Start(1, 6), "its block 1 has 5 records"),
        (Start(2, 1), "it has 2 blocks"),
        (Start(99, 0), "it has 2 blocks"),
    ):
        with pytest.raises(InvalidPositionError) as e:
            fetched(start)
        assert f"no record 3:9:{start.block}:{start.record}, {what}" in str(e.value)


arrow_blocks = st.lists(
    st.tuples(
        st.sampled_from([1, 2]),  # block format
        st.integers(0, 3),  # notification partition
        st.lists(
            st.tuples(
                st.integers(0, 2**40),
                st.none() | st.binary(max_size=4),
                st.binary(max_size=8),
                st.none()
                | st.lists(
                    st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)), max_size=2
                ).map(tuple),
            ),
            min_size=1,
            max_size=6,
        ),
    ),
    max_size=5,
)


@given(arrow_blocks, st.booleans())
@settings(max_examples=150, deadline=None)  # (the first example imports pyarrow)
def test_to_arrow_is_the_records_of_every_chunk(blocks: list[Any], views: bool) -> None:
    """``RecordBatch.to_arrow()`` over chunks of both block formats (values as tuples or
    as views), several partitions, keys and headers present or not, no records at all:
    one row per record, in order, equal to the record's fields."""
    pytest.importorskip("pyarrow")
    chunks: list[Chunk] = []
    want: list[Any] = []
    for i, (version, partition, recs) in enumerate(blocks):
        obj = encode_batch(
            [encode_block(recs, producer_id=7, epoch=1, sequence=i, version=version,
                          compression=Compression.NONE)]
        )  # fmt: skip
        header = decode_batch_header(obj)
        note = note_for(obj)
        got = _decode(obj, header, 0, 0, note, partition, 10 + i, Start(), None, [], views)
        chunks.extend(got.between(0, len(got)))
        want += [
            {
                "partition": partition, "offset": 10 + i, "timestamp": t, "key": k, "value": v,
                "headers": None if h is None else [{"name": a, "value": b} for a, b in h],
            }
            for t, k, v, h in recs
        ]  # fmt: skip
    table = RecordBatch(chunks).to_arrow()
    rows = table.to_pylist()
    for r in rows:
        r["timestamp"] = round(r["timestamp"].timestamp() * 1000)
    assert rows == want
    assert table.schema.field("timestamp").type.tz == "UTC"
