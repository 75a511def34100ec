"""Notification: the small JSON pointer published to Kafka for each uploaded batch (pure).

One compact UTF-8 JSON object per Kafka record, readable by ``kcat``::

    {"format_version":1,"topic":"events","cluster":"dev","broker":"b1","storage":"s3",
     "bucket":"memq-dev","key":"3f/dev/topics/events/dt=2026-11-22/hh=05/...",
     "size":8388608,"block_count":12,"record_count":8100,
     "min_timestamp":1763790000000,"max_timestamp":1763790000950,
     "checksum":2857230913,"batch_id":"1763790000950-00000042-b1","created_at":1763790001002,
     "crc":1234567890}

``checksum`` is the batch header's CRC-32 (which covers every block's CRC). ``crc`` is
the CRC-32 of the canonical encoding of every other field (``json.dumps`` with
separators ``(",", ":")``, ``ensure_ascii=False``, fields in document order), so a
corrupted notification is detected even where it still parses. Readers ignore fields
they do not know; a new ``format_version`` is only used for changes a version-1
reader would misread.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memq.errors import MalformedError, UnsupportedVersionError
from memq.formats.block import INT64_MAX, INT64_MIN
from memq.formats.crcjson import decode_crc_json, encode_crc_json, field_error

__all__ = [
    "MAX_NOTIFICATION_SIZE",
    "NOTIFICATION_VERSION",
    "Notification",
    "decode_notification",
    "encode_notification",
]

NOTIFICATION_VERSION = 1
MAX_NOTIFICATION_SIZE = 64 * 1024

_Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
_U32 = Annotated[int, Field(ge=0, le=0xFFFFFFFF)]
_Count = Annotated[int, Field(ge=1, le=INT64_MAX)]
_Ts = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class Notification(BaseModel):
    """What a consumer needs to fetch and check one batch object."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    format_version: int = NOTIFICATION_VERSION
    topic: _Name
    cluster: _Name
    broker: Annotated[str, Field(min_length=1, max_length=256)]
    storage: Annotated[str, Field(min_length=1, max_length=64)]
    bucket: Annotated[str, Field(max_length=1024)]
    key: Annotated[str, Field(min_length=1, max_length=1024)]
    size: _Count
    block_count: _Count
    record_count: _Count
    min_timestamp: _Ts
    max_timestamp: _Ts
    checksum: _U32
    batch_id: Annotated[str, Field(min_length=1, max_length=256)]
    created_at: _Ts


def encode_notification(n: Notification) -> bytes:
    """Compact JSON with a fixed field order and a trailing ``crc`` field."""
    return encode_crc_json(n.model_dump())


def decode_notification(data: bytes | bytearray | memoryview | str) -> Notification:
    """Parse and validate one notification; raises a typed :class:`MemqFormatError`."""
    obj = decode_crc_json(
        data, what="notification", max_size=MAX_NOTIFICATION_SIZE, reader="consumer"
    )
    version = obj.get("format_version")
    if type(version) is not int:
        raise MalformedError("notification has no integer format_version")
    if version != NOTIFICATION_VERSION:
        raise UnsupportedVersionError(
            f"notification format_version {version} is not supported (this reader knows "
            f"{NOTIFICATION_VERSION}): upgrade the consumer"
        )
    try:
        n = Notification.model_validate(obj)
    except ValidationError as e:
        raise field_error("notification", e, "notification") from None
    if n.min_timestamp > n.max_timestamp:
        raise MalformedError("notification min_timestamp is after max_timestamp")
    return n
