"""The client connection's request timing against a real TCP server on 127.0.0.1: one
timer bounds each request (the write, including waiting for the transport to drain, and
the answer); answered requests leave no timer or pending entry behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from memq.client.connection import ClientConnection
from memq.errors import RequestTimeoutError
from memq.formats.frames import FrameDecoder, Request, RequestType, encode_response, parse_frame


def _serve(
    answer: bool, read: asyncio.Event
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A server that reads frames only while ``read`` is set and answers PINGs with
    their body when ``answer``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(64 << 20)
        while True:
            await read.wait()
            data = await reader.read(1 << 20)
            if not data:
                return
            decoder.feed(data)
            for raw in decoder.frames():
                req = parse_frame(raw)
                assert isinstance(req, Request)
                if answer:
                    writer.write(encode_response(req.type, req.request_id, body=bytes(req.body)))

    return handle


def _run(answer: bool, test: Callable[[ClientConnection, asyncio.Event], Awaitable[None]]) -> None:
    async def go() -> None:
        read = asyncio.Event()
        read.set()
        server = await asyncio.start_server(_serve(answer, read), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await ClientConnection.open(f"127.0.0.1:{port}")
        try:
            await test(conn, read)
        finally:
            conn.close()
            server.close()

    asyncio.run(go())


def test_an_answered_request_returns_its_response_and_leaves_nothing_behind() -> None:
    async def test(conn: ClientConnection, read: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        resp = await conn.request(RequestType.PING, b"hello", timeout=5)
        assert bytes(resp.body) == b"hello"
        assert conn.in_flight == 0
        # the request's timer was cancelled: none is left scheduled on the loop
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]

    _run(True, test)


def test_an_unanswered_request_times_out_typed_and_is_forgotten() -> None:
    async def test(conn: ClientConnection, read: asyncio.Event) -> None:
        with pytest.raises(RequestTimeoutError, match="did not answer request"):
            await conn.request(RequestType.PING, b"x", timeout=0.2)
        assert conn.in_flight == 0

    _run(False, test)


def test_a_request_blocked_by_a_full_transport_times_out_and_the_connection_recovers() -> None:
    """The server stops reading: writes fill the socket and the transport pauses; a request
    then waits for the drain within its own timeout, and fails typed when it is over."""

    async def test(conn: ClientConnection, read: asyncio.Event) -> None:
        read.clear()
        big = bytes(1 << 20)
        while conn._drained.is_set():  # fill the kernel buffers and the transport
            await conn.send(RequestType.PING, big)
            await asyncio.sleep(0)  # let the loop try to flush (it cannot: nobody reads)
        with pytest.raises(RequestTimeoutError):
            await conn.request(RequestType.PING, b"late", timeout=0.3)
        assert conn.in_flight == 0
        read.set()  # the server reads again: the queued frames drain, answers flow
        resp = await conn.request(RequestType.PING, b"after", timeout=30)
        assert bytes(resp.body) == b"after"

    _run(True, test)
