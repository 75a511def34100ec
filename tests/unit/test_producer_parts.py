from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.errors import RequestTimeoutError, StorageError
from memq.formats import Compression, decode_block_header, encode_block, verify_block
from memq.formats.block import BLOCK_FRAME, BLOCK_HEADER_SIZE, record_size
from memq.producer.accumulator import OpenBlock
from memq.producer.futures import BlockResult
from tests.unit.strategies import records


@given(st.lists(records, min_size=1, max_size=30), st.sampled_from([1, 2]))
def test_record_size_bounds_the_encoded_size(recs, version):
    block = encode_block(
        recs, producer_id=1, epoch=0, sequence=0, compression=Compression.NONE, version=version
    )
    body = decode_block_header(block).uncompressed_length
    assert len(block) <= BLOCK_FRAME + sum(record_size(k, v, h) for _, k, v, h in recs)
    assert len(block) - BLOCK_HEADER_SIZE == body


def test_open_block_tracks_bounds_and_seals_with_a_sequence():
    b = OpenBlock("t")
    for ts in (50, 10, 99, 42):
        assert b.try_add(ts, None, b"v", None, 10, None) is not None
    assert (b.min_ts, b.max_ts, b.size) == (10, 99, 40)
    sealed = b.seal(7)
    head, body = sealed.encode(3, 4, Compression.LZ4)
    header = verify_block(head + body)
    assert (header.sequence, header.producer_id, header.epoch) == (7, 3, 4)
    assert (header.min_timestamp, header.max_timestamp, header.record_count) == (10, 99, 4)


def test_record_futures_share_the_block_result():
    b = OpenBlock("t")
    futs = [b.try_add(i, None, b"v", None, 1, None) for i in range(3)]
    with pytest.raises(RequestTimeoutError):
        futs[0].result(timeout=0.01)
    seen = []
    futs[1].add_done_callback(lambda f: seen.append(f.result().record_index))
    t = threading.Thread(target=b.result.complete, args=(None,), kwargs={"key": "k", "sequence": 9})
    t.start()
    t.join()
    assert [f.result(1).record_index for f in futs] == [0, 1, 2]
    assert futs[2].result().key == "k" and futs[2].result().sequence == 9
    assert seen == [1]
    late = []
    futs[0].add_done_callback(lambda f: late.append(True))  # after completion: runs at once
    assert late == [True]


def test_failed_block_raises_for_every_record():
    r = BlockResult()
    r.complete(StorageError("down"))
    r.complete(None)  # a second completion is ignored
    assert isinstance(r.error, StorageError)


def test_as_future_gives_standard_futures_for_wait_and_asyncio():
    import asyncio
    import concurrent.futures

    from memq.producer.futures import BatchFuture

    b = OpenBlock("t")
    futs = [b.try_add(i, None, b"v", None, 1, None) for i in range(3)]
    std = [f.as_future() for f in futs]
    assert all(isinstance(f, concurrent.futures.Future) for f in std)
    assert not any(f.done() for f in std) and not std[0].cancel()  # not cancellable
    t = threading.Thread(target=b.result.complete, args=(None,), kwargs={"sequence": 9})
    t.start()
    done, pending = concurrent.futures.wait(std, timeout=30)
    assert len(done) == 3
    t.join()
    assert not pending and [f.result().record_index for f in std] == [0, 1, 2]

    async def awaited() -> int:
        return (await asyncio.wrap_future(futs[2].as_future())).sequence  # done already

    assert asyncio.run(awaited()) == 9

    # A produce_batch() future: the count once every block is acknowledged, else the
    # first error in the call's order, whatever order the blocks complete in.
    parts = [BlockResult(), BlockResult(), BlockResult()]
    whole = BatchFuture("t", [(parts[0], 5), (parts[1], 7), (parts[2], 1)]).as_future()
    parts[2].complete(StorageError("third"))
    parts[0].complete(None)
    assert not whole.done()
    parts[1].complete(StorageError("second"))
    with pytest.raises(StorageError, match="second"):
        whole.result(0)
    ok = [BlockResult(), BlockResult()]
    fine = BatchFuture("t", [(ok[0], 2), (ok[1], 3)]).as_future()
    for r in ok:
        r.complete(None)
    assert fine.result(0) == 5
    assert BatchFuture("t", []).as_future().result(0) == 0
