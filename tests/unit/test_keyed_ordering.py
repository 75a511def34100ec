"""Keyed ordering: the key -> writer lane mapping, the producer's per-lane send order, the
keyed WRITE flag, and the broker notifying keyed batches in seal order.

The processor tests drive the real :class:`TopicProcessor` with in-process stand-ins for
the object store and the notification sink (as tests/unit/test_fail_closed.py does):
they must control which upload finishes first and when Kafka acknowledges, which no
real server can be asked for deterministically.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool
from memq.broker.processor import TopicProcessor
from memq.config import TopicConfig
from memq.errors import MalformedError
from memq.formats import Compression, decode_block_header, encode_block
from memq.producer.lanes import LaneOrder, lane_of
from memq.protocol import Ack, decode_write, decode_write_request, encode_write_header
from memq.storage_handlers.base import StorageWriter, StoredObject

# --- the lane mapping -----------------------------------------------------------------

WRITERS = sorted(["10.0.0.3:9092", "10.0.0.1:9092", "10.0.0.2:9092"])


def test_a_key_maps_to_the_writer_its_crc32_picks() -> None:
    # Stable across processes and runs: a fixed function of the key, not hash().
    assert lane_of(b"user-42", WRITERS) == "10.0.0.2:9092"  # crc32 0x7d06b873 % 3 == 1
    for key in (b"user-42", b"", b"\x00\xff" * 10):
        assert lane_of(key, WRITERS) == WRITERS[zlib.crc32(key) % 3]
    assert lane_of(b"user-42", WRITERS) == lane_of(b"user-42", list(WRITERS))


def test_keys_spread_over_the_writers() -> None:
    counts = Counter(lane_of(b"key-%d" % i, WRITERS) for i in range(3000))
    assert set(counts) == set(WRITERS)
    assert all(800 < n < 1200 for n in counts.values()), counts


def test_the_mapping_changes_only_with_the_writer_set() -> None:
    keys = [b"k%d" % i for i in range(500)]
    before = [lane_of(k, WRITERS) for k in keys]
    assert [lane_of(k, sorted(reversed(WRITERS))) for k in keys] == before
    two = WRITERS[:2]
    after = [lane_of(k, two) for k in keys]
    assert set(after) == set(two)
    assert after != before  # a writer left: keys move (documented: order across changes)


# --- the producer's lane order ----------------------------------------------------------


def test_lane_blocks_go_one_at_a_time_in_lane_order() -> None:
    async def go() -> None:
        order = LaneOrder()
        lane = ("t", "w1")
        started: list[int] = []

        async def block(seq: int) -> None:
            await order.turn(lane, seq)
            started.append(seq)

        tasks = [asyncio.create_task(block(s)) for s in (3, 1, 0)]
        await asyncio.sleep(0)
        assert started == [0]  # the others wait for their predecessors
        assert order.busy_before(lane, 1) and not order.busy_before(lane, 0)
        order.done(lane, 2)  # finished early (e.g. an empty block never sent): no turn yet
        await asyncio.sleep(0)
        assert started == [0]
        order.done(lane, 0)
        await asyncio.sleep(0)
        assert started == [0, 1]
        order.done(lane, 1)  # 2 is done already: 3 goes
        await asyncio.sleep(0)
        assert started == [0, 1, 3]
        await asyncio.gather(*tasks)
        other = ("t", "w2")  # lanes are independent
        await asyncio.wait_for(order.turn(other, 0), 1)

    asyncio.run(go())


# --- the keyed WRITE flag ---------------------------------------------------------------


def test_the_keyed_flag_round_trips_and_plain_writes_stay_byte_identical() -> None:
    plain = encode_write_header("t", Ack.ALL)
    assert plain == b"\x02\x00\x00\x01t"
    keyed = encode_write_header("t", Ack.ALL, keyed=True)
    assert keyed == b"\x02\x01\x00\x01t"
    assert decode_write_request(keyed + b"blk")[3] is True
    assert decode_write_request(plain + b"blk")[3] is False
    ack, topic, block = decode_write(keyed + b"blk")
    assert (ack, topic, bytes(block)) == (Ack.ALL, "t", b"blk")
    with pytest.raises(MalformedError, match="only 0x01"):
        decode_write_request(b"\x02\x03\x00\x01t")


# --- the broker: keyed batches notified in seal order -----------------------------------


class _GatedWriter(StorageWriter):
    """Stores batch N once gate N is set (absent: at once)."""

    name = "test"

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.calls = 0
        self.lock = threading.Lock()

    def store(self, topic: str, batch_id: str, created_ms: int, data: Any) -> StoredObject:
        with self.lock:
            self.calls += 1
            n = self.calls
        gate = self.gates.get(n)
        if gate is not None:
            assert gate.wait(10)
        return StoredObject("test", "b", f"k/{n}", len(data))


class _ManualSink:
    """Records every publish; each future is resolved by the test (Kafka's ack)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes | None, Future[Any]]] = []

    def publish(self, topic: str, notification: Any, *, key: bytes | None = None) -> Future[Any]:
        f: Future[Any] = Future()
        self.published.append((notification.key, key, f))
        return f

    def keys(self) -> list[str]:
        return [k for k, _, _ in self.published]


def _processor(writer: StorageWriter, sink: Any) -> TopicProcessor:
    cfg = TopicConfig.model_validate(
        {
            "name": "t",
            "storage": {"type": "devnull"},
            "notification": {"bootstrap_servers": "127.0.0.1:9"},
            "batch": {"bytes": 64 * 1024, "ms": 60_000, "max_blocks": 1},  # a batch per block
            "ring_size": 4,
        }
    )
    return TopicProcessor(
        cfg,
        cluster="c",
        broker_id="b1",
        writer=writer,
        sink=sink,
        executor=ThreadPoolExecutor(4),
        metrics=BrokerMetrics(),
        throttle_timeout=5.0,
        pool=BufferPool(64 << 20),
    )


def _block(seq: int) -> tuple[memoryview, Any]:
    data = encode_block(
        [(1, b"k", b"v%d" % seq, None)],
        producer_id=7,
        epoch=0,
        sequence=seq,
        compression=Compression.NONE,
    )
    return memoryview(data), decode_block_header(data)


async def _until(what: str, check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_keyed_batches_are_notified_in_seal_order_when_a_later_upload_finishes_first() -> None:
    async def go() -> None:
        writer, sink = _GatedWriter(), _ManualSink()
        first = threading.Event()
        writer.gates[1] = first  # batch 1's upload hangs until released
        proc = _processor(writer, sink)
        b1, _, _ = await proc.append(*_block(1), time.monotonic(), keyed=True)
        await _until("batch 1 uploading", lambda: writer.calls == 1)
        b2, _, _ = await proc.append(*_block(2), time.monotonic(), keyed=True)
        b3, _, _ = await proc.append(*_block(3), time.monotonic())  # unkeyed
        # Batches 2 and 3 are stored; only the unkeyed one may be notified before batch 1.
        await _until("batch 3 notified", lambda: sink.keys() == ["k/3"])
        await _until("batch 2 stored", lambda: writer.calls == 3)
        await asyncio.sleep(0.05)  # give a wrong implementation the chance to publish
        assert sink.keys() == ["k/3"] and sink.published[0][1] is None
        first.set()
        await _until("batch 1 notified", lambda: len(sink.published) == 2)
        assert sink.keys() == ["k/3", "k/1"]
        await asyncio.sleep(0.05)
        # Published, not acknowledged yet: batch 2 still waits for Kafka's ack of batch 1.
        assert len(sink.published) == 2 and not b2.done.done()
        sink.published[1][2].set_result(None)
        await _until("batch 2 notified", lambda: len(sink.published) == 3)
        assert sink.keys() == ["k/3", "k/1", "k/2"]
        assert [key for _, key, _ in sink.published] == [None, b"b1", b"b1"]
        for _, _, f in sink.published:
            if not f.done():
                f.set_result(None)
        for b in (b1, b2, b3):
            await asyncio.wait_for(b.done, 5)
        await proc.close()

    asyncio.run(go())


def test_a_failed_keyed_batch_does_not_block_the_next_one() -> None:
    async def go() -> None:
        writer, sink = _GatedWriter(), _ManualSink()
        proc = _processor(writer, sink)
        b1, _, _ = await proc.append(*_block(1), time.monotonic(), keyed=True)
        b2, _, _ = await proc.append(*_block(2), time.monotonic(), keyed=True)
        await _until("batch 1 published", lambda: len(sink.published) == 1)
        sink.published[0][2].set_exception(RuntimeError("kafka said no"))
        await _until("batch 2 published", lambda: len(sink.published) == 2)
        sink.published[1][2].set_result(None)
        with pytest.raises(Exception, match="kafka said no"):
            await asyncio.wait_for(b1.done, 5)
        assert (await asyncio.wait_for(b2.done, 5)).key == "k/2"
        await proc.close()

    asyncio.run(go())


def test_a_waiter_whose_turn_passed_while_it_waited_is_woken() -> None:
    """done() of a later block before the earlier ones must not strand that block's own
    waiter: once every block before it is done, it goes (no hang)."""

    async def run() -> list[int]:
        order = LaneOrder()
        gone: list[int] = []

        async def wait(seq: int) -> None:
            await order.turn("L", seq)
            gone.append(seq)

        t1 = asyncio.create_task(wait(1))
        await asyncio.sleep(0)  # t1 now waits for block 0
        order.done("L", 1)  # block 1 finished early (e.g. failed before its turn)
        order.done("L", 0)
        await asyncio.wait_for(t1, 5)
        return gone

    assert asyncio.run(run()) == [1]
