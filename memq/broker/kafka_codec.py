"""Kafka wire protocol for the broker's Kafka listener: bytes in, bytes out (no I/O).

The request and response layouts are aiokafka's (``aiokafka.protocol``), record batches
are decoded by aiokafka's C-accelerated ``MemoryRecords``/``DefaultRecordBatch`` (v2,
with gzip, snappy, lz4 and zstd through cramjam); nothing here hand-writes a Kafka
codec. Metadata v6-v8 and InitProducerId v1 are declared below with aiokafka's schema
types (it ships Metadata up to v5 and InitProducerId v0; the later versions add fields
only).

Only non-flexible versions are implemented (request header v1, response header v0), so
every request this module accepts has the same header. :func:`decode_request` raises
:class:`UnsupportedApi` (answered by :func:`unsupported_response`) for an API or
version outside :data:`SUPPORTED`, and :class:`memq.errors.MalformedError` for bytes
that do not decode (the listener closes such a connection, as Kafka does).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import google_crc32c
from aiokafka.errors import CorruptRecordException
from aiokafka.protocol.admin import (
    ApiVersionRequest_v0,
    ApiVersionRequest_v1,
    ApiVersionRequest_v2,
    ApiVersionResponse_v0,
    ApiVersionResponse_v1,
    ApiVersionResponse_v2,
    SaslAuthenticateRequest_v0,
    SaslAuthenticateRequest_v1,
    SaslHandShakeRequest_v0,
    SaslHandShakeRequest_v1,
)
from aiokafka.protocol.coordination import FindCoordinatorRequest_v0, FindCoordinatorRequest_v1
from aiokafka.protocol.metadata import (
    MetadataRequest_v0,
    MetadataRequest_v1,
    MetadataRequest_v2,
    MetadataRequest_v3,
    MetadataRequest_v4,
    MetadataRequest_v5,
)
from aiokafka.protocol.produce import (
    ProduceRequest_v3,
    ProduceRequest_v4,
    ProduceRequest_v5,
    ProduceRequest_v6,
    ProduceRequest_v7,
    ProduceRequest_v8,
)
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import Array, Schema, String
from aiokafka.record import MemoryRecords
from aiokafka.record.default_records import DefaultRecordBatch

from memq.broker.kafka_structs import (
    FindCoordinatorRequest_v2,
    InitProducerIdRequest_v1,
    MetadataRequest_v6,
    MetadataRequest_v7,
    MetadataRequest_v8,
)
from memq.errors import (
    ChecksumError,
    FrameTooLargeError,
    MalformedError,
    MemqError,
    StatusCode,
    UnsupportedVersionError,
)
from memq.formats.block import Record
from memq.formats.compression import Compression
from memq.formats.crc import crc32
from memq.formats.frames import PrefixedReceiver

__all__ = [
    "ADVERTISED_ONLY",
    "API_NAMES",
    "READS_UNSUPPORTED",
    "SUPPORTED",
    "DecodedRecords",
    "KafkaError",
    "KafkaFrameReceiver",
    "KafkaRequest",
    "UnsupportedApi",
    "api_versions_response",
    "build_response",
    "decode_records",
    "decode_request",
    "encode_response",
    "kafka_error",
    "node_id",
    "read_header",
    "response_class",
    "unsupported_response",
]


class KafkaError:
    """Kafka error codes (the protocol's numbers) used by the listener."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    TOPIC_AUTHORIZATION_FAILED = 29
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    INVALID_RECORD = 87


# --- the API table ----------------------------------------------------------------------

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10
SASL_HANDSHAKE, API_VERSIONS, INIT_PRODUCER_ID, SASL_AUTHENTICATE = 17, 18, 22, 36
API_NAMES = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    FIND_COORDINATOR: "FindCoordinator",
    METADATA: "Metadata",
    SASL_HANDSHAKE: "SaslHandshake",
    API_VERSIONS: "ApiVersions",
    INIT_PRODUCER_ID: "InitProducerId",
    SASL_AUTHENTICATE: "SaslAuthenticate",
}

_REQUESTS: dict[tuple[int, int], type[Any]] = {
    (c.API_KEY, c.API_VERSION): c
    for c in (
        ApiVersionRequest_v0,
        ApiVersionRequest_v1,
        ApiVersionRequest_v2,
        MetadataRequest_v0,
        MetadataRequest_v1,
        MetadataRequest_v2,
        MetadataRequest_v3,
        MetadataRequest_v4,
        MetadataRequest_v5,
        MetadataRequest_v6,
        MetadataRequest_v7,
        MetadataRequest_v8,
        ProduceRequest_v3,
        ProduceRequest_v4,
        ProduceRequest_v5,
        ProduceRequest_v6,
        ProduceRequest_v7,
        ProduceRequest_v8,
        InitProducerIdRequest_v0,
        InitProducerIdRequest_v1,
        SaslHandShakeRequest_v0,
        SaslHandShakeRequest_v1,
        SaslAuthenticateRequest_v0,
        SaslAuthenticateRequest_v1,
        FindCoordinatorRequest_v0,
        FindCoordinatorRequest_v1,
        FindCoordinatorRequest_v2,
    )
}
# aiokafka's ApiVersionRequest_v2 names v1's response; v2's layout is the same.
_RESPONSES: dict[tuple[int, int], type[Any]] = {
    **{k: c.RESPONSE_TYPE for k, c in _REQUESTS.items()},
    (API_VERSIONS, 2): ApiVersionResponse_v2,
}

#: What the listener implements: api key -> (min, max) version, all non-flexible.
#: FindCoordinator is answered with an error naming MemQ's consumer (there are no
#: consumer groups here): Kafka consumers show it instead of retrying in a loop.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 8),
    METADATA: (0, 8),
    FIND_COORDINATOR: (0, 2),
    API_VERSIONS: (0, 2),
    INIT_PRODUCER_ID: (0, 1),
}
#: Added to :data:`SUPPORTED` when the broker enforces authentication (SASL/PLAIN).
SASL_APIS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 1)}
#: Advertised, never served: librdkafka enables v2 record batches (headers, idempotence)
#: only when a broker lists Fetch v4, and zstd only with Fetch v10 (its feature map; lz4
#: needs FindCoordinator v0, which is served); such a request is answered like any
#: unsupported one (MemQ is read with its own consumer).
ADVERTISED_ONLY: dict[int, tuple[int, int]] = {FETCH: (4, 10)}
#: What a Kafka client that reads is told (FindCoordinator's error message, the log).
READS_UNSUPPORTED = (
    "MemQ's Kafka port takes Kafka producers only (no consumer groups, no fetching): "
    "read this topic with MemQ's consumer (memq.Consumer, `memq consume`) or Spark"
)

_HEADER = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: The decoded aiokafka request struct (fields as attributes; arrays as tuples).
    body: Any


class UnsupportedApi(UnsupportedVersionError):  # noqa: N818 (an error; the name says which)
    """A well-framed request for an API or version the listener does not implement."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        name = API_NAMES.get(api_key, f"api key {api_key}")
        super().__init__(
            f"{name} v{api_version} is not supported by MemQ's Kafka listener (it "
            "implements producing: ApiVersions, Metadata, Produce, InitProducerId; a Kafka "
            "client that reads or administers gets this: read with memq.Consumer or "
            "`memq consume`)"
        )
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


def read_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its length)."""
    if len(frame) < _HEADER.size:
        raise MalformedError(f"a {len(frame)}-byte Kafka request has no complete header")
    key, version, cid = _HEADER.unpack_from(frame)
    return key, version, cid


class _Reader:
    """What aiokafka's decoders read from (``read(n)``) over a frame held in a buffer:
    a field comes out as bytes copied from the buffer (``BytesIO`` would first copy
    the whole buffer when it is not a ``bytes``)."""

    __slots__ = ("_pos", "_view")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._view = memoryview(data)
        self._pos = pos

    def read(self, n: int = -1) -> bytes:
        start, size = self._pos, len(self._view)
        end = size if n < 0 else min(start + n, size)
        self._pos = end
        return bytes(self._view[start:end])


class KafkaFrameReceiver(PrefixedReceiver[memoryview]):
    """Splits a Kafka connection's byte stream into request frames (4-byte length,
    then the request) for ``asyncio.BufferedProtocol``; each frame comes out as a view
    of the request without its length (a large one received straight into a buffer of
    its own). A length outside 8..``max_bytes`` sets ``broken`` to a FrameTooLargeError:
    nothing is allocated from it, and the stream cannot be resynchronised."""

    __slots__ = ("max_bytes",)

    def __init__(
        self, max_bytes: int, take: Callable[[int], memoryview | None] | None = None
    ) -> None:
        super().__init__(staging=64 * 1024, take=take)  # (staging: per connection, idle too)
        self.max_bytes = max_bytes

    def _check_length(self, length: int) -> None:
        if not 8 <= length <= self.max_bytes:
            raise FrameTooLargeError(f"a request of {length} bytes (allowed 8..{self.max_bytes})")

    def _frame(self, view: memoryview) -> memoryview:
        return view[4:]


def decode_request(
    frame: bytes | bytearray | memoryview, supported: dict[int, tuple[int, int]]
) -> KafkaRequest:
    """Decode one request frame (the bytes after the 4-byte length)."""
    key, version, cid = read_header(frame)
    lo_hi = supported.get(key)
    cls = _REQUESTS.get((key, version))
    if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1] or cls is None:
        raise UnsupportedApi(key, version, cid)
    buf: Any = _Reader(frame, _HEADER.size)  # (aiokafka's decoders only call read(n))
    try:
        client_id = String("utf-8").decode(buf)
        body = cls.decode(buf)
    except (ValueError, struct.error, TypeError) as e:
        name = API_NAMES.get(key, str(key))
        raise MalformedError(f"{name} v{version} request does not decode: {e}") from None
    return KafkaRequest(key, version, cid, client_id, body)


def response_class(api_key: int, api_version: int) -> type[Any]:
    return _RESPONSES[(api_key, api_version)]


def build_response(api_key: int, api_version: int, doc: dict[str, Any]) -> Any:
    """The response struct of ``(api_key, api_version)`` from a dict holding (at least)
    the fields of its version, nested arrays as lists of dicts; fields a version lacks
    are left out, so one dict serves every version."""
    cls = _RESPONSES[(api_key, api_version)]
    return cls(*_shape(cls.SCHEMA, doc))


def _shape(schema: Any, doc: Any) -> tuple[Any, ...]:
    if isinstance(doc, tuple):  # already in schema order
        return doc
    out = []
    for name, field in zip(schema.names, schema.fields, strict=True):
        value = doc[name]
        if isinstance(field, Array) and isinstance(field.array_of, Schema) and value is not None:
            value = [_shape(field.array_of, v) for v in value]
        out.append(value)
    return tuple(out)


def node_id(broker_id: str) -> int:
    """A MemQ broker id as a Kafka node id (int32 >= 0, stable: a hash of the id)."""
    return crc32(broker_id.encode("utf-8")) & 0x7FFFFFFF


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A length-prefixed response frame (response header v0: the correlation id)."""
    body: bytes = response.encode()
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def api_versions_response(version: int, error: int, supported: dict[int, tuple[int, int]]) -> Any:
    ranges = [(k, lo, hi) for k, (lo, hi) in sorted(supported.items())]
    if version == 0:
        return ApiVersionResponse_v0(error_code=error, api_versions=ranges)
    cls = ApiVersionResponse_v1 if version == 1 else ApiVersionResponse_v2
    return cls(error_code=error, api_versions=ranges, throttle_time_ms=0)


def unsupported_response(err: UnsupportedApi, supported: dict[int, tuple[int, int]]) -> bytes:
    """What Kafka answers to a version it does not support: the ApiVersions v0 layout
    (error UNSUPPORTED_VERSION and the supported ranges). Clients retry ApiVersions with a
    version from the list; any other unsupported request gets the same answer, and the
    listener then closes the connection (Kafka closes on requests it cannot parse)."""
    resp = api_versions_response(0, KafkaError.UNSUPPORTED_VERSION, supported)
    return encode_response(err.correlation_id, resp)


# --- record batches -> MemQ records ------------------------------------------------------

_CODECS = {
    DefaultRecordBatch.CODEC_NONE: Compression.NONE,
    DefaultRecordBatch.CODEC_GZIP: Compression.GZIP,
    DefaultRecordBatch.CODEC_SNAPPY: Compression.ZSTD,  # MemQ has no snappy: zstd instead
    DefaultRecordBatch.CODEC_LZ4: Compression.LZ4,
    DefaultRecordBatch.CODEC_ZSTD: Compression.ZSTD,
}
_LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
_MAGIC_AT = 16
_CRC_AT = 17  # CRC-32C (4 bytes) of the batch from its attributes (byte 21) to its end
_CRC_FROM = 21


def _crc32c_function() -> Any:
    """google-crc32c's C implementation (hardware CRC32C: ~0.04 ms per MiB) when its
    wheel has one, else aiokafka's (~0.5 ms per MiB, what ``validate_crc`` uses)."""
    if google_crc32c.implementation == "c":
        return google_crc32c.value
    from aiokafka.record.util import calc_crc32c

    return calc_crc32c


_crc32c = _crc32c_function()


@dataclass(frozen=True, slots=True)
class DecodedRecords:
    """The records of one partition's record set, with the first batch's producer state."""

    records: list[Record]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    #: How the producer compressed it (MemQ's block uses the same, zstd for snappy).
    compression: Compression


def _check_batches(data: bytes) -> int:
    """The number of batches; MalformedError for a truncated or non-v2 record set,
    ChecksumError for a batch whose CRC-32C does not match."""
    pos, n, size = 0, 0, len(data)
    while pos < size:
        if size - pos < _LOG_OVERHEAD + 5:
            raise MalformedError(f"record set ends inside a batch header at byte {pos}")
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if data[pos + _MAGIC_AT] != 2:
            raise MalformedError(
                f"record batch magic {data[pos + _MAGIC_AT]}: Produce v3+ carries v2 batches"
            )
        if length < 49 or pos + _LOG_OVERHEAD + length > size:
            raise MalformedError(f"record batch at byte {pos} claims {length} bytes")
        end = pos + _LOG_OVERHEAD + length
        (crc,) = struct.unpack_from(">I", data, pos + _CRC_AT)
        if _crc32c(data[pos + _CRC_FROM : end]) != crc:
            raise ChecksumError("record batch CRC-32C mismatch: corrupted on the way")
        pos = end
        n += 1
    if n == 0:
        raise MalformedError("empty record set")
    return n


def decode_records(data: bytes, now_ms: int | None = None) -> DecodedRecords:
    """Every record of a Produce partition's record set (v2 batches) as MemQ records.

    A null value is stored as an empty value (MemQ values are bytes). Raises
    ChecksumError for a CRC mismatch and MalformedError for anything else undecodable.
    """
    data = bytes(data)
    _check_batches(data)  # (and their CRCs: faster than aiokafka's validate_crc)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[Record] = []
    first: Any = None
    try:
        recs = MemoryRecords(data)
        while recs.has_next():
            batch = recs.next_batch()
            if batch is None:
                break
            if batch.is_control_batch:
                continue
            if first is None:
                first = batch
            for r in batch:
                ts = r.timestamp
                headers = r.headers
                out.append(
                    (
                        ts if ts is not None and ts >= 0 else now,
                        r.key,
                        r.value if r.value is not None else b"",
                        tuple(headers) if headers else None,
                    )
                )
    except MemqError:
        raise
    except (CorruptRecordException, ValueError, struct.error, TypeError, IndexError) as e:
        raise MalformedError(f"record batch does not decode: {e}") from None
    except Exception as e:  # a codec library's own error (cramjam, gzip)
        raise MalformedError(f"record batch does not decode: {type(e).__name__}: {e}") from None
    if first is None or not out:
        raise MalformedError("record set holds no data record")
    return DecodedRecords(
        out,
        first.producer_id,
        first.producer_epoch,
        first.base_sequence,
        bool(first.is_transactional),
        _CODECS.get(first.compression_type, Compression.ZSTD),
    )


# --- MemQ errors -> Kafka error codes ------------------------------------------------------

_BY_STATUS = {
    StatusCode.CORRUPT_MESSAGE: KafkaError.INVALID_RECORD,
    StatusCode.INVALID_REQUEST: KafkaError.INVALID_REQUEST,
    StatusCode.UNSUPPORTED_VERSION: KafkaError.UNSUPPORTED_VERSION,
    StatusCode.UNKNOWN_TOPIC: KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
    StatusCode.MESSAGE_TOO_LARGE: KafkaError.MESSAGE_TOO_LARGE,
    StatusCode.THROTTLED: KafkaError.REQUEST_TIMED_OUT,
    StatusCode.REQUEST_TIMED_OUT: KafkaError.REQUEST_TIMED_OUT,
    StatusCode.STORAGE_ERROR: KafkaError.KAFKA_STORAGE_ERROR,
    StatusCode.NOTIFICATION_ERROR: KafkaError.NOT_ENOUGH_REPLICAS,
    StatusCode.NOT_WRITER: KafkaError.NOT_LEADER_OR_FOLLOWER,
    StatusCode.SHUTTING_DOWN: KafkaError.NOT_LEADER_OR_FOLLOWER,
    StatusCode.COORDINATION_ERROR: KafkaError.LEADER_NOT_AVAILABLE,
    StatusCode.UNAUTHENTICATED: KafkaError.SASL_AUTHENTICATION_FAILED,
    StatusCode.UNAUTHORIZED: KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def kafka_error(err: BaseException, produce_version: int = 8) -> int:
    """The Kafka error code a Produce partition gets for ``err``."""
    if isinstance(err, ChecksumError):
        return KafkaError.CORRUPT_MESSAGE
    code = (
        _BY_STATUS.get(err.status, KafkaError.UNKNOWN_SERVER_ERROR)
        if isinstance(err, MemqError)
        else KafkaError.UNKNOWN_SERVER_ERROR
    )
    if code == KafkaError.KAFKA_STORAGE_ERROR and produce_version < 4:
        return KafkaError.NOT_LEADER_OR_FOLLOWER  # what Kafka sends clients before v4
    return code
