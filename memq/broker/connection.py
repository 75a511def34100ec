"""One client connection: frame splitting, dispatch, responses matched by request id.

Frames are handled in arrival order by a per-connection pump task; a request that must
wait (for a free batch buffer, or a topic being created) holds back the following
frames of the same connection, and once the receive buffer passes a limit the socket
stops being read: TCP back-pressure instead of unbounded queues. Bad input gets a typed
error response (or, when the byte stream cannot be trusted any more, one response and
a clean close); nothing a client sends can crash the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import TYPE_CHECKING, Protocol

import msgpack
from pydantic import BaseModel

from memq.acl import AclTable
from memq.aio import WriteCoalescer
from memq.broker.cluster import AdminResponse
from memq.broker.framed import FramedProtocol
from memq.broker.host import BrokerHost
from memq.broker.loglimit import LogLimiter
from memq.errors import (
    AuthenticationError,
    ChecksumError,
    FrameTooLargeError,
    HttpRequestOnFramedPortError,
    InvalidRequestError,
    MemqError,
    MemqFormatError,
    MessageTooLargeError,
    StatusCode,
    UnknownRequestTypeError,
    UnsupportedVersionError,
    status_for_error,
)
from memq.formats.block import verify_block
from memq.formats.frames import (
    FrameReceiver,
    RawFrame,
    Request,
    RequestType,
    encode_response,
    kafka_request,
    parse_frame,
)
from memq.protocol import (
    ADMIN_REQUESTS,
    Ack,
    AdminRequest,
    AuthResult,
    ClusterMetadata,
    MetadataRequest,
    TopicMetadata,
    WriteAck,
    decode_admin,
    decode_msg,
    decode_write_request,
    encode_msg,
)
from memq.security import peer_principal, verify_token

if TYPE_CHECKING:
    from memq.storage_handlers.base import StoredObject

__all__ = ["BrokerConnection", "ConnectionHost", "error_kind"]

log = logging.getLogger(__name__)
#: Lines about misdirected clients (a Kafka client on this port), per client address.
_LOG_LIMIT = LogLimiter(interval=60.0)

_KINDS = {
    StatusCode.CORRUPT_MESSAGE: "corrupt",
    StatusCode.UNSUPPORTED_VERSION: "protocol",
    StatusCode.UNKNOWN_REQUEST_TYPE: "protocol",
    StatusCode.INVALID_REQUEST: "protocol",
    StatusCode.UNKNOWN_TOPIC: "unknown_topic",
    StatusCode.MESSAGE_TOO_LARGE: "too_large",
    StatusCode.THROTTLED: "throttled",
    StatusCode.STORAGE_ERROR: "storage",
    StatusCode.NOTIFICATION_ERROR: "notification",
    StatusCode.NOT_WRITER: "not_writer",
    StatusCode.SHUTTING_DOWN: "shutting_down",
}


def error_kind(status: StatusCode) -> str:
    return _KINDS.get(status, "other")


class ConnectionHost(BrokerHost, Protocol):
    """The broker server, as a client connection sees it (a ``BrokerServer``)."""

    @property
    def connections(self) -> set[BrokerConnection]:
        """The open client connections (each adds and removes itself)."""
        ...

    @property
    def acls(self) -> AclTable: ...

    def metadata(self, req: MetadataRequest) -> ClusterMetadata: ...

    async def admin(self, req: AdminRequest) -> AdminResponse: ...


class BrokerConnection(FramedProtocol[RawFrame]):
    def __init__(self, server: ConnectionHost) -> None:
        cfg = server.config
        super().__init__(
            FrameReceiver(cfg.max_frame_bytes, take=server.receive_buffer), 2 * cfg.max_frame_bytes
        )
        self.server = server
        self.idle_timeout = cfg.idle_timeout_s
        #: Responses made in one turn of the event loop go out in one send (memq.aio).
        self._out: WriteCoalescer | None = None
        self._closed = False  # we closed it: stop handling frames
        self._last_progress = time.monotonic()
        self._pump_task: asyncio.Task[None] | None = None
        #: Who is on the other end once authenticated (token subject or certificate CN).
        self.principal: str | None = None
        self._principal_expires: float | None = None
        self._auth_failures = 0
        self.peer_host = "?"

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        if len(self.server.connections) >= self.server.config.max_connections:
            log.warning(
                "refusing %s: max_connections (%d) reached",
                self.peer,
                self.server.config.max_connections,
            )
            self.server.metrics.errors.labels("connection_limit").inc()
            transport.abort()
            self._closed = True
            return
        self._out = WriteCoalescer(asyncio.get_running_loop(), transport)
        self.server.connections.add(self)
        self.server.metrics.connections.set(len(self.server.connections))
        auth = self.server.config.auth
        if auth is not None and auth.mtls_identity:
            self.principal = peer_principal(transport.get_extra_info("ssl_object"))
        self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    def _frame_bytes(self, frame: RawFrame) -> int:
        return len(frame.payload)

    def connection_lost(self, exc: Exception | None) -> None:
        # Frames already received are still handled (an ack=0 producer may close at once).
        self._eof = True
        self._wake.set()
        self.server.connections.discard(self)
        self.server.metrics.connections.set(len(self.server.connections))

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self.transport is not None and not self.transport.is_closing():
            if self._out is not None:
                self._out.flush()  # responses made before close() go out
            self.transport.close()

    # --- frame pump ---------------------------------------------------------------------

    async def _pump(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                frames = self._frames
                if not frames and self.broken is not None:
                    self._fatal(self.broken)
                    return
                if not frames:
                    if self._eof:
                        return
                    self._resume_reading()
                    left = self.idle_timeout - (time.monotonic() - self._last_progress)
                    if left <= 0:
                        log.info(
                            "closing %s: no complete request for %.0f s",
                            self.peer,
                            self.idle_timeout,
                        )
                        self.server.metrics.errors.labels("idle_timeout").inc()
                        self.close()
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), left)
                    continue
                self._last_progress = time.monotonic()
                while frames:
                    if self.is_closed:
                        return
                    # (``raw`` keeps the frame, a ~1 MiB buffer of its own, alive until the
                    # next one: freed at once, glibc trimmed the heap top and the next frame's
                    # buffer faulted its pages in again, broker CPU 0.76 -> 1.4 s/GiB here)
                    raw = self._next_frame()
                    await self._handle(raw)
        except Exception:
            log.exception("connection %s failed; closing it", self.peer)
            self.close()

    def _fatal(self, e: MemqFormatError) -> None:
        status = (
            StatusCode.MESSAGE_TOO_LARGE
            if isinstance(e, FrameTooLargeError)
            else StatusCode.CORRUPT_MESSAGE
        )
        self.server.metrics.errors.labels(error_kind(status)).inc()
        log.warning("closing %s: %s", self.peer, e)
        if isinstance(e, HttpRequestOnFramedPortError):  # answered so that curl shows it
            text = f"{e}\n".encode()
            self._send(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text)
            )
        else:
            self._send(encode_response(0, 0, status, f"{e}; closing the connection"))
        self.close()

    def _send(self, data: bytes) -> None:
        if self._out is not None:
            self._out.write(data)

    def respond(self, req_type: int, rid: int, body: bytes | memoryview = b"") -> None:
        self.server.metrics.requests.labels(_type_name(req_type), "OK").inc()
        self._send(encode_response(req_type, rid, StatusCode.OK, "", body))

    def respond_error(self, req_type: int, rid: int, err: BaseException, body: bytes = b"") -> None:
        status = status_for_error(err)
        self.server.metrics.requests.labels(_type_name(req_type), status.name).inc()
        # (an admin request refused, a typo'd topic create, is not a bad client)
        kind = "admin" if req_type >= RequestType.TOPIC_CREATE else error_kind(status)
        self.server.metrics.errors.labels(kind).inc()
        text = (
            str(err)
            if isinstance(err, MemqError)
            else f"internal error: {type(err).__name__}: {err}"
        )
        self._send(encode_response(req_type, rid, status, text, body))

    async def _handle(self, raw: RawFrame) -> None:
        api = kafka_request(raw)
        if api is not None:
            # A Kafka client retries every second or so: one line a minute per address.
            where = (
                "this broker's Kafka port (kafka_listener; `memq dev status` lists it)"
                if self.server.config.kafka_listener is not None
                else "a broker's Kafka port (this one has none: add kafka_listener)"
            )
            _LOG_LIMIT.log(
                log, logging.WARNING, ("kafka_client", id(self.server), self.peer_host),
                "closing %s: a Kafka client (a request of Kafka api key %d) on the MemQ "
                "port: Kafka clients write to %s", self.peer, api, where,
            )  # fmt: skip
            self.server.metrics.errors.labels("corrupt").inc()
            self.close()
            return
        if not raw.crc_ok:
            self.respond_error(
                raw.type,
                raw.request_id,
                ChecksumError(
                    "frame CRC mismatch: data was corrupted on the way; closing the connection"
                ),
            )
            self.close()
            return
        try:
            req = parse_frame(raw)
        except (UnsupportedVersionError, MemqFormatError) as e:
            self.respond_error(raw.type, raw.request_id, e)
            return
        if not isinstance(req, Request):
            self.respond_error(
                raw.type, raw.request_id, InvalidRequestError("brokers only accept requests")
            )
            return
        try:
            if req.type == RequestType.AUTH:
                self._authenticate(req)
                return
            if req.type != RequestType.PING and not self._authenticated():
                raise AuthenticationError(
                    "authenticate first: present a token (client setting auth.token) or a "
                    "client certificate; this broker has auth enabled"
                )
            if req.type == RequestType.WRITE:
                await self._write(req)
            elif self.server.draining:
                self.respond_error(req.type, req.request_id, self.server.shutting_down_error())
            elif req.type == RequestType.METADATA:
                mreq = decode_msg(MetadataRequest, req.body, "METADATA")
                meta = self.server.metadata(mreq)
                if self.server.enforcing:
                    meta = self._visible(meta, listed=mreq.topics is None)
                self.respond(req.type, req.request_id, encode_msg(meta))
            elif req.type == RequestType.PING:
                self.respond(req.type, req.request_id, req.body)
            elif req.type in ADMIN_REQUESTS:
                admin = decode_admin(req.type, req.body)
                self.server.authorize(self.principal, "admin", admin.target)
                answer = await self.server.admin(admin)
                self.respond(req.type, req.request_id, encode_admin_response(answer))
            else:
                raise UnknownRequestTypeError(
                    f"unknown request type {req.type}: upgrade the broker?"
                )
        except MemqError as e:
            self.respond_error(req.type, req.request_id, e, e.body)

    def _visible(self, meta: ClusterMetadata, *, listed: bool) -> ClusterMetadata:
        """Metadata of the topics this principal may consume (or produce to): others are
        left out of a listing and answered with an error when asked for by name."""
        acls, who = self.server.acls, self.principal
        topics = {}
        for name, t in meta.topics.items():
            if acls.allowed(who, "consume", name):
                topics[name] = t
            elif not listed:
                topics[name] = TopicMetadata(
                    name=name, error=f"not authorized: principal {who!r} may not read {name!r}"
                )
        return meta.model_copy(update={"topics": topics})

    # --- authentication -----------------------------------------------------------------

    def _authenticated(self) -> bool:
        auth = self.server.config.auth
        if auth is None or not auth.enabled:
            return True
        if self.principal is None:
            return False
        if self._principal_expires is not None and self._principal_expires <= time.time():
            self.principal = self._principal_expires = None  # the token ran out
            return False
        return True

    def _authenticate(self, req: Request) -> None:
        auth = self.server.config.auth
        secret = self.server.token_secret
        if auth is None or secret is None:
            raise AuthenticationError("this broker does not accept tokens")
        try:
            principal, expires = verify_token(secret, bytes(req.body))
        except AuthenticationError as e:
            self._auth_failures += 1
            self.server.metrics.errors.labels("auth_failed").inc()
            log.warning("authentication failed from %s: %s", self.peer, e)
            if self._auth_failures >= 3:
                self.respond_error(req.type, req.request_id, e)
                self.close()
                return
            raise
        self.principal, self._principal_expires = principal, float(expires)
        log.info("%s authenticated as %r", self.peer, principal)
        self.respond(
            req.type, req.request_id, encode_msg(AuthResult(principal=principal, expires=expires))
        )

    # --- WRITE --------------------------------------------------------------------------

    async def _write(self, req: Request) -> None:
        received = time.monotonic()
        ack = Ack.ALL
        try:
            ack, topic, block, keyed = decode_write_request(req.body)
            self.server.authorize(self.principal, "produce", topic)
            if self.server.draining:
                raise self.server.shutting_down_error()
            proc = await self.server.processor_for(topic)
            limit = proc.config.block_limit
            if len(block) > limit:
                raise MessageTooLargeError(
                    f"block of {len(block)} bytes exceeds the max_block_bytes of topic "
                    f"{topic!r} ({limit}): lower the producer's batch.size"
                )
            header = verify_block(block, max_uncompressed=max(limit * 64, 64 << 20))
            batch, index, dup = await proc.append(block, header, received, keyed=keyed)
        except MemqError as e:
            if ack != Ack.NONE:
                self.respond_error(req.type, req.request_id, e, e.body)
            else:
                self.server.metrics.errors.labels(error_kind(status_for_error(e))).inc()
            return
        m = self.server.metrics
        if ack == Ack.NONE:
            m.requests.labels("WRITE", "OK").inc()
        elif ack == Ack.LEADER:
            if not dup:
                proc.note_ack1(batch, header.record_count)
            self.respond(req.type, req.request_id)
            m.ack_seconds.labels(topic, "1").observe(time.monotonic() - received)
        else:
            batch.done.add_done_callback(
                functools.partial(self._ack_all, req.request_id, topic, index, dup, received)
            )

    def _ack_all(
        self,
        rid: int,
        topic: str,
        index: int,
        dup: bool,
        received: float,
        done: asyncio.Future[StoredObject],
    ) -> None:
        if done.cancelled():
            self.respond_error(RequestType.WRITE, rid, self.server.shutting_down_error())
            return
        err = done.exception()
        if err is not None:
            self.respond_error(RequestType.WRITE, rid, err)
            return
        stored = done.result()
        body = encode_msg(
            WriteAck(bucket=stored.bucket, key=stored.key, block=index, duplicate=dup)
        )
        self.respond(RequestType.WRITE, rid, body)
        self.server.metrics.ack_seconds.labels(topic, "all").observe(time.monotonic() - received)


def encode_admin_response(answer: object) -> bytes:
    """An admin answer (a model or a plain map) as the msgpack map clients read."""
    if isinstance(answer, BaseModel):
        return encode_msg(answer)
    packed: bytes = msgpack.packb(answer, use_bin_type=True)
    return packed


def _type_name(t: int) -> str:
    try:
        return RequestType(t).name
    except ValueError:
        return "UNKNOWN"
