"""The MemQ error hierarchy and the wire status-code registry.

One root, :class:`MemqError`; a subclass per kind of failure (format, protocol,
storage, notification, coordination, config). Whether a caller may retry is a
class attribute (``retriable``), never a flag on a shared instance. Server status
codes map to classes through one registry (:func:`error_for_status`), so a
client raises the same typed error the broker meant.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "BadMagicError",
    "BrokerShuttingDownError",
    "BrokerUnreachableError",
    "ChecksumError",
    "ClientClosedError",
    "CompressionError",
    "ConfigError",
    "ConnectionLostError",
    "CoordinationError",
    "CorruptObjectError",
    "DevStackError",
    "FrameTooLargeError",
    "HttpRequestOnFramedPortError",
    "IdempotencyKeyReusedError",
    "InvalidPositionError",
    "InvalidRequestError",
    "MalformedError",
    "MemqError",
    "MemqFormatError",
    "MessageTooLargeError",
    "NotWriterError",
    "NotificationError",
    "ObjectNotFoundError",
    "ProtocolError",
    "RequestTimeoutError",
    "StatusCode",
    "StorageAccessError",
    "StorageError",
    "ThrottledError",
    "TopicExistsError",
    "TruncatedError",
    "UnknownRequestTypeError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "WrongProtocolError",
    "error_for_status",
]


class StatusCode(IntEnum):
    """Status codes carried by response frames. Values are wire constants: never renumber."""

    OK = 0
    UNKNOWN_ERROR = 1
    CORRUPT_MESSAGE = 2
    UNSUPPORTED_VERSION = 3
    UNKNOWN_REQUEST_TYPE = 4
    INVALID_REQUEST = 5
    UNKNOWN_TOPIC = 6
    MESSAGE_TOO_LARGE = 7
    THROTTLED = 8
    STORAGE_ERROR = 9
    NOTIFICATION_ERROR = 10
    REQUEST_TIMED_OUT = 11
    NOT_WRITER = 12
    SHUTTING_DOWN = 13
    UNAUTHENTICATED = 14
    UNAUTHORIZED = 15
    TOPIC_EXISTS = 16
    COORDINATION_ERROR = 17


class MemqError(Exception):
    """Root of every error MemQ raises on purpose.

    ``retriable`` says whether repeating the same operation may succeed.
    ``status`` is the wire status code a broker uses to report this error.
    """

    retriable: ClassVar[bool] = False
    status: ClassVar[StatusCode] = StatusCode.UNKNOWN_ERROR
    #: Response body a broker sends with this error (e.g. fresh metadata with NOT_WRITER).
    body: bytes = b""

    def __init__(self, *args: object, body: bytes = b"") -> None:
        super().__init__(*args)
        if body:
            self.body = body


# --- formats ---------------------------------------------------------------------------


class MemqFormatError(MemqError):
    """Bytes that do not decode as the MemQ format they claim to be."""

    status = StatusCode.CORRUPT_MESSAGE


class TruncatedError(MemqFormatError):
    """The input ends before the structure it announces."""


class ChecksumError(MemqFormatError):
    """A CRC-32 stored in the data does not match the bytes it covers."""


class BadMagicError(MemqFormatError):
    """The magic bytes are not those of the expected structure."""


class UnsupportedVersionError(MemqFormatError):
    """A format or protocol version this code does not understand."""

    status = StatusCode.UNSUPPORTED_VERSION


class CompressionError(MemqFormatError):
    """A compressed body that does not decompress to its announced size."""


class MalformedError(MemqFormatError):
    """Structurally invalid content: bad field values, inconsistent lengths, wrong types."""


class HttpRequestOnFramedPortError(MalformedError):
    """An HTTP request sent to a port that speaks the MemQ protocol (curl at the wrong port)."""


class CorruptObjectError(MemqFormatError):
    """A stored batch object that fails its checks (checksum, size, a block's CRC).

    ``key`` names the object and ``bucket`` its bucket or root, when known; its
    notification (if any) disagreed with its bytes. Picklable (Spark ships task errors
    between processes).
    """

    def __init__(self, message: str, *, key: str = "", bucket: str = "", body: bytes = b"") -> None:
        super().__init__(message, body=body)
        self.key = key
        self.bucket = bucket

    def __reduce__(self) -> tuple[object, ...]:
        message = str(self.args[0]) if self.args else ""
        return (_rebuild_corrupt, (type(self), message, self.key, self.bucket, self.body))


def _rebuild_corrupt(
    cls: type[CorruptObjectError], message: str, key: str, bucket: str, body: bytes
) -> CorruptObjectError:
    return cls(message, key=key, bucket=bucket, body=body)


class FrameTooLargeError(MemqFormatError):
    """A frame whose announced length exceeds the configured maximum."""

    status = StatusCode.MESSAGE_TOO_LARGE


# --- protocol and requests --------------------------------------------------------------


class ProtocolError(MemqError):
    """The peer broke the request/response protocol."""


class UnknownRequestTypeError(ProtocolError):
    status = StatusCode.UNKNOWN_REQUEST_TYPE


class InvalidRequestError(ProtocolError):
    """A well-framed request whose content is invalid (bad field, bad ack mode, ...)."""

    status = StatusCode.INVALID_REQUEST


class IdempotencyKeyReusedError(InvalidRequestError):
    """An HTTP ``Idempotency-Key`` the broker still remembers, sent with another body:
    not a retry (a retry sends the same body), and not stored as new records either."""


class WrongProtocolError(ProtocolError):
    """The address answers in another protocol (Kafka's, HTTP, TLS): it is not a MemQ
    port, and retrying cannot help. The message names what answered and where to go."""


class ConnectionLostError(ProtocolError):
    """The connection closed while requests were in flight."""

    retriable = True


class BrokerUnreachableError(ConnectionLostError):
    """No connection to the broker could be made (refused, unresolvable, timed out)."""


class ClientClosedError(MemqError):
    """The client was closed; no further operations are possible."""


class RequestTimeoutError(MemqError, TimeoutError):
    """No answer in time; also a builtin ``TimeoutError`` (``except TimeoutError``, as for
    ``concurrent.futures.Future.result``). Its outcome is unknown: retry."""

    retriable = True
    status = StatusCode.REQUEST_TIMED_OUT


class UnknownTopicError(MemqError):
    status = StatusCode.UNKNOWN_TOPIC


class TopicExistsError(MemqError):
    status = StatusCode.TOPIC_EXISTS


class InvalidPositionError(MemqError):
    """A position inside an object (``MessageId`` block and record) that names no
    record of that object: past its last block, or past its block's last record."""


class MessageTooLargeError(MemqError):
    status = StatusCode.MESSAGE_TOO_LARGE


class ThrottledError(MemqError):
    """The broker has no free buffer for this topic right now; back off and retry."""

    retriable = True
    status = StatusCode.THROTTLED


class NotWriterError(MemqError):
    """This broker does not write the topic; refresh metadata and send to a current writer."""

    retriable = True
    status = StatusCode.NOT_WRITER


class BrokerShuttingDownError(MemqError):
    retriable = True
    status = StatusCode.SHUTTING_DOWN


class AuthenticationError(MemqError):
    status = StatusCode.UNAUTHENTICATED


class AuthorizationError(MemqError):
    status = StatusCode.UNAUTHORIZED


# --- services ---------------------------------------------------------------------------


class StorageError(MemqError):
    """The object store failed an operation (after the handler's own retries)."""

    retriable = True
    status = StatusCode.STORAGE_ERROR


class StorageAccessError(StorageError):
    """The store refused the request for good (no such bucket, access denied, no credentials)."""

    retriable = False


class ObjectNotFoundError(StorageError):
    """The object a notification points at does not exist (deleted, expired, wrong bucket)."""

    retriable = False


class NotificationError(MemqError):
    """The notification queue (Kafka) did not acknowledge a notification."""

    retriable = True
    status = StatusCode.NOTIFICATION_ERROR


class CoordinationError(MemqError):
    """ZooKeeper trouble: session lost, node missing, bad cluster state."""

    retriable = True
    status = StatusCode.COORDINATION_ERROR


class ConfigError(MemqError, ValueError):
    """Invalid configuration; the message names the key and the fix."""


class DevStackError(MemqError):
    """The local development stack could not be started, checked or stopped."""


_BY_STATUS: dict[StatusCode, type[MemqError]] = {
    StatusCode.UNKNOWN_ERROR: MemqError,
    StatusCode.CORRUPT_MESSAGE: MemqFormatError,
    StatusCode.UNSUPPORTED_VERSION: UnsupportedVersionError,
    StatusCode.UNKNOWN_REQUEST_TYPE: UnknownRequestTypeError,
    StatusCode.INVALID_REQUEST: InvalidRequestError,
    StatusCode.UNKNOWN_TOPIC: UnknownTopicError,
    StatusCode.MESSAGE_TOO_LARGE: MessageTooLargeError,
    StatusCode.THROTTLED: ThrottledError,
    StatusCode.STORAGE_ERROR: StorageError,
    StatusCode.NOTIFICATION_ERROR: NotificationError,
    StatusCode.REQUEST_TIMED_OUT: RequestTimeoutError,
    StatusCode.NOT_WRITER: NotWriterError,
    StatusCode.SHUTTING_DOWN: BrokerShuttingDownError,
    StatusCode.UNAUTHENTICATED: AuthenticationError,
    StatusCode.UNAUTHORIZED: AuthorizationError,
    StatusCode.TOPIC_EXISTS: TopicExistsError,
    StatusCode.COORDINATION_ERROR: CoordinationError,
}


def error_for_status(status: int, message: str, body: bytes = b"") -> MemqError:
    """Build the typed error a response status code stands for.

    An unknown code (a newer broker) becomes a plain :class:`MemqError` naming the code.
    """
    try:
        code = StatusCode(status)
    except ValueError:
        return MemqError(f"broker answered unknown status code {status}: {message}")
    if code is StatusCode.OK:
        raise ValueError("status OK is not an error")
    return _BY_STATUS[code](message, body=body)


def status_for_error(exc: BaseException) -> StatusCode:
    """The status code a broker reports for ``exc`` (UNKNOWN_ERROR for foreign exceptions)."""
    if isinstance(exc, MemqError):
        return exc.status
    return StatusCode.UNKNOWN_ERROR
