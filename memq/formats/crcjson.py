"""CRC-protected canonical JSON, shared by notifications and audit records (pure).

A document is a JSON object whose last field ``crc`` is the CRC-32 of the canonical
encoding (``separators=(",", ":")``, ``ensure_ascii=False``, fields in document order)
of every other field; readers re-encode what they parsed to check it, so corruption is
detected even where the document still parses.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from memq.errors import ChecksumError, MalformedError
from memq.formats.crc import crc32

__all__ = ["canonical", "decode_crc_json", "encode_crc_json", "field_error"]


#: One encoder for every document (``json.dumps`` with these options builds a new one per
#: call: that was most of the cost of a small notification).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def canonical(fields: dict[str, Any]) -> bytes:
    return _ENCODER.encode(fields).encode()


def encode_crc_json(fields: dict[str, Any]) -> bytes:
    """``fields`` (modified: ``crc`` appended) as canonical JSON."""
    fields["crc"] = crc32(canonical(fields))
    return canonical(fields)


def decode_crc_json(
    data: bytes | bytearray | memoryview | str, *, what: str, max_size: int, reader: str
) -> dict[str, Any]:
    """The fields of a CRC-checked document (``crc`` removed), or a typed error naming
    ``what`` (e.g. "notification"); ``reader`` names who should check its topic."""
    if len(data) > max_size:
        raise MalformedError(
            f"{what} of {len(data)} bytes exceeds {max_size}: "
            f"is the {reader} reading the right Kafka topic?"
        )
    try:
        obj = json.loads(bytes(data) if isinstance(data, bytearray | memoryview) else data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise MalformedError(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise MalformedError(f"{what} must be a JSON object, got {type(obj).__name__}")
    crc = obj.pop("crc", None)
    if type(crc) is not int:
        raise MalformedError(f"{what} has no integer crc field")
    try:
        text = canonical(obj)
    except UnicodeEncodeError:  # a lone surrogate, escaped ("\ud800") or as raw bytes
        raise MalformedError(f"{what} has a string that is not valid Unicode") from None
    if crc32(text) != crc:
        raise ChecksumError(f"{what} crc does not match its content: it was corrupted")
    return obj


def field_error(what: str, e: ValidationError, default: str) -> MalformedError:
    """A :class:`MalformedError` naming the first invalid field of a document."""
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or default
    return MalformedError(f"{what} field {where!r}: {first['msg']}")
