"""memq.aio: cross-thread callbacks with one wake-up per burst; writes merged per loop turn."""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from memq.aio import COALESCE_BYTES, LoopInbox, WriteCoalescer


def _counting_wakeups(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Count the loop's call_soon_threadsafe calls (each one a self-pipe write)."""
    calls = [0]
    real = loop.call_soon_threadsafe

    def counted(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        return real(*args, **kw)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
    return calls


def test_a_burst_from_other_threads_runs_in_order_with_one_wakeup() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakeups = _counting_wakeups(loop)
        inbox = LoopInbox(loop)
        got: list[tuple[str, int]] = []
        done = asyncio.Event()

        def post(name: str) -> None:
            for i in range(500):
                inbox.call(got.append, (name, i))

        # The loop is busy (not draining) while two threads post: one wake-up for all.
        ts = [threading.Thread(target=post, args=(n,)) for n in ("a", "b")]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        inbox.call(done.set)
        await asyncio.wait_for(done.wait(), 10)
        assert wakeups[0] == 1
        for name in ("a", "b"):
            assert [i for n, i in got if n == name] == list(range(500))
        # Posted on the loop's own thread (known after a drain): no self-pipe write.
        inbox.call(got.append, ("loop", 0))
        await asyncio.sleep(0)
        assert got[-1] == ("loop", 0)
        assert wakeups[0] == 1

    asyncio.run(main())


def test_a_failing_callback_is_reported_and_the_rest_still_run() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        inbox = LoopInbox(loop)
        got: list[int] = []

        def boom() -> None:
            raise ValueError("bad callback")

        ran = asyncio.Event()

        def post() -> None:
            inbox.call(got.append, 1)
            inbox.call(boom)
            inbox.call(ran.set)

        t = threading.Thread(target=post)
        t.start()
        t.join()
        await asyncio.wait_for(ran.wait(), 10)
        assert got == [1]
        assert [type(c["exception"]) for c in reported] == [ValueError]

    asyncio.run(main())


def test_wrap_and_run_carry_results_errors_and_cancellation() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        inbox = LoopInbox.of(loop)
        assert LoopInbox.of(loop) is inbox  # shared by everything on the loop
        with ThreadPoolExecutor(1) as pool:
            assert await inbox.run(pool, pow, 2, 10) == 1024
            with pytest.raises(ZeroDivisionError):
                await inbox.run(pool, divmod, 1, 0)
            # Cancelling the asyncio side cancels a concurrent future not started yet.
            gate = threading.Event()
            blocker = inbox.run(pool, gate.wait, 10)
            queued: Future[int] = pool.submit(int, "7")
            waiting = inbox.wrap(queued)
            waiting.cancel()
            await asyncio.sleep(0)
            assert queued.cancelled()
            gate.set()
            assert await blocker is True
        # A concurrent future cancelled on its side cancels the asyncio one.
        cf: Future[int] = Future()
        fut = inbox.wrap(cf)
        cf.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(fut, 10)

    asyncio.run(main())


def test_posting_to_a_closed_loop_raises_and_a_late_completion_is_dropped() -> None:
    loop = asyncio.new_event_loop()
    inbox = LoopInbox(loop)
    cf: Future[int] = Future()
    inbox.wrap(cf)
    loop.close()
    with pytest.raises(RuntimeError):
        inbox.call(print, "never")
    cf.set_result(1)  # its done-callback posts to the closed loop: dropped, no error


class _Recorder(asyncio.WriteTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append(b"".join(bytes(d) for d in list_of_data))

    def is_closing(self) -> bool:
        return self.closing


def test_small_writes_in_one_loop_turn_go_out_as_one_write_in_order() -> None:
    async def main() -> None:
        t = _Recorder()
        out = WriteCoalescer(asyncio.get_running_loop(), t)
        for i in range(100):
            out.write(b"head%d|" % i, memoryview(b"body|"))
        assert t.writes == []  # nothing until the end of this turn
        await asyncio.sleep(0)
        assert t.writes == [b"".join(b"head%d|body|" % i for i in range(100))]

    asyncio.run(main())


def test_a_large_write_goes_out_at_once_after_what_was_pending() -> None:
    async def main() -> None:
        t = _Recorder()
        out = WriteCoalescer(asyncio.get_running_loop(), t)
        big = bytes(COALESCE_BYTES)
        out.write(b"a")
        out.write(b"hdr", big)  # written now, keeping back-pressure for large frames
        assert b"".join(t.writes) == b"ahdr" + big
        out.write(b"z")
        await asyncio.sleep(0)
        assert b"".join(t.writes) == b"ahdr" + big + b"z"

    asyncio.run(main())


def test_flush_before_close_sends_what_is_pending_and_a_closing_transport_gets_nothing() -> None:
    async def main() -> None:
        t = _Recorder()
        out = WriteCoalescer(asyncio.get_running_loop(), t)
        out.write(b"last words")
        out.flush()
        assert t.writes == [b"last words"]
        out.write(b"too late")
        t.closing = True
        await asyncio.sleep(0)
        assert t.writes == [b"last words"]

    asyncio.run(main())


def test_coalesced_frames_arrive_intact_over_a_real_socket() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        b.setblocking(False)
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        out = WriteCoalescer(loop, transport)
        sent = [bytes([i % 251]) * (i * 37 % 5000) for i in range(300)]
        for s in sent:
            out.write(len(s).to_bytes(4, "big"), s)
        want = b"".join(len(s).to_bytes(4, "big") + s for s in sent)
        got = bytearray()
        while len(got) < len(want):
            got += await loop.sock_recv(b, 1 << 20)
        assert bytes(got) == want
        transport.close()
        b.close()

    asyncio.run(main())


def test_a_drain_runs_what_was_posted_before_it_and_lets_other_handles_run_between() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        inbox = LoopInbox(loop)
        order: list[str] = []
        done = asyncio.Event()

        def first() -> None:
            loop.call_soon(order.append, "handle")
            inbox.call(order.append, "posted while draining")
            inbox.call(done.set)

        inbox.call(first)
        await asyncio.wait_for(done.wait(), 10)
        assert order == ["handle", "posted while draining"]

    asyncio.run(main())


def test_inboxes_do_not_keep_their_loops_alive() -> None:
    import gc
    import weakref

    loop = asyncio.new_event_loop()
    LoopInbox.of(loop).call(list, "posted, never drained")
    ref = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None


def test_empty_parts_are_not_written() -> None:
    async def main() -> None:
        t = _Recorder()
        out = WriteCoalescer(asyncio.get_running_loop(), t)
        out.write(b"", b"x", memoryview(b""))
        await asyncio.sleep(0)
        assert t.writes == [b"x"]

    asyncio.run(main())
