"""Every task boundary fails closed: whatever breaks, every waiter gets a typed error.

These run the real producer and topic processor against nothing (an address that
refuses connections) or against in-process stand-ins for the object store and the
notification sink, which only these boundary tests need: the failures they inject (a
writer raising a bare RuntimeError, a hang) are bugs no real server can be asked for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool
from memq.broker.processor import TopicProcessor
from memq.config import TopicConfig
from memq.errors import (
    ClientClosedError,
    MemqError,
    ThrottledError,
)
from memq.formats import Compression, decode_block_header, encode_block
from memq.producer import BufferFullError, Producer
from memq.producer.accumulator import SealedBlock
from memq.producer.sender import INLINE_ENCODE_BYTES
from memq.storage_handlers.base import StorageWriter, StoredObject

REFUSED = "127.0.0.1:1"  # nothing listens on port 1: every connection is refused


def _topic(**over: Any) -> TopicConfig:
    data: dict[str, Any] = {
        "name": "t",
        "storage": {"type": "devnull"},
        "notification": {"bootstrap_servers": "127.0.0.1:9"},
        "batch": {"bytes": 64 * 1024, "ms": 60_000},
        "ring_size": 2,
        **over,
    }
    return TopicConfig.model_validate(data)


class _Writer(StorageWriter):
    name = "test"

    def __init__(self, fail: BaseException | None = None, gate: threading.Event | None = None):
        self.fail = fail
        self.gate = gate

    def store(self, topic: str, batch_id: str, created_ms: int, data: Any) -> StoredObject:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return StoredObject("test", "b", f"k/{batch_id}", len(data))


class _Sink:
    def publish(self, topic: str, notification: Any, *, key: bytes | None = None) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(None)
        return f


def _processor(writer: StorageWriter, **over: Any) -> TopicProcessor:
    return TopicProcessor(
        _topic(**over),
        cluster="c",
        broker_id="b1",
        writer=writer,
        sink=_Sink(),
        executor=ThreadPoolExecutor(2),
        metrics=BrokerMetrics(),
        throttle_timeout=5.0,
        pool=BufferPool(64 << 20),
    )


def _block(seq: int, size: int = 100) -> tuple[memoryview, Any]:
    data = encode_block(
        [(1, None, b"x" * size, None)],
        producer_id=7,
        epoch=0,
        sequence=seq,
        compression=Compression.NONE,
    )
    return memoryview(data), decode_block_header(data)


def test_an_unexpected_writer_exception_fails_the_batch_with_a_typed_error() -> None:
    async def go() -> None:
        writer = _Writer(fail=RuntimeError("boom"))
        proc = _processor(writer, batch={"bytes": 65536, "ms": 60_000, "max_blocks": 1})
        block, header = _block(1)  # fills the batch: sealed and uploaded at once
        batch, _, dup = await proc.append(block, header, time.monotonic())
        assert not dup
        await asyncio.wait_for(asyncio.wait({batch.done}), 10)
        err = batch.done.exception()
        assert isinstance(err, MemqError) and "boom" in str(err)
        # The block left the dedup window: its retry is stored anew, not "duplicate".
        writer.fail = None
        again, _, dup = await proc.append(block, header, time.monotonic())
        assert not dup and again is not batch
        assert (await asyncio.wait_for(again.done, 10)).key.startswith("k/")
        await proc.close()

    asyncio.run(go())


def test_a_freed_buffer_goes_to_the_writer_that_waited_longest() -> None:
    """ring_size 2: both of the topic's buffers uploading (held by a gate); a queued writer
    must get the first buffer freed, never a writer that arrives later."""

    async def go() -> None:
        gate = threading.Event()
        proc = _processor(_Writer(gate=gate), batch={"bytes": 65536, "ms": 60_000, "max_blocks": 1})
        order: list[str] = []
        for seq in (1, 2):  # each fills a batch (count trigger) and seals it
            block, header = _block(seq)
            await proc.append(block, header, time.monotonic())

        async def write(name: str, seq: int) -> None:
            block, header = _block(seq)
            try:
                await proc.append(block, header, time.monotonic())
                order.append(name)
            except ThrottledError:
                order.append(f"{name}:throttled")

        first = asyncio.create_task(write("queued", 3))
        await asyncio.sleep(0)  # `first` queues for a buffer
        gate.set()  # uploads finish; buffers come back one by one
        late = asyncio.create_task(write("newcomer", 4))
        await asyncio.gather(first, late)
        assert order[0] == "queued" and "queued:throttled" not in order
        await proc.close()

    asyncio.run(go())


class _BrokenExecutor(ThreadPoolExecutor):
    def submit(self, *_a: Any, **_k: Any) -> Any:
        raise RuntimeError("encoder pool broken")


def _broken_encode(*_a: Any, **_k: Any) -> bytes:
    raise RuntimeError("encoder broken")


@pytest.mark.parametrize("value_bytes", [1, 32 * 1024])
def test_unexpected_exception_in_the_send_path_fails_the_record(
    monkeypatch: pytest.MonkeyPatch, value_bytes: int
) -> None:
    """The send task's first step (encoding: on the I/O loop for a small block, in the
    encoder pool for a large one) raises something unexpected: the record fails with it."""
    p = Producer({"bootstrap.servers": REFUSED, "audit.enable": False})
    try:
        if value_bytes > INLINE_ENCODE_BYTES:
            p._sender.encoder = _BrokenExecutor(1)
            expected = "encoder pool broken"
        else:
            monkeypatch.setattr(SealedBlock, "encode", _broken_encode)
            expected = "encoder broken"
        fut = p.produce("t", b"v" * value_bytes)
        p.flush(0.1)
        err = fut.exception(timeout=30)
        assert isinstance(err, MemqError) and expected in str(err)
        assert p._sender.internal_errors == 1
    finally:
        p.close(1)


def test_close_racing_produce_resolves_every_future() -> None:
    p = Producer(
        {"bootstrap.servers": REFUSED, "audit.enable": False, "delivery.timeout.ms": 60_000}
    )
    futures: list[Any] = []
    refused: list[BaseException] = []
    started = threading.Event()

    def spin() -> None:
        started.set()
        for i in range(100_000):
            try:
                futures.append(p.produce("t", b"%d" % i))
            except ClientClosedError as e:
                refused.append(e)
                return

    t = threading.Thread(target=spin)
    t.start()
    started.wait(10)
    deadline = time.monotonic() + 30
    while len(futures) < 10 and time.monotonic() < deadline:
        time.sleep(0.001)  # polling with a deadline: close once records are in flight
    p.close(0.2)
    t.join(30)
    assert refused, "produce() after close() must raise ClientClosedError"
    assert futures
    assert all(f.done() for f in futures), "a record produced before close() never resolved"
    assert all(isinstance(f.exception(0), MemqError) for f in futures)


def test_max_block_ms_zero_never_waits_for_metadata() -> None:
    p = Producer({"bootstrap.servers": REFUSED, "audit.enable": False, "max.block.ms": 0})
    done = threading.Event()
    try:
        threading.Thread(target=lambda: (p.produce("t", b"v"), done.set()), daemon=True).start()
        assert done.wait(10), "produce() blocked although max.block.ms=0"
    finally:
        p.close(0.1)


def test_produce_from_a_delivery_callback_never_freezes_the_io_thread() -> None:
    p = Producer(
        {
            "bootstrap.servers": REFUSED,
            "audit.enable": False,
            "buffer.memory": 1 << 20,
            "batch.size": 1 << 20,
            "delivery.timeout.ms": 1000,
        }
    )
    outcome: list[BaseException | str] = []
    fired = threading.Event()

    def again(err: object, _md: object) -> None:
        # On the I/O thread: metadata for a new topic and buffer space are both things only
        # this thread could provide, so produce() must not wait for either.
        try:
            for i in range(3):
                p.produce(f"other-{i}", b"x" * 1000)
            outcome.append("queued")
        except BufferFullError as e:
            outcome.append(e)
        finally:
            fired.set()

    p.produce("u", b"y", on_delivery=again)
    assert fired.wait(30), "the delivery callback did not finish: the I/O thread froze"
    assert outcome and (outcome[0] == "queued" or isinstance(outcome[0], BufferFullError))
    p.close(1)


def _in_thread(fn: Any, seconds: float = 10) -> list[Any]:
    """Run ``fn`` in a daemon thread; its result or exception, or [] if it hangs."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out


def test_a_record_larger_than_a_new_blocks_first_reserve_is_taken_or_refused_never_spun() -> None:
    # A block opens with room for its first record: a record above the 16 KiB first
    # reservation never makes produce() seal empty blocks in a loop.
    p = Producer(
        {
            "bootstrap.servers": REFUSED,
            "audit.enable": False,
            "buffer.memory": 1 << 20,
            "batch.size": 4 << 20,
            "max.block.ms": 0,
            "linger.ms": 60_000,
            "compression.type": "none",
        }
    )
    try:
        # Bigger than buffer.memory, nothing else buffered: taken (as one block).
        (first,) = _in_thread(lambda: p.produce("t", b"a" * ((1 << 20) + 10)))
        assert not isinstance(first, BaseException)
        # Now the buffer is over-full: a second large record is refused at once.
        (second,) = _in_thread(lambda: p.produce("u", b"b" * 200_000))
        assert isinstance(second, BufferFullError)
    finally:
        p.close(0.1)


def test_a_large_record_waits_max_block_ms_then_raises_when_memory_stays_short() -> None:
    p = Producer(
        {
            "bootstrap.servers": REFUSED,
            "audit.enable": False,
            "buffer.memory": 1 << 20,
            "batch.size": 1 << 20,
            "max.block.ms": 300,
            "linger.ms": 60_000,
            "compression.type": "none",
        }
    )
    try:
        for i in range(9):  # ~900 KB held by open blocks that linger for a minute
            p.produce(f"t{i}", b"x" * 100_000)
        t0 = time.monotonic()
        (got,) = _in_thread(lambda: p.produce("big", b"y" * 200_000))
        assert isinstance(got, BufferFullError)
        assert 0.25 <= time.monotonic() - t0 < 5
    finally:
        p.close(0.1)


def test_close_returns_and_fails_what_is_left_when_the_io_loop_does_not_stop_its_sends(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """close() waits a bounded time for the I/O loop to cancel its sends; if that does
    not finish, it still stops the loop and fails every record left (never raises)."""
    import memq.producer.producer as producer_module
    from memq.producer.sender import Sender

    async def never(_self: Sender) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Sender, "shutdown", never)
    monkeypatch.setattr(producer_module, "_SHUTDOWN_WAIT_S", 0.5)
    p = Producer({"bootstrap.servers": REFUSED, "audit.enable": False, "linger.ms": 0})
    futures = [p.produce("t", b"v%d" % i) for i in range(3)]
    t0 = time.monotonic()
    assert p.close(0.1) == 3
    assert time.monotonic() - t0 < 5
    assert all(isinstance(f.exception(0), ClientClosedError) for f in futures)
    assert "did not stop its sends" in caplog.text


def test_a_thread_waiting_for_buffer_memory_is_woken_only_once_it_fits() -> None:
    """Give-backs too small for any waiter wake nobody (at full load each wake-up was a
    lock hand-off and a GIL switch, and the woken producer waited again); one that
    makes room wakes the waiter, which then takes its reservation."""
    p = Producer(
        {"bootstrap.servers": REFUSED, "audit.enable": False, "buffer.memory": 1 << 20,
         "max.block.ms": 30_000}
    )  # fmt: skip
    wakes: list[int] = []
    notify_all = p._changed.notify_all

    def counted() -> None:
        wakes.append(1)
        notify_all()

    p._changed.notify_all = counted  # type: ignore[method-assign]
    try:
        with p._lock:
            p._buffered = (1 << 20) - 100  # as if blocks in flight held it
        got: Future[None] = Future()

        def reserve() -> None:
            with p._lock:
                p._reserve(200_000)
            got.set_result(None)

        threading.Thread(target=reserve, daemon=True).start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until it waits for memory
            with p._lock:
                if p._needs == [200_000]:
                    break
            time.sleep(0.001)
        with p._lock:
            assert p._needs == [200_000]
            p._buffered -= 100_000  # not enough for it: nobody is woken
            p._freed()
            assert wakes == []
            p._buffered -= 150_000  # now it fits
            p._freed()
            assert wakes == [1]
        got.result(10)
        with p._lock:
            assert p._buffered == (1 << 20) - 100 - 250_000 + 200_000
            assert p._needs == []
            p._buffered = 0
    finally:
        p.close(0.1)


def test_a_record_over_the_topic_limit_learned_late_is_refused_at_the_call() -> None:
    # A block opened before the topic's metadata came (at batch.size) takes no record
    # over the topic's max_block_bytes once it is known: produce() refuses it.
    from memq.errors import MessageTooLargeError
    from memq.protocol import TopicMetadata

    p = Producer({"bootstrap.servers": REFUSED, "audit.enable": False, "max.block.ms": 0,
                  "linger.ms": 60_000, "batch.size": 1 << 20})  # fmt: skip
    try:
        for _ in range(3):  # no metadata: the block grows toward batch.size (1 MiB)
            p.produce("t", b"v" * 100_000)
        meta = TopicMetadata(name="t", max_block_bytes=64 * 1024)
        p._sender.meta.cached = lambda topic: meta  # type: ignore[method-assign]
        with pytest.raises(MessageTooLargeError):
            p.produce("t", b"w" * 80_000)  # (room for it in the open block)
        p.produce("t", b"x" * 1000)  # (a small one is taken)
    finally:
        p.close(0.1)
