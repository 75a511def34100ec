"""Pure parts of the ``memq`` Spark source: options, planning, dedup, decoding, offsets."""

from __future__ import annotations

import pytest

from memq.errors import ConfigError, CorruptObjectError, MemqFormatError, ObjectNotFoundError
from memq.formats import Compression, encode_batch, encode_block
from memq.formats.batch import batch_header_length
from memq.spark import reading
from memq.spark.decode import ARROW_SCHEMA, BlockId, decode_object, to_signed
from memq.spark.errors import SKIP_HINT, MissingObjectError, corrupt_object
from memq.spark.listing import ObjectRef, dedup_hedged
from memq.spark.options import parse_options, parse_time_ms
from memq.spark.planning import pack_partitions, partition_bytes
from memq.spark.stats import Counter, CountsParam, ScanStats
from memq.spark.streaming import offset_of, watermark_of

MiB = 1 << 20
BASE = {"bucket": "memq-dev", "topic": "events"}


# --- options -----------------------------------------------------------------------------


def test_options_defaults_and_required() -> None:
    o = parse_options(BASE)
    assert (o.cluster, o.hash_prefix, o.on_corrupt, o.start_ms, o.end_ms) == (
        "default",
        "auto",
        "fail",
        None,
        None,
    )
    assert o.seal_window == (None, None)
    assert o.dedup is False
    assert parse_options({**BASE, "dedup": "true"}).dedup is True
    assert parse_options({**BASE, "DEDUP": "False"}).dedup is False
    for missing in ("bucket", "topic"):
        with pytest.raises(ConfigError, match=missing):
            parse_options({k: v for k, v in BASE.items() if k != missing})


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"colour": "red"}, "unknown memq option"),
        ({"topic": "no/slash"}, "invalid topic"),
        ({"on_corrupt": "ignore"}, "on_corrupt"),
        ({"hash_prefix": "maybe"}, "hash_prefix"),
        ({"start_time": "yesterday"}, "start_time"),
        ({"start_time": "20251122"}, "start_time: '20251122' is ambiguous"),
        ({"start_time": "2025-11-22T06:00:00Z", "end_time": "2025-11-22T05:00:00Z"}, "after"),
        ({"list_page_size": "5000"}, "list_page_size"),
        ({"read_concurrency": "x"}, "integer"),
        ({"min_partition_bytes": "10", "target_partition_bytes": "5"}, "must not exceed"),
        ({"dedup": "yes"}, "dedup"),
        # (the listing's hours overflowed datetime: a traceback)
        ({"end_time": "9999-12-31T23:59:59Z"}, "end_time=.* is out of range"),
        ({"start_time": "0001-01-01"}, "start_time=.* is out of range"),
        ({"end_time": "99999999999999999"}, "out of range"),
        ({"endpoint_url": "127.0.0.1:9"}, "endpoint_url"),
    ],
)
def test_options_are_validated_with_clear_errors(bad: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_options({**BASE, **bad})


def test_times_accept_iso_and_epoch_ms() -> None:
    ms = 1_763_790_000_000  # 2025-11-22T05:40:00Z
    assert parse_time_ms("t", str(ms)) == ms
    assert parse_time_ms("t", "2025-11-22T05:40:00Z") == ms
    assert parse_time_ms("t", "2025-11-22T05:40:00") == ms  # no zone: UTC
    assert parse_time_ms("t", "2025-11-22T06:40:00+01:00") == ms
    assert parse_time_ms("t", "2025-11-22") == ms - (5 * 60 + 40) * 60_000
    o = parse_options(
        {**BASE, "start_time": str(ms), "end_time": str(ms + 1000), "time_slack_ms": "5"}
    )
    assert o.seal_window == (ms - 5, ms + 1005)


# --- planning ----------------------------------------------------------------------------


def _objs(sizes: list[int]) -> list[ObjectRef]:
    return [ObjectRef(f"k{i:04d}", s, 1000 + i) for i, s in enumerate(sizes)]


def test_partitions_group_objects_by_bytes_in_order() -> None:
    opts = parse_options({**BASE, "partitions_per_core": "3"})
    objs = _objs([8 * MiB] * 64)  # 512 MiB on 2 cores: ~3 partitions per core
    parts = pack_partitions(objs, opts, cores=2)
    assert len(parts) == 6
    assert [o for p in parts for o in p.objects] == objs  # every object once, in order
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 8 * MiB  # balanced to within one object
    assert [p.index for p in parts] == list(range(6))


def test_partitions_default_to_one_per_core_in_full_waves() -> None:
    opts = parse_options(BASE)
    assert opts.partitions_per_core == 1
    # 100 MiB on 2 cores: one run per core (task start-up is paid once per core).
    assert [p.size for p in pack_partitions(_objs([4 * MiB] * 25), opts, cores=2)] == [
        13 * 4 * MiB,
        12 * 4 * MiB,
    ]
    # 640 MiB on 4 cores is 5 partitions of <= 128 MiB: rounded up to 8 (two full waves).
    parts = pack_partitions(_objs([8 * MiB] * 80), opts, cores=4)
    assert len(parts) == 8 and {p.size for p in parts} == {80 * MiB}
    # Never more partitions than objects.
    assert len(pack_partitions(_objs([200 * MiB] * 3), opts, cores=4)) == 3


def test_partitions_are_few_for_small_inputs_and_bounded_for_big_ones() -> None:
    opts = parse_options(BASE)
    assert len(pack_partitions(_objs([100_000] * 50), opts, cores=8)) == 1  # 5 MB < 8 MiB
    assert pack_partitions([], opts, cores=2) == []
    # 100 GiB on 2 cores is capped at target_partition_bytes per partition.
    assert partition_bytes(opts, 100 << 30, cores=2) == 128 * MiB
    small = parse_options({**BASE, "target_partition_bytes": str(MiB), "min_partition_bytes": "1"})
    parts = pack_partitions(_objs([300_000] * 20), small, cores=1)
    assert all(p.size <= 2 * MiB for p in parts) and 3 <= len(parts) <= 6
    # One huge object is one partition, never split or dropped.
    assert len(pack_partitions(_objs([1 << 30]), opts, cores=2)) == 1


# --- hedged duplicates -------------------------------------------------------------------


def _ref(bid: str, size: int = 100) -> tuple[ObjectRef, str]:
    return ObjectRef(f"ab/c/topics/t/dt=2025-11-22/hh=05/{bid}", size, int(bid[:13])), bid


def test_hedged_copy_is_collapsed_to_the_original() -> None:
    x = "1763790000950-00000042-broker-1"
    objs, dropped = dedup_hedged([_ref(f"{x}-h1"), _ref(x), _ref("1763790000951-00000043-b")])
    assert dropped == 1
    assert [o.key.rsplit("/", 1)[1] for o in objs] == [x, "1763790000951-00000043-b"]


def test_lone_hedged_copy_and_different_sizes_are_kept() -> None:
    x = "1763790000950-00000042-broker-1"
    objs, dropped = dedup_hedged([_ref(f"{x}-h1")])
    assert dropped == 0 and len(objs) == 1
    objs, dropped = dedup_hedged([_ref(x, 100), _ref(f"{x}-h1", 200)])
    assert dropped == 0 and len(objs) == 2  # not the same bytes: not a hedge copy
    objs, dropped = dedup_hedged([_ref(x), _ref(f"{x}-h1"), _ref(f"{x}-h2")])
    assert dropped == 2 and len(objs) == 1
    # Two same-size hedges of a base of another size: the base and one of them (all three
    # were read).
    objs, dropped = dedup_hedged([_ref(x, 100), _ref(f"{x}-h1", 200), _ref(f"{x}-h2", 200)])
    assert dropped == 1 and [o.key.rsplit("/", 1)[1] for o in objs] == [x, f"{x}-h1"]


# --- decoding ----------------------------------------------------------------------------


def _object(blocks: list[list[tuple[int, bytes | None, bytes, object]]], **kw: int) -> bytes:
    params = {"producer_id": 1, "epoch": 2, "sequence": 3, **kw}
    return encode_batch(
        [
            encode_block(
                b,  # type: ignore[arg-type]
                producer_id=params["producer_id"],
                epoch=params["epoch"],
                sequence=params["sequence"] + i,
                compression=Compression.LZ4,
            )
            for i, b in enumerate(blocks)
        ]
    )


def test_decode_object_builds_the_schema_and_maps_unsigned_ids() -> None:
    data = _object(
        [[(10, b"k", b"v", (("a", b"1"),)), (11, None, b"w", None)], [(12, b"", b"x", ())]],
        producer_id=(1 << 64) - 1,
        epoch=(1 << 32) - 1,
        sequence=(1 << 63),
    )
    batch, counts = decode_object(data, topic="events", key="obj")
    assert batch.schema.equals(ARROW_SCHEMA)
    rows = batch.to_pylist()
    assert [r["record_index"] for r in rows] == [0, 1, 0]
    assert [r["block_index"] for r in rows] == [0, 0, 1]
    assert [r["producer_id"] for r in rows] == [-1] * 3
    assert [r["epoch"] for r in rows] == [-1] * 3
    assert [r["sequence"] for r in rows] == [-(1 << 63), -(1 << 63), -(1 << 63) + 1]
    assert [r["headers"] for r in rows] == [[("a", b"1")], None, []]
    assert [r["key"] for r in rows] == [b"k", None, b""]
    assert {r["topic"] for r in rows} == {"events"} and {r["object_key"] for r in rows} == {"obj"}
    assert rows[0]["timestamp"].timestamp() == 0.010
    assert (counts.blocks_read, counts.records) == (2, 3)
    assert to_signed((1 << 63) - 1, 64) == (1 << 63) - 1


def test_decode_object_filters_time_exactly_and_prunes_blocks() -> None:
    data = _object([[(t, None, b"v", None) for t in range(0, 10)],
                    [(t, None, b"v", None) for t in range(10, 20)],
                    [(t, None, b"v", None) for t in range(20, 30)]])  # fmt: skip
    batch, counts = decode_object(data, topic="t", key="k", start_ms=5, end_ms=15)
    ms = [int(r["timestamp"].timestamp() * 1000) for r in batch.to_pylist()]
    assert ms == list(range(5, 15))
    assert (counts.blocks_read, counts.blocks_pruned, counts.records) == (2, 1, 10)
    none, counts = decode_object(data, topic="t", key="k", start_ms=30, end_ms=40)
    assert none is None and counts.blocks_pruned == 3


def test_repeated_header_names_keep_the_last_value() -> None:
    data = _object([[(1, None, b"v", (("a", b"1"), ("b", b"2"), ("a", b"3")))]])
    batch, _ = decode_object(data, topic="t", key="k")
    assert batch.to_pylist()[0]["headers"] == [("a", b"3"), ("b", b"2")]


def test_decode_object_rejects_corruption() -> None:
    data = bytearray(_object([[(1, None, b"value", None)]]))
    data[-3] ^= 0x10
    with pytest.raises(MemqFormatError):
        decode_object(bytes(data), topic="t", key="k")
    with pytest.raises(MemqFormatError):
        decode_object(bytes(data[:20]), topic="t", key="k")


# --- block dedup in a read task ---------------------------------------------------------

Rec = tuple[int, bytes | None, bytes, object]


def _blocks_object(blocks: list[tuple[int, list[Rec]]], pid: int = 9, epoch: int = 1) -> bytes:
    """A batch object of ``(sequence, records)`` blocks of one producer."""
    return encode_batch(
        [
            encode_block(recs, producer_id=pid, epoch=epoch, sequence=seq,  # type: ignore[arg-type]
                         compression=Compression.ZSTD)
            for seq, recs in blocks
        ]
    )  # fmt: skip


def _recs(seq: int, n: int = 3, t0: int = 1000) -> list[Rec]:
    return [(t0 + i, b"k%d" % seq, b"v%d-%d" % (seq, i), None) for i in range(n)]


def _rows(batch: object) -> list[dict[str, object]]:
    return [] if batch is None else batch.to_pylist()  # type: ignore[attr-defined]


def _ident(row: dict[str, object]) -> tuple[object, ...]:
    """A row without where it was read from (object_key, block_index)."""
    return tuple(v for k, v in row.items() if k not in {"object_key", "block_index"})


def test_decode_drops_blocks_already_read_and_repeats_within_an_object() -> None:
    # Block 4 is stored twice: at index 1 of object A and index 0 of object B (a retried
    # block); object B also repeats block 5 within itself.
    a = _blocks_object([(3, _recs(3)), (4, _recs(4))])
    b = _blocks_object([(4, _recs(4)), (5, _recs(5)), (5, _recs(5))])
    seen: set[BlockId] = set()
    batch_a, counts_a = decode_object(a, topic="t", key="A", seen=seen)
    assert (counts_a.blocks_read, counts_a.duplicate_blocks) == (2, 0)
    assert seen == {(9, 1, 3), (9, 1, 4)}
    batch_b, counts_b = decode_object(b, topic="t", key="B", seen=seen)
    assert (counts_b.blocks_read, counts_b.duplicate_blocks, counts_b.records) == (1, 2, 3)
    assert [(r["sequence"], r["block_index"], r["record_index"]) for r in _rows(batch_b)] == [
        (5, 1, 0), (5, 1, 1), (5, 1, 2),
    ]  # fmt: skip
    assert seen == {(9, 1, 3), (9, 1, 4), (9, 1, 5)}
    # Without dedup both copies of block 4 are rows that differ only in where they were
    # read: the same record_index values, so a shuffle on the block id catches them.
    plain_b, counts = decode_object(b, topic="t", key="B")
    assert counts.duplicate_blocks == 0 and len(_rows(plain_b)) == 9
    copy_a = [_ident(r) for r in _rows(batch_a) if r["sequence"] == 4]
    copy_b = [_ident(r) for r in _rows(plain_b) if r["sequence"] == 4]
    assert copy_a == copy_b and [r[-1] for r in copy_a] == [0, 1, 2]
    # Every record once with dedup; block 4's three records twice without.
    with_dedup = [_ident(r) for r in _rows(batch_a) + _rows(batch_b)]
    assert len(with_dedup) == len(set(with_dedup)) == 9


def test_dedup_leaves_seen_alone_on_a_bad_object_and_ignores_pruned_blocks() -> None:
    seen: set[BlockId] = {(9, 1, 1)}
    bad = bytearray(_blocks_object([(7, _recs(7)), (8, _recs(8))]))
    bad[-3] ^= 0x10
    with pytest.raises(MemqFormatError):
        decode_object(bytes(bad), topic="t", key="bad", seen=seen)
    assert seen == {(9, 1, 1)}  # a skipped object reads nothing: its blocks stay unread
    obj = _blocks_object([(7, _recs(7, t0=1000)), (8, _recs(8, t0=5000))])
    _, counts = decode_object(obj, topic="t", key="o", start_ms=4000, seen=seen)
    assert (counts.blocks_pruned, counts.blocks_read) == (1, 1)
    assert seen == {(9, 1, 1), (9, 1, 8)}  # block 7 was pruned, not read: a copy may follow
    batch, counts = decode_object(obj, topic="t", key="copy", seen=seen)
    assert counts.duplicate_blocks == 1 and {r["sequence"] for r in _rows(batch)} == {7}


def test_read_task_drops_copies_across_its_objects_and_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = {
        "k1": _blocks_object([(1, _recs(1)), (2, _recs(2))]),
        "k2": _blocks_object([(2, _recs(2)), (3, _recs(3))]),  # block 2 again
        "k3": _blocks_object([(1, _recs(1))]),  # block 1 a third time
    }
    monkeypatch.setattr(reading, "fetch_object", lambda _opts, key: stored[key])
    objects = tuple(ObjectRef(k, len(v), 1000 + i) for i, (k, v) in enumerate(stored.items()))

    def read(**extra: str) -> tuple[list[dict[str, object]], ScanStats]:
        counter = Counter()
        opts = parse_options({**BASE, "read_concurrency": "2", **extra})
        rows = [r for b in reading.read_objects(objects, opts, counter) for r in _rows(b)]
        return rows, counter.snapshot()

    rows, stats = read(dedup="true")
    assert sorted((r["sequence"], r["record_index"]) for r in rows) == [
        (s, i) for s in (1, 2, 3) for i in range(3)
    ]
    assert [r["object_key"] for r in rows if r["sequence"] == 2] == ["k1"] * 3  # first copy
    assert (stats.duplicate_blocks_dropped, stats.records_read, stats.objects_read) == (2, 9, 3)
    assert stats.blocks_read == 3
    rows, stats = read()  # dedup off (default): every copy is read
    assert len(rows) == stats.records_read == 15 and stats.duplicate_blocks_dropped == 0


def test_pushed_window_reads_headers_first_and_gets_only_the_blocks_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    def blk(seq: int, t0: int) -> tuple[int, list[Rec]]:
        return seq, [(t0 + i, None, bytes([seq]) * 200, None) for i in range(5)]

    stored = {  # blocks of 5 records 1 ms apart; ~1 KB each, so ranges matter
        "a": _blocks_object([blk(1, 1000), blk(2, 2000), blk(3, 3000), blk(4, 4000)]),
        "b": _blocks_object([blk(5, 9000), blk(6, 9100)]),  # outside: header only
        "c": _blocks_object([blk(7, 2002)]),  # one block, read with its header
    }
    gets: list[tuple[str, int, int | None]] = []
    short: set[str] = set()

    def fake_get(_opts: object, key: str, start: int = 0, end: int | None = None) -> bytes:
        gets.append((key, start, end))
        data = stored[key][start:end]  # (S3: a range past the end gets what there is)
        blocks = start >= batch_header_length(stored[key])  # (not the header's reads)
        return data[:-1] if key in short and blocks else data

    monkeypatch.setattr(reading, "fetch_object", fake_get)
    monkeypatch.setattr(reading, "HEADER_READ", 64)  # (less than a header: read the rest)
    objects = tuple(ObjectRef(k, len(v), 1000 + i) for i, (k, v) in enumerate(stored.items()))
    base = parse_options({**BASE, "read_concurrency": "1"})
    opts = dataclasses.replace(base, filter_start_ms=2003, filter_end_ms=3002)
    assert opts.filtered and opts.record_window == (2003, 3002)

    counter = Counter()
    rows = [r for b in reading.read_objects(objects, opts, counter, start_ms=2003, end_ms=3002)
            for r in _rows(b)]  # fmt: skip
    got = sorted((r["sequence"], round(r["timestamp"].timestamp() * 1000)) for r in rows)
    assert got == [
        (2, 2003),
        (2, 2004),
        (3, 3000),
        (3, 3001),
        (7, 2003),
        (7, 2004),
        (7, 2005),
        (7, 2006),
    ]
    stats = counter.snapshot()
    assert (stats.objects_read, stats.objects_pruned, stats.records_read) == (2, 1, 8)
    assert (stats.blocks_read, stats.blocks_pruned) == (3, 2 + 2 + 0)
    hlen = {k: batch_header_length(v) for k, v in stored.items()}
    a_gets = [g for g in gets if g[0] == "a"]
    # the first 64 bytes, the rest of the header, then blocks 2..3 only (not 1 and 4)
    assert a_gets[:2] == [("a", 0, 64), ("a", 64, hlen["a"])]
    assert len(a_gets) == 3 and hlen["a"] < a_gets[2][1] < a_gets[2][2] < len(stored["a"])  # type: ignore[operator]
    assert [g for g in gets if g[0] == "b"] == [("b", 0, 64), ("b", 64, hlen["b"])]
    assert stats.bytes_read < sum(map(len, stored.values()))

    # An object sealed more than time_slack_ms inside the window is read whole, in one
    # GET (and still filtered exactly): here every object, with a wide window.
    gets.clear()
    wide = dataclasses.replace(opts, filter_start_ms=1, filter_end_ms=900_000, time_slack_ms=1000)
    inside = tuple(o._replace(created_ms=400_000) for o in objects)
    rows = [r for b in reading.read_objects(inside, wide, Counter(), start_ms=2003, end_ms=3002)
            for r in _rows(b)]  # fmt: skip
    assert sorted((r["sequence"], round(r["timestamp"].timestamp() * 1000)) for r in rows) == got
    assert gets == [(k, 0, None) for k in stored]

    # A range that comes back short fails the object (its missing blocks are not
    # "pruned"), and is skipped and counted with on_corrupt=skip.
    short.add("a")
    with pytest.raises(CorruptObjectError, match="came back as"):
        list(reading.read_objects(objects, opts, Counter(), start_ms=2003, end_ms=3002))
    skip = dataclasses.replace(opts, on_corrupt="skip")
    counter = Counter()
    rows = [r for b in reading.read_objects(objects, skip, counter, start_ms=2003, end_ms=3002)
            for r in _rows(b)]  # fmt: skip
    assert {r["sequence"] for r in rows} == {7} and counter.snapshot().corrupt_skipped == 1
    short.clear()

    # An object whose header describes more bytes than the listing found (cut off after
    # its header) is corrupt before any range past its end is asked for; an object of
    # at most HEADER_READ bytes is read whole (one GET, no range).
    cut = dict(stored, a=stored["a"][: batch_header_length(stored["a"]) + 10])
    monkeypatch.setattr(reading, "fetch_object", lambda o, k, s=0, e=None: cut[k][s:e])
    refs = tuple(ObjectRef(k, len(v), 1000) for k, v in cut.items())
    with pytest.raises(CorruptObjectError, match="its header says"):
        list(reading.read_objects(refs, opts, Counter(), start_ms=2003, end_ms=3002))
    gets.clear()
    monkeypatch.setattr(reading, "fetch_object", fake_get)
    monkeypatch.setattr(reading, "HEADER_READ", 64 * 1024)
    rows = [r for b in reading.read_objects(objects, opts, Counter(), start_ms=2003, end_ms=3002)
            for r in _rows(b)]  # fmt: skip
    assert sorted((r["sequence"], round(r["timestamp"].timestamp() * 1000)) for r in rows) == got
    assert gets == [(k, 0, None) for k in stored]


# --- errors, offsets, counters -----------------------------------------------------------


def test_errors_name_the_object_and_the_way_out() -> None:
    key = "ab/c/topics/t/dt=2025-11-22/hh=05/x"
    e = corrupt_object("b", key, MemqFormatError("crc"))
    assert isinstance(e, CorruptObjectError) and isinstance(e, MemqFormatError)
    assert str(e) == f"corrupt MemQ batch object s3://b/{key}: MemqFormatError: crc; {SKIP_HINT}"
    assert "on_corrupt" in str(e) and (e.bucket, e.key) == ("b", key)
    m = MissingObjectError("b", "k", ObjectNotFoundError("404"))
    assert isinstance(m, ObjectNotFoundError) and "s3://b/k" in str(m)
    import pickle

    back = pickle.loads(pickle.dumps(e))
    assert type(back) is CorruptObjectError and str(back) == str(e)
    assert (back.bucket, back.key) == ("b", key)
    assert str(pickle.loads(pickle.dumps(m))) == str(m)


def test_offsets_round_trip_and_reject_foreign_checkpoints() -> None:
    assert watermark_of(offset_of(123)) == 123
    for bad in ({"sealed_ms": 1}, {"version": 2, "sealed_ms": 1}, {"version": 1, "sealed_ms": "x"}):
        with pytest.raises(ConfigError, match="checkpoint"):
            watermark_of(bad)


def test_streaming_rejects_end_time() -> None:
    from memq.spark.streaming import MemqStreamReader

    with pytest.raises(ConfigError, match="end_time"):
        MemqStreamReader(parse_options({**BASE, "end_time": "1763790000000"}), None, 1)


def test_counts_merge_and_subtract() -> None:
    p = CountsParam()
    acc = p.addInPlace(p.zero({}), {"list_requests": 2})
    acc = p.addInPlace(acc, {"list_requests": 1, "objects_read": 4})
    a = ScanStats.from_counts(acc)
    assert (a.list_requests, a.objects_read) == (3, 4)
    assert (a - ScanStats(list_requests=1)).list_requests == 2
    c = Counter()
    c.add({"keys_listed": 5})
    c.add({"keys_listed": 1, "unknown": 9})
    assert c.snapshot().keys_listed == 6


def test_s3_client_freezes_the_gc_only_in_pyspark_daemon_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc
    import sys
    import types

    from memq.spark import s3io

    opts = parse_options({**BASE, "endpoint_url": "http://127.0.0.1:9", "region": "us-east-1"})
    assert not s3io.in_pyspark_daemon()
    frozen = gc.get_freeze_count()
    s3io.client_for(opts, 3)  # a driver or test process: its GC is left alone
    assert gc.get_freeze_count() == frozen
    fake_main = types.ModuleType("__main__")
    fake_main.__spec__ = types.SimpleNamespace(name="pyspark.daemon")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    monkeypatch.setattr(s3io, "_clients", {})
    try:
        assert s3io.in_pyspark_daemon()
        s3io.client_for(opts, 3)  # a forked Spark worker: long-lived objects are frozen
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
