"""Wire frames of the broker protocol (pure, sans-I/O).

Every frame is a 4-byte length prefix followed by that many bytes. The twelve bytes
after the prefix have the same layout in every protocol version, so a peer can always
answer a request it cannot parse::

    0   4  length       u32: bytes after this field, 12 <= length <= max frame size
    4   4  crc32        CRC-32 of bytes [8, 4 + length): everything after this field
    8   1  version      protocol version (1)
    9   1  flags        bit 0: 1 = response, 0 = request; other bits 0
    10  2  type         request type (RequestType), echoed by the response
    12  4  request_id   u32 chosen by the client, echoed by the response
    requests:  16.. body
    responses: 16  2  status      StatusCode (0 = OK)
               18  2  error_len   bytes of error text
               20  .  error       UTF-8 error text (empty when OK)
               ..  .  body

The CRC makes transport corruption a clean, typed error (TCP's 16-bit checksum misses
some); a frame that fails it is answered with CORRUPT_MESSAGE and the connection is
closed, because its length prefix can no longer be trusted either.

Requests on one connection are answered in any order; the client matches responses
by ``request_id``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

from memq.errors import (
    ChecksumError,
    FrameTooLargeError,
    HttpRequestOnFramedPortError,
    MalformedError,
    MemqFormatError,
    StatusCode,
    TruncatedError,
    UnsupportedVersionError,
)
from memq.formats.crc import crc32

F = TypeVar("F")

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_RESPONSE",
    "FRAME_HEADER_SIZE",
    "PROTOCOL_VERSION",
    "FrameDecoder",
    "FrameReceiver",
    "PrefixedReceiver",
    "RawFrame",
    "Request",
    "RequestType",
    "Response",
    "decode_frame",
    "encode_request",
    "encode_response",
    "foreign_protocol",
    "kafka_api_versions_probe",
    "kafka_request",
    "parse_frame",
    "request_frame_parts",
]

PROTOCOL_VERSION = 1
FLAG_RESPONSE = 0x01
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_PREFIX = struct.Struct(">II")  # length, crc32
_STABLE = struct.Struct(">BBHI")  # version, flags, type, request_id
FRAME_HEADER_SIZE = _PREFIX.size + _STABLE.size  # 16 bytes including the length prefix
_MIN_LENGTH = FRAME_HEADER_SIZE - 4  # 12
_RESP = struct.Struct(">HH")
_MAX_ERROR = 0xFFFF
_U32 = 0xFFFFFFFF


class RequestType(IntEnum):
    """Request types. Wire constants: never renumber; admin types start at 32."""

    WRITE = 1
    METADATA = 2
    PING = 3
    AUTH = 4
    TOPIC_CREATE = 32
    TOPIC_UPDATE = 33
    TOPIC_DELETE = 34
    TOPIC_LIST = 35
    CLUSTER_STATUS = 36
    ACL_LIST = 37
    ACL_ADD = 38
    ACL_REMOVE = 39


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A complete frame split at its stable fields; ``payload`` is everything after them
    (``bytes``, or a read-only view of the frame's own buffer from :class:`FrameReceiver`)."""

    version: int
    flags: int
    type: int
    request_id: int
    payload: bytes | memoryview
    crc_ok: bool = True
    #: The CRC field as received (what a Kafka request has there: api key, version).
    crc: int = 0


@dataclass(frozen=True, slots=True)
class Request:
    type: int
    request_id: int
    body: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Response:
    type: int
    request_id: int
    status: int
    error: str
    body: bytes | memoryview

    @property
    def ok(self) -> bool:
        return self.status == StatusCode.OK


def _check_u(name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise MalformedError(f"frame {name} {value} does not fit in u{bits}")


def _frame_parts(
    flags: int, type_: int, request_id: int, parts: tuple[bytes | memoryview, ...]
) -> list[bytes | memoryview]:
    _check_u("type", type_, 16)
    _check_u("request_id", request_id, 32)
    stable = _STABLE.pack(PROTOCOL_VERSION, flags, type_, request_id)
    length = 4 + _STABLE.size + sum(len(p) for p in parts)
    _check_u("length", length, 32)
    crc = crc32(stable)
    for p in parts:
        crc = crc32(p, crc)
    return [_PREFIX.pack(length, crc) + stable, *parts]


def request_frame_parts(
    type_: int, request_id: int, *body: bytes | memoryview
) -> list[bytes | memoryview]:
    """A request frame as buffers to send in order (``transport.writelines``), no body copy."""
    return _frame_parts(0, type_, request_id, body)


def encode_request(type_: int, request_id: int, body: bytes = b"") -> bytes:
    return b"".join(request_frame_parts(type_, request_id, body))


def encode_response(
    type_: int,
    request_id: int,
    status: int = StatusCode.OK,
    error: str = "",
    body: bytes | memoryview = b"",
) -> bytes:
    """Encode a response; an over-long error text is cut (on a UTF-8 boundary) to fit."""
    _check_u("status", status, 16)
    err = error.encode("utf-8")
    if len(err) > _MAX_ERROR:
        err = err[:_MAX_ERROR].decode("utf-8", "ignore").encode("utf-8")
    parts = (_RESP.pack(status, len(err)) + err, body)
    return b"".join(_frame_parts(FLAG_RESPONSE, type_, request_id, parts))


def parse_frame(frame: RawFrame) -> Request | Response:
    """Interpret a raw frame; raises typed errors for corruption or versions we do not know."""
    if not frame.crc_ok:
        raise ChecksumError(
            f"frame CRC mismatch (request id {frame.request_id}): the connection corrupted data"
        )
    if frame.version != PROTOCOL_VERSION:
        raise UnsupportedVersionError(
            f"protocol version {frame.version} is not supported (this side speaks "
            f"{PROTOCOL_VERSION}): upgrade the older side"
        )
    if frame.flags & ~FLAG_RESPONSE:
        raise MalformedError(f"reserved frame flag bits set: {frame.flags:#04x}")
    if not frame.flags & FLAG_RESPONSE:
        return Request(frame.type, frame.request_id, frame.payload)
    p = frame.payload
    if len(p) < _RESP.size:
        raise TruncatedError("response frame too short for its status and error length")
    status, elen = _RESP.unpack_from(p)
    if len(p) < _RESP.size + elen:
        raise TruncatedError(f"response error text needs {elen} bytes, frame has fewer")
    try:
        error = bytes(p[_RESP.size : _RESP.size + elen]).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError("response error text is not valid UTF-8") from None
    return Response(frame.type, frame.request_id, status, error, p[_RESP.size + elen :])


#: Kafka's ApiVersions v0 request (api key 18) with this correlation id and no client
#: id: what :func:`kafka_api_versions_probe` sends.
_KAFKA_PROBE_ID = 0x6D656D71  # "memq"


def foreign_protocol(head: bytes | bytearray | memoryview) -> str | None:
    """Which other protocol answered, from the first bytes a MemQ client received (None:
    nothing known, possibly MemQ's own frame).

    A Kafka broker (or a MemQ broker's Kafka port) reads a MemQ request's CRC as the
    api key and version and bytes 8-11 (version, flags 0, type) as the correlation id,
    which its answer echoes at bytes 4-7; an HTTP server answers ``HTTP/``; a TLS
    server a TLS record (alert or handshake, version 3.x).
    """
    b = bytes(head[:8])
    if b.startswith(b"HTTP/"):
        return "HTTP"
    if len(b) >= 3 and b[0] in (0x15, 0x16) and b[1] == 0x03 and b[2] <= 0x04:
        return "TLS"
    if len(b) >= 8 and b[4] == PROTOCOL_VERSION and b[5] == 0:
        try:
            RequestType(int.from_bytes(b[6:8], "big"))
        except ValueError:
            return None
        return "Kafka"
    return None


def kafka_request(frame: RawFrame) -> int | None:
    """The api key of a Kafka client's request read as a MemQ frame (None: not one). A
    Kafka request has its api key and version where MemQ has the CRC (so the CRC fails)
    and its correlation id, a small counter, where MemQ has the protocol version (so
    that reads 0)."""
    api, version = frame.crc >> 16, frame.crc & 0xFFFF
    if frame.crc_ok or frame.version != 0 or api > 100 or version > 30:
        return None
    return api


def kafka_api_versions_probe() -> tuple[bytes, Callable[[bytes], bool]]:
    """A Kafka ApiVersions v0 request, and a check that the first 10 bytes of an answer
    are a Kafka broker's answer to it (length, the same correlation id, an error code)."""
    request = struct.pack(">ihhih", 10, 18, 0, _KAFKA_PROBE_ID, -1)

    def answered(head: bytes) -> bool:
        if len(head) < 10:
            return False
        length, cid, _error = struct.unpack_from(">iih", head)
        return bool(cid == _KAFKA_PROBE_ID and 6 <= length <= 1 << 20)

    return request, answered


class FrameDecoder:
    """Incremental frame splitter: ``feed`` bytes as they arrive, iterate ``frames()``.

    Raises :class:`FrameTooLargeError` or :class:`MalformedError` for a length prefix
    outside ``[12, max_frame_size]``: the stream cannot be resynchronised after that,
    so the caller answers once and closes. Nothing is allocated from an unchecked
    length. CRC results are reported on each :class:`RawFrame` (``crc_ok``).
    """

    __slots__ = ("_buf", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame at EOF)."""
        return len(self._buf) - self._pos

    def next_length(self) -> int | None:
        """Validated length of the next frame, once its prefix has arrived."""
        if len(self._buf) - self._pos < 4:
            return None
        length = int.from_bytes(self._buf[self._pos : self._pos + 4], "big")
        _check_frame_length(length, self.max_frame_size)
        return length

    def frames(self) -> Iterator[RawFrame]:
        buf = self._buf
        while True:
            length = self.next_length()
            if length is None or len(buf) - self._pos < 4 + length:
                return
            pos = self._pos
            _, crc = _PREFIX.unpack_from(buf, pos)
            stable = bytes(buf[pos + 8 : pos + FRAME_HEADER_SIZE])
            version, flags, type_, rid = _STABLE.unpack(stable)
            end = pos + 4 + length
            payload = bytes(buf[pos + FRAME_HEADER_SIZE : end])
            self._pos = end
            ok = crc32(payload, crc32(stable)) == crc
            yield RawFrame(version, flags, type_, rid, payload, ok, crc)


class PrefixedReceiver(Generic[F]):
    """Splitter of a stream of length-prefixed frames (4-byte big-endian length, then
    that many bytes) for ``asyncio.BufferedProtocol``: the kernel writes into our buffers.

    Small frames are received into a reusable staging buffer and copied out; a frame
    whose length prefix announces more than ``big_frame`` bytes gets its own buffer of
    exactly that size and the rest of it is received straight into it, so a large frame
    costs no user-space copy on the way in. That buffer comes from ``take(n)`` when
    given (a writable view of exactly ``n`` bytes, or None), else it is fresh memory:
    the broker passes its pool of reused receive buffers, so that large frames do not
    each cost new memory the kernel maps a page fault at a time. Each length is checked by
    :meth:`_check_length` before anything is allocated from it; each complete frame
    (prefix included) is handed to :meth:`_frame`, which makes what ``received``
    returns.

    Use: ``get_buffer()`` -> receive into it -> ``received(n)`` -> complete frames; then
    check ``broken``: set (to the MemqFormatError) once a length prefix is refused. The
    frames before it are still returned; nothing after it is, ever (the stream cannot be
    resynchronised).
    """

    __slots__ = ("_big", "_big_at", "_buf", "_end", "_start", "_take", "big_frame", "broken")

    def __init__(
        self,
        staging: int = 256 * 1024,
        big_frame: int = 64 * 1024,
        take: Callable[[int], memoryview | None] | None = None,
    ) -> None:
        self.big_frame = big_frame
        self.broken: MemqFormatError | None = None
        self._buf = bytearray(staging)
        self._start = 0
        self._end = 0
        self._big: memoryview | None = None  # (exactly the frame's bytes)
        self._big_at = 0
        self._take = take

    def _check_length(self, length: int) -> None:
        """Raise a MemqFormatError for a length prefix the protocol does not allow."""
        raise NotImplementedError

    def _frame(self, view: memoryview) -> F:
        """What ``received`` returns for one complete frame: ``view`` holds its bytes
        from the length prefix on (and keeps the buffer under them alive)."""
        raise NotImplementedError

    @property
    def buffered(self) -> int:
        """Bytes of a partial frame received so far."""
        return self._big_at if self._big is not None else self._end - self._start

    def get_buffer(self) -> memoryview:
        if self._big is not None:
            return self._big[self._big_at :]
        if self.broken is not None:  # (bytes after a refused prefix are never parsed)
            self._start = self._end = 0
        view = memoryview(self._buf)
        if len(view) - self._end < 4096:
            # Compact: move the partial frame to the front of the staging buffer (within
            # the view: slicing the bytearray itself would copy the bytes out first).
            n = self._end - self._start
            view[:n] = view[self._start : self._end]
            self._start, self._end = 0, n
        return view[self._end :]

    def received(self, nbytes: int) -> list[F]:
        """Account ``nbytes`` written into the last buffer; return the frames completed
        (up to a refused length prefix, if any: see ``broken``)."""
        out: list[F] = []
        if self._big is not None:
            self._big_at += nbytes
            if self._big_at < len(self._big):
                return out
            out.append(self._frame(self._big))
            self._big = None
            return out
        self._end += nbytes
        buf = self._buf
        while self.broken is None and self._end - self._start >= 4:
            length = int.from_bytes(buf[self._start : self._start + 4], "big")
            try:
                self._check_length(length)
            except MemqFormatError as e:
                self.broken = e
                break
            total = 4 + length
            have = self._end - self._start
            if have >= total:
                frame = bytes(memoryview(buf)[self._start : self._start + total])
                out.append(self._frame(memoryview(frame)))
                self._start += total
                continue
            if total > self.big_frame or total > len(buf):
                # Receive the rest of this frame straight into a buffer of its own.
                big = self._take(total) if self._take is not None else None
                if big is None:
                    big = memoryview(bytearray(total))
                big[:have] = memoryview(buf)[self._start : self._end]
                self._big, self._big_at = big, have
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
        return out


class FrameReceiver(PrefixedReceiver[RawFrame]):
    """:class:`PrefixedReceiver` of broker-protocol frames (lengths checked as by
    :class:`FrameDecoder`); each frame's payload is a view of its buffer (no copy)."""

    __slots__ = ("max_frame_size",)

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        staging: int = 256 * 1024,
        big_frame: int = 64 * 1024,
        take: Callable[[int], memoryview | None] | None = None,
    ) -> None:
        super().__init__(staging, big_frame, take)
        self.max_frame_size = max_frame_size

    def _check_length(self, length: int) -> None:
        _check_frame_length(length, self.max_frame_size)

    def _frame(self, view: memoryview) -> RawFrame:
        return _raw_from(view)


#: The first four bytes of an HTTP response ("HTTP") read as a frame length.
_HTTP_AS_LENGTH = int.from_bytes(b"HTTP", "big")


#: HTTP request lines' first four bytes read as a frame length (curl at the MemQ port).
_HTTP_METHODS_AS_LENGTH = {
    int.from_bytes(m, "big")
    for m in (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC")
}


def _check_frame_length(length: int, max_frame_size: int) -> None:
    if length in _HTTP_METHODS_AS_LENGTH:  # (it said: frame exceeds the maximum)
        raise HttpRequestOnFramedPortError(
            "an HTTP request on the broker's MemQ protocol port: HTTP ingest, /metrics and "
            "/healthz are on its HTTP port (`memq dev status`: http; the broker's http_port)"
        )
    if length == _HTTP_AS_LENGTH:  # (it said: send smaller blocks)
        raise MalformedError(
            "the peer answered in HTTP: that is a broker's HTTP port (metrics, ingest), "
            "not its MemQ protocol port (port in `memq dev status`, the broker's config)"
        )
    if length > max_frame_size:
        raise FrameTooLargeError(
            f"frame of {length} bytes exceeds the maximum of {max_frame_size}: "
            "send smaller blocks (producer batch.size) or raise the max frame size"
        )
    if length < _MIN_LENGTH:
        raise MalformedError(f"frame length {length} is below the {_MIN_LENGTH}-byte minimum")


def _raw_from(view: memoryview) -> RawFrame:
    """A RawFrame over one complete frame; the payload is a view of it (no copy)."""
    crc = int.from_bytes(view[4:8], "big")
    version, flags, type_, rid = _STABLE.unpack_from(view, 8)
    ok = crc32(view[8:]) == crc
    return RawFrame(version, flags, type_, rid, view[FRAME_HEADER_SIZE:], ok, crc)


def decode_frame(
    data: bytes | bytearray | memoryview, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> Request | Response:
    """Decode exactly one complete frame."""
    dec = FrameDecoder(max_frame_size)
    dec.feed(data)
    frames = list(dec.frames())
    if not frames:
        raise TruncatedError(f"incomplete frame: {len(data)} bytes")
    if len(frames) > 1 or dec.buffered:
        raise MalformedError("bytes after the end of the frame")
    return parse_frame(frames[0])
