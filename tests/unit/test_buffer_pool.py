"""The broker-wide batch buffer pool: bounded memory, reuse, fairness, per-topic caps."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool, buffer_bytes, size_classes
from memq.broker.processor import TopicProcessor
from memq.errors import BrokerShuttingDownError
from memq.formats import Compression, decode_block_header, encode_batch, encode_block

CAP, BLOCKS = 64 * 1024, 16
ONE = buffer_bytes(CAP, BLOCKS)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_idle_topics_hold_nothing_and_buffers_are_reused() -> None:
    async def go() -> None:
        pool = BufferPool(4 * ONE, BrokerMetrics())
        for i in range(1000):  # a thousand topics, one batch each, one after the other
            b = await pool.acquire(f"t{i}", CAP, BLOCKS, 4, 1.0)
            pool.release(f"t{i}", b)
        assert pool.allocated_bytes == ONE  # one buffer, reused by every topic
        assert pool.held_bytes == 0 and pool.free_bytes == pool.limit

    run(go())


def test_a_topic_at_its_cap_waits_without_holding_up_other_topics() -> None:
    async def go() -> None:
        pool = BufferPool(10 * ONE)
        hot = [await pool.acquire("hot", CAP, BLOCKS, 2, 1.0) for _ in range(2)]
        blocked = asyncio.create_task(pool.acquire("hot", CAP, BLOCKS, 2, 5.0))
        await asyncio.sleep(0)
        assert not blocked.done()  # the hot topic is at its cap of 2
        other = await pool.acquire("cold", CAP, BLOCKS, 2, 1.0)  # not held up by it
        pool.release("hot", hot[0])  # the hot topic's own release serves it
        assert await asyncio.wait_for(blocked, 1.0) is hot[0]
        pool.release("cold", other)

    run(go())


def test_waiters_are_served_first_come_first_served_across_topics() -> None:
    async def go() -> None:
        pool = BufferPool(2 * ONE)
        held = [await pool.acquire("a", CAP, BLOCKS, 4, 1.0) for _ in range(2)]
        order: list[str] = []

        async def want(topic: str) -> None:
            b = await pool.acquire(topic, CAP, BLOCKS, 4, 5.0)
            order.append(topic)
            pool.release(topic, b)

        waiting = [asyncio.create_task(want(t)) for t in ("b", "c", "d")]
        await asyncio.sleep(0)
        late = pool.acquire("e", CAP, BLOCKS, 4, 0.0)  # a newcomer while others queue
        with pytest.raises(TimeoutError):
            await late
        for b in held:
            pool.release("a", b)
        await asyncio.gather(*waiting)
        assert order == ["b", "c", "d"]

    run(go())


def test_memory_of_free_buffers_of_another_shape_is_reclaimed() -> None:
    async def go() -> None:
        pool = BufferPool(3 * ONE)
        small = [await pool.acquire(f"s{i}", CAP, BLOCKS, 4, 1.0) for i in range(3)]
        for i, b in enumerate(small):
            pool.release(f"s{i}", b)
        big = await pool.acquire("big", 2 * CAP, BLOCKS, 4, 1.0)  # needs two small ones' room
        assert big.capacity == 2 * CAP
        assert pool.allocated_bytes <= pool.limit

    run(go())


def test_closing_a_topic_fails_its_waiters_with_the_given_error() -> None:
    async def go() -> None:
        pool = BufferPool(ONE)
        held = await pool.acquire("t", CAP, BLOCKS, 4, 1.0)
        waiter = asyncio.create_task(pool.acquire("t", CAP, BLOCKS, 4, 5.0))
        await asyncio.sleep(0)
        pool.fail_waiters("t", BrokerShuttingDownError("stopping"))
        with pytest.raises(BrokerShuttingDownError):
            await waiter
        pool.release("t", held)
        assert pool.waiting == 0

    run(go())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([CAP, 2 * CAP]), st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_allocated_memory_never_exceeds_the_limit(ops: list[tuple[int, int, bool]]) -> None:
    """Random acquires (with timeouts) and releases over six topics of two shapes."""

    async def go() -> None:
        pool = BufferPool(5 * ONE)
        held: dict[str, list[object]] = {}
        for topic_no, cap, release in ops:
            topic = f"t{topic_no}"
            if release and held.get(topic):
                pool.release(topic, held[topic].pop())  # type: ignore[arg-type]
            else:
                try:
                    b = await pool.acquire(topic, cap, BLOCKS, 3, 0.0)
                    held.setdefault(topic, []).append(b)
                except TimeoutError:
                    pass
            assert pool.allocated_bytes <= pool.limit
            assert all(pool.held(t) == len(bs) <= 3 for t, bs in held.items())
        for topic, bs in held.items():
            for b in bs:
                pool.release(topic, b)  # type: ignore[arg-type]
        assert pool.held_bytes == 0

    run(go())


def test_size_classes_climb_by_eight_to_the_batch_size() -> None:
    assert size_classes(8 << 20, 4096) == [
        (64 << 10, 1024),
        (512 << 10, 4096),
        (4 << 20, 4096),
        (8 << 20, 4096),
    ]
    assert size_classes(32 << 10, 16) == [(32 << 10, 16)]


def _processor(pool: BufferPool, name: str, stored: list[bytes]) -> TopicProcessor:
    """A topic processor (batch.bytes 8 MiB, batch.ms 60 s) storing its objects in
    ``stored`` and publishing nowhere."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from memq.config import TopicConfig
    from memq.storage_handlers.base import StorageWriter, StoredObject

    class Keep(StorageWriter):
        name = "keep"

        def store(self, topic: str, batch_id: str, created_ms: int, data: object) -> StoredObject:
            stored.append(bytes(data))  # type: ignore[call-overload]
            return StoredObject("keep", "b", batch_id, len(stored[-1]))

    class Sink:
        def publish(
            self, topic: str, notification: object, *, key: bytes | None = None
        ) -> Future[object]:
            f: Future[object] = Future()
            f.set_result(None)
            return f

    cfg = TopicConfig.model_validate(
        {
            "name": name,
            "storage": {"type": "devnull"},
            "notification": {"bootstrap_servers": "127.0.0.1:9"},
            "batch": {"bytes": 8 << 20, "ms": 60_000},
        }
    )
    return TopicProcessor(
        cfg, cluster="c", broker_id="b", writer=Keep(), sink=Sink(),  # type: ignore[arg-type]
        executor=ThreadPoolExecutor(1), metrics=BrokerMetrics(),
        throttle_timeout=5.0, pool=pool,
    )  # fmt: skip


def _block(seq: int, size: int) -> bytes:
    return encode_block(
        [(seq, None, bytes([seq % 251]) * size, None)],
        producer_id=2,
        epoch=0,
        sequence=seq,
        compression=Compression.NONE,
    )


def test_a_growing_batch_moves_up_the_classes_and_stores_the_exact_object() -> None:
    """Blocks appended one by one through every size class end up byte-identical to a
    batch encoded in one go; the trickle topics meanwhile hold only small buffers."""
    stored: list[bytes] = []

    async def go() -> None:
        pool = BufferPool(256 << 20)
        trickle = [_processor(pool, f"small-{i}", stored) for i in range(200)]
        one = encode_block([(1, None, b"x" * 100, None)], producer_id=1, epoch=0, sequence=0,
                           compression=Compression.NONE)  # fmt: skip
        for i, p in enumerate(trickle):
            await p.append(memoryview(one), decode_block_header(one), time.monotonic())
            assert pool.held(f"small-{i}") == 1
        assert pool.allocated_bytes == 200 * buffer_bytes(*size_classes(8 << 20, 4096)[0])

        big = _processor(pool, "big", stored)
        blocks = [_block(i, 30_000) for i in range(200)]
        for b in blocks:
            batch, _, _ = await big.append(memoryview(b), decode_block_header(b), time.monotonic())
        assert batch.builder.capacity == 8 << 20  # climbed to the last class
        await big.close()
        assert stored == [encode_batch(blocks)]
        for p in trickle:
            await p.close()
        assert pool.held_bytes == 0

    run(go())


def test_a_batch_starts_in_the_class_its_topics_last_batch_needed() -> None:
    """A steady hot topic's next batch starts in the full-size buffer (no copies up
    through the classes); a topic whose last batch was small starts small again."""
    stored: list[bytes] = []

    async def go() -> None:
        pool = BufferPool(256 << 20)
        hot = _processor(pool, "hot", stored)
        blocks = [_block(i, (1 << 20) - 100) for i in range(9)]
        for b in blocks[:8]:
            first, _, _ = await hot.append(memoryview(b), decode_block_header(b), time.monotonic())
        b = blocks[8]
        second, _, _ = await hot.append(memoryview(b), decode_block_header(b), time.monotonic())
        assert second is not first  # the eighth block filled the first batch
        assert second.builder.capacity == 8 << 20  # not the 4 MiB class one block needs
        hot.seal_if_open(second, "age")
        small = _block(9, 100)
        third, _, _ = await hot.append(
            memoryview(small), decode_block_header(small), time.monotonic()
        )
        assert third.builder.capacity == 4 << 20  # the class the 1 MiB batch needed
        hot.seal_if_open(third, "age")
        small2 = _block(10, 100)
        fourth, _, _ = await hot.append(
            memoryview(small2), decode_block_header(small2), time.monotonic()
        )
        assert fourth.builder.capacity == 64 << 10
        await hot.close()
        assert stored == [encode_batch(blocks[:8]), encode_batch(blocks[8:]),
                          encode_batch([small]), encode_batch([small2])]  # fmt: skip

    run(go())
