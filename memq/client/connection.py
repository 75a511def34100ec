"""Client side of the broker protocol: one TCP connection, many requests in flight.

Responses are matched to requests by id. Every request has a deadline; a lost
connection fails every request in flight with a retriable ConnectionLostError.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

from memq.aio import WriteCoalescer
from memq.errors import (
    AuthenticationError,
    BrokerUnreachableError,
    ConnectionLostError,
    MemqError,
    MemqFormatError,
    RequestTimeoutError,
    StatusCode,
    WrongProtocolError,
    error_for_status,
)
from memq.formats.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    RequestType,
    Response,
    foreign_protocol,
    kafka_api_versions_probe,
    parse_frame,
    request_frame_parts,
)

if TYPE_CHECKING:
    from memq.security import ClientSecurity

__all__ = ["ClientConnection", "parse_address"]

log = logging.getLogger(__name__)

#: Kernel send buffer asked for (the kernel may grant less).
SEND_BUFFER = 4 << 20
#: Transport buffer above which writers wait (pause_writing/resume_writing).
WRITE_HIGH_WATER = 2 << 20
#: Deadline of the Kafka probe of an address that closed without answering.
PROBE_TIMEOUT = 2.0
_WHERE = "MemQ clients connect to a broker's MemQ port (`memq dev status` lists each one)"
_PEERS = {
    "Kafka": "it is a Kafka broker (such as the local stack's notification Kafka) or a "
    "MemQ broker's Kafka port, where Kafka producers write",
    "HTTP": "it is a MemQ broker's HTTP port (/metrics, HTTP ingest) or another web server",
    "TLS": "it expects TLS: set security.protocol=ssl (and ssl.ca.location), or check the port",
}


def wrong_protocol(address: str, kind: str) -> WrongProtocolError:
    """The error for an address that answered in protocol ``kind`` (foreign_protocol)."""
    return WrongProtocolError(f"{address} speaks the {kind} protocol: {_PEERS[kind]}; {_WHERE}")


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise MemqError(f"bad broker address {address!r}: use host:port")
    return host.strip("[]"), int(port)


class ClientConnection(asyncio.Protocol):
    """Use :meth:`open` to connect; then :meth:`request` from the owning event loop."""

    def __init__(self, address: str, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.address = address
        self.decoder = FrameDecoder(max_frame_size)
        self.transport: asyncio.Transport | None = None
        #: Frames written in one turn of the event loop go out in one send (memq.aio).
        self._out: WriteCoalescer | None = None
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._ids = itertools.count(1)
        self._lost: MemqError | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        #: The first bytes received, until a valid frame came: a wrong address (a Kafka
        #: or HTTP port) is told by them (foreign_protocol).
        self._head = bytearray()
        self._answered = False
        self._tls = False
        self._probe: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        timeout: float = 10.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        security: ClientSecurity | None = None,
    ) -> ClientConnection:
        """Connect (TLS when ``security`` has a context) and authenticate with its token."""
        host, port = parse_address(address)
        loop = asyncio.get_running_loop()
        ctx = security.ssl_context if security is not None else None
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(
                    lambda: cls(address, max_frame_size),
                    host,
                    port,
                    ssl=ctx,
                    server_hostname=host if ctx is not None else None,
                ),
                timeout,
            )
        except TimeoutError:
            raise BrokerUnreachableError(
                f"connecting to broker {address} timed out after {timeout} s"
            ) from None
        except ssl.SSLCertVerificationError as e:
            raise AuthenticationError(
                f"TLS: broker {address}'s certificate was not accepted ({e.verify_message}): "
                "check ssl.ca.location (the CA that signed it) and the host name"
            ) from None
        except ssl.SSLError as e:
            raise ConnectionLostError(
                f"TLS handshake with broker {address} failed ({e.reason or e}): does it speak "
                "TLS (security.protocol), and does it require a client certificate?"
            ) from None
        except OSError as e:
            raise BrokerUnreachableError(
                f"cannot connect to broker {address}: {e.strerror or e}"
            ) from None
        if security is not None and security.token is not None:
            token = security.token.get_secret_value().encode()
            try:
                await proto.request(RequestType.AUTH, token, timeout=timeout)
            except BaseException:
                proto.close()
                raise
        return proto

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Large socket buffer and a bounded transport buffer: writes mostly go straight to
        # the socket (asyncio before 3.12 copies whatever it must buffer, twice).
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._out = WriteCoalescer(asyncio.get_running_loop(), transport)
        self._tls = transport.get_extra_info("ssl_object") is not None

    def data_received(self, data: bytes) -> None:
        if not self._answered and len(self._head) < 8:
            self._head += data[: 8 - len(self._head)]
        self.decoder.feed(data)
        try:
            for raw in self.decoder.frames():
                resp = parse_frame(raw)
                if not isinstance(resp, Response):
                    raise MemqFormatError("broker sent a request frame")
                self._answered = True
                if resp.request_id == 0 and resp.status != StatusCode.OK:
                    # A connection-level error (the broker closes after it).
                    self._fail_all(error_for_status(resp.status, resp.error))
                    continue
                fut = self._pending.pop(resp.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
        except MemqFormatError as e:
            kind = None if self._answered else foreign_protocol(self._head)
            self._fail_all(
                wrong_protocol(self.address, kind)
                if kind is not None
                else ConnectionLostError(f"broker {self.address} sent a corrupt frame: {e}")
            )
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        lost = ConnectionLostError(f"connection to broker {self.address} closed{reason}")
        if self._answered or self._head or self._tls or not self._pending or self._lost:
            self._fail_all(lost)
            return
        # Closed before any answer: a Kafka broker closes on a MemQ request it cannot
        # parse. Ask it in Kafka's protocol (bounded) before failing the requests.
        self._probe = asyncio.get_running_loop().create_task(self._fail_after_probe(lost))

    async def _fail_after_probe(self, lost: ConnectionLostError) -> None:
        err: MemqError = lost
        try:
            if await _speaks_kafka(self.address, PROBE_TIMEOUT):
                err = wrong_protocol(self.address, "Kafka")
        except Exception:  # (the probe failed: the connection's own error stands)
            log.debug("probing %s in Kafka's protocol failed", self.address, exc_info=True)
        finally:  # (cancelled too: every waiter gets an error)
            self._fail_all(err)

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    def _fail_all(self, err: MemqError) -> None:
        if self._lost is None:
            self._lost = err
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(type(err)(str(err), body=err.body))
        self._drained.set()

    # --- API ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._lost is not None or self.transport is None or self.transport.is_closing()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _next_id(self) -> int:
        rid = next(self._ids) & 0xFFFFFFFF
        if rid == 0:
            rid = next(self._ids) & 0xFFFFFFFF
        return rid

    def _check_open(self) -> asyncio.Transport:
        if self._lost is not None:
            raise type(self._lost)(str(self._lost))
        if self.transport is None or self.transport.is_closing():
            raise ConnectionLostError(f"connection to broker {self.address} is closed")
        return self.transport

    async def _write(self, req_type: int, rid: int, body: tuple[bytes | memoryview, ...]) -> None:
        """Write one frame once the transport's buffer is below its high-water mark
        (back-pressure instead of an unbounded buffer)."""
        if not self._drained.is_set():
            await self._drained.wait()
        self._write_now(req_type, rid, body)

    def _write_now(self, req_type: int, rid: int, body: tuple[bytes | memoryview, ...]) -> None:
        """Write one frame, part by part (no join copy of a large body); small frames
        written in the same turn of the event loop are sent together."""
        self._check_open()
        assert self._out is not None
        self._out.write(*request_frame_parts(req_type, rid, *body))

    async def send(self, req_type: int, *body: bytes | memoryview, timeout: float = 30.0) -> None:
        """Send a request that gets no response (WRITE with ack=0)."""
        self._check_open()
        if self._drained.is_set():  # the common case, without wait_for's task and timer
            self._write_now(req_type, self._next_id(), body)
            return
        try:
            await asyncio.wait_for(self._write(req_type, self._next_id(), body), timeout)
        except TimeoutError:
            raise RequestTimeoutError(
                f"broker {self.address} did not take a request within {timeout:.1f} s"
            ) from None

    async def request(
        self, req_type: int, *body: bytes | memoryview, timeout: float = 30.0
    ) -> Response:
        """Send a request and wait for its response; non-OK statuses raise typed errors.

        One timer bounds the whole request (the write and the answer); the write goes
        out at once unless the transport is above its high-water mark. (Two
        ``asyncio.wait_for`` calls, a task and two timers per request, were ~10% of a
        trickling producer's CPU.)"""
        self._check_open()
        rid = self._next_id()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Response] = loop.create_future()
        self._pending[rid] = fut
        timer = loop.call_later(timeout, _expire, fut)
        try:
            if self._drained.is_set():
                self._write_now(req_type, rid, body)
            else:
                await self._write_or_expire(req_type, rid, body, fut)
            resp = await fut
        except BaseException as e:
            self._pending.pop(rid, None)
            if not isinstance(e, TimeoutError):
                raise
            raise RequestTimeoutError(
                f"broker {self.address} did not answer request {rid} within {timeout:.1f} s"
            ) from None
        finally:
            timer.cancel()
        if resp.status != StatusCode.OK:
            raise error_for_status(resp.status, resp.error, bytes(resp.body))
        return resp

    async def _write_or_expire(
        self,
        req_type: int,
        rid: int,
        body: tuple[bytes | memoryview, ...],
        fut: asyncio.Future[Response],
    ) -> None:
        """Wait for the transport to drain, or for ``fut`` to end first (the request's
        timer, a lost connection): then raise its error without writing."""
        drained: asyncio.Future[Any] = asyncio.ensure_future(self._drained.wait())
        try:
            await asyncio.wait({drained, fut}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drained.cancel()
        if fut.done():
            fut.result()  # raises the timeout or the connection's error
        else:
            self._write_now(req_type, rid, body)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if self._out is not None:
                self._out.flush()  # what was written before close() goes out
            self.transport.close()


async def _speaks_kafka(address: str, timeout: float) -> bool:
    """Whether ``address`` answers a Kafka ApiVersions request within ``timeout``."""
    host, port = parse_address(address)
    request, answered = kafka_api_versions_probe()

    async def ask() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            return answered(await reader.readexactly(10))
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(ask(), timeout)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False


def _expire(fut: asyncio.Future[Response]) -> None:
    """A request's timer: it ends with TimeoutError unless answered meanwhile."""
    if not fut.done():
        fut.set_exception(TimeoutError())
