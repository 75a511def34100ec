"""A fault-injecting TCP proxy (with S3-aware HTTP faults) for tests and chaos runs.

Put it in front of a real server (moto, Kafka) and switch modes while traffic flows:

- ``pass``: forward bytes both ways (optionally with ``delay`` seconds added per chunk);
- ``reset``: accept and immediately reset new connections;
- ``refuse``: stop listening (connection refused), like a server that is down;
- ``stall``: accept and read, never answer (a hung server: clients hit their timeouts);
- ``http_503``: answer every HTTP request with S3's ``503 SlowDown`` and close.

Changing the mode cuts existing connections (``cut_existing``), so pooled keep-alive
connections feel the fault at once. ``set_mode(mode, count=n, then="pass")`` applies a
fault to the next ``n`` connections only, then switches to ``then``: a deterministic
fault schedule with no timing race. Runs its own event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from concurrent.futures import Future
from typing import Literal

__all__ = ["FaultProxy", "Mode"]

Mode = Literal["pass", "reset", "refuse", "stall", "http_503"]

_SLOWDOWN = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
_SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = "127.0.0.1"
        self.port = listen_port
        self.mode: Mode = "pass"
        self.delay = 0.0
        self._remaining: int | None = None
        self._then: Mode = "pass"
        self.counts: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    # --- control (any thread) -------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close(stop_listening=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def set_mode(
        self,
        mode: Mode,
        *,
        delay: float = 0.0,
        cut_existing: bool = True,
        count: int | None = None,
        then: Mode = "pass",
    ) -> None:
        """Switch mode; with ``count``, only for the next ``count`` connections."""
        self._call(self._set_mode(mode, delay, cut_existing, count, then))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def _call(self, coro: object) -> None:
        fut: Future[None] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        fut.result(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- loop side ----------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self, *, stop_listening: bool) -> None:
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._conns.clear()
        if stop_listening and self._server is not None:
            self._server.close()
            self._server = None

    async def _set_mode(
        self, mode: Mode, delay: float, cut: bool, count: int | None = None, then: Mode = "pass"
    ) -> None:
        self.mode, self.delay = mode, delay
        self._remaining, self._then = count, then
        if cut:
            await self._close(stop_listening=False)
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse" and self._server is None:
            await self._listen()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        self.counts[mode] += 1
        if self._remaining is not None:
            self._remaining -= 1
            if self._remaining <= 0:
                self.mode, self._remaining = self._then, None
        self._conns.add(writer)
        try:
            if mode == "reset":
                writer.transport.abort()
            elif mode == "stall":
                while await reader.read(65536):
                    pass
            elif mode == "http_503":
                await self._slowdown(reader, writer)
            else:
                await self._forward(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _slowdown(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.LimitOverrunError, ValueError):
            await reader.readuntil(b"\r\n\r\n")
        writer.write(_SLOWDOWN % (len(_SLOWDOWN_BODY), _SLOWDOWN_BODY))
        await writer.drain()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._conns.add(up_writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._conns.discard(up_writer)
