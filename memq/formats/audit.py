"""Audit record: one small JSON object per produced, consumed or dropped block (pure).

Producers publish one ``produced`` record per acknowledged block and consumers one
``consumed`` record per block they handed to the application, and one ``dropped`` record
per copy of a block they recognised as already handed out (consumer dedup) and did not
hand out again, to a Kafka audit topic (default ``memq.audit``); the auditor matches
them by block identity ``(topic, producer_id, epoch, sequence)`` and, for consumers, the
consumer group::

    {"format_version":1,"kind":"produced","topic":"events","producer_id":7,"epoch":0,
     "sequence":42,"records":1000,"content_crc":305419896,"min_timestamp":1763790000000,
     "time":1763790001002,"client":"memq-producer","acks":"all","bucket":"memq-dev",
     "key":"3f/dev/topics/events/dt=2026-11-22/hh=05/...","group":null,"block_index":0,
     "crc":1234567890}

``content_crc`` is the CRC-32 of the block's uncompressed record payload (the msgpack
array of its records, exactly as encoded), computed by the producer before compression
and by the consumer after decompression: equal values mean the consumer handed out the
records the producer wrote, whatever the codec. ``records`` is the number of records of
the block (producer), handed out from it (``consumed``; fewer after a seek into the
block) or in the dropped copy (``dropped``). ``time`` is the ack time (producer), the
hand-out time (``consumed``) or the drop time (``dropped``), in ms since the Unix
epoch; ``min_timestamp`` is the block's oldest record timestamp, the start of the
end-to-end latency. ``key``/``bucket`` name the object holding the block (known to
``acks=all`` producers and to consumers; for ``dropped``, the object of the dropped copy),
``group`` the consumer group (consumers only).

``dropped`` was added within format version 1: an auditor that predates it rejects such
a record as undecodable (an unknown ``kind``) and counts it with the rejected records.

``crc`` protects the record like a notification's (CRC-32 of the canonical JSON of all
other fields), so a damaged record is rejected instead of miscounted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memq.errors import UnsupportedVersionError
from memq.formats.block import INT64_MAX, INT64_MIN
from memq.formats.crcjson import decode_crc_json, encode_crc_json, field_error

__all__ = [
    "AUDIT_VERSION",
    "MAX_AUDIT_RECORD_SIZE",
    "AuditKind",
    "AuditRecord",
    "decode_audit",
    "encode_audit",
]

AUDIT_VERSION = 1
MAX_AUDIT_RECORD_SIZE = 16 * 1024

#: ``dropped`` came later within version 1 (older auditors reject it as undecodable).
AuditKind = Literal["produced", "consumed", "dropped"]

_Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
_U32 = Annotated[int, Field(ge=0, le=0xFFFFFFFF)]
_U64 = Annotated[int, Field(ge=0, le=(1 << 64) - 1)]
_Ts = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
_Short = Annotated[str, Field(max_length=256)]


class AuditRecord(BaseModel):
    """What a producer or consumer reports about one block (or one dropped copy of it)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    format_version: int = AUDIT_VERSION
    kind: AuditKind
    topic: _Name
    producer_id: _U64
    epoch: _U32
    sequence: _U64
    records: Annotated[int, Field(ge=0, le=0xFFFFFFFF)]
    content_crc: _U32
    min_timestamp: _Ts
    time: _Ts
    client: _Short = ""
    acks: Literal["0", "1", "all"] | None = None
    bucket: Annotated[str, Field(max_length=1024)] | None = None
    key: Annotated[str, Field(max_length=1024)] | None = None
    group: _Short | None = None
    block_index: Annotated[int, Field(ge=0, le=0xFFFFFFFF)] | None = None
    #: ``produced`` only: the topic's retention.ms when the block was acked (null:
    #: unknown; forever is 9223372036854775807, Kafka's Long.MAX_VALUE); past the
    #: topic's latest retention, an unconsumed block is expired, not missing.
    retention_ms: Annotated[int, Field(ge=0)] | None = None


def encode_audit(fields: dict[str, Any]) -> bytes:
    """Compact JSON of ``fields`` (an :class:`AuditRecord`'s fields) plus its ``crc``.

    Takes a plain dict so the data path does not build a model per block; the auditor
    validates on decode.
    """
    return encode_crc_json({"format_version": AUDIT_VERSION, **fields})


def decode_audit(data: bytes | bytearray | memoryview | str) -> AuditRecord:
    """Parse and validate one audit record; raises a typed :class:`MemqFormatError`."""
    obj = decode_crc_json(
        data, what="audit record", max_size=MAX_AUDIT_RECORD_SIZE, reader="auditor"
    )
    version = obj.get("format_version")
    if version != AUDIT_VERSION:
        raise UnsupportedVersionError(
            f"audit record format_version {version!r} is not supported (this auditor knows "
            f"{AUDIT_VERSION}): upgrade the auditor"
        )
    try:
        return AuditRecord.model_validate(obj)
    except ValidationError as e:
        raise field_error("audit record", e, "record") from None
