"""One record as one JSON line: the shape shared by ``memq consume`` and ``memq backfill``.

``key``/``value`` are UTF-8 strings when the bytes decode as UTF-8, else null with
``key_b64``/``value_b64`` carrying base64; ``headers`` maps names to UTF-8 text (null
for binary values, whose base64 is in ``headers_b64``; a name repeated in the record
maps to the list of its values, in order, in both); ``timestamp`` is ISO-8601 UTC with
milliseconds (a time outside the years 1-9999: its epoch milliseconds, digits).

Also the kcat-like text lines of ``memq produce`` (read) and ``memq consume --format raw``
(written): ``[KEY SEP] VALUE``, each field as is (``raw``) or base64-encoded (``base64``,
for binary data and values holding a newline). Pure: bytes in, bytes out.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from memq.errors import MalformedError
from memq.formats.block import Header
from memq.formats.times import ms_to_iso

__all__ = [
    "FIELD_FORMATS",
    "decode_field",
    "encode_field",
    "record_json",
    "record_line",
    "split_line",
]

#: How a key or value is written in a text line.
FIELD_FORMATS = ("raw", "base64")


def _text(b: bytes | None) -> tuple[str | None, str | None]:
    if b is None:
        return None, None
    try:
        return b.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(b).decode()


def record_json(
    record_id: str,
    key: bytes | None,
    value: bytes,
    headers: tuple[Header, ...] | None,
    timestamp_ms: int,
) -> str:
    k, kb = _text(key)
    v, vb = _text(value)
    hdrs: dict[str, Any] | None = None
    hdrs_b64: dict[str, Any] | None = None
    if headers is not None:
        seen: dict[str, list[tuple[str | None, str | None]]] = {}
        for name, raw in headers:
            seen.setdefault(name, []).append(_text(raw))
        hdrs, b64 = {}, {}
        for name, vals in seen.items():  # a repeated name (Kafka allows it): a list
            texts, encs = [t for t, _ in vals], [e for _, e in vals]
            hdrs[name] = texts[0] if len(vals) == 1 else texts
            if any(e is not None for e in encs):
                b64[name] = encs[0] if len(vals) == 1 else encs
        hdrs_b64 = b64 or None
    doc = {
        "id": record_id,
        "key": k,
        "key_b64": kb,
        "value": v,
        "value_b64": vb,
        "headers": hdrs,
        "headers_b64": hdrs_b64,
        "timestamp": ms_to_iso(timestamp_ms),
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def encode_field(data: bytes | None, fmt: str) -> bytes:
    """``data`` as it goes into a text line: as is (``raw``) or base64; None (no key) is
    the empty field."""
    if data is None:
        return b""
    return base64.b64encode(data) if fmt == "base64" else bytes(data)


def decode_field(text: bytes, fmt: str, what: str = "value") -> bytes:
    """The bytes of one field of a text line (``raw``: as is; ``base64``: decoded, strictly:
    anything but the base64 alphabet and its padding is a :class:`MalformedError`)."""
    if fmt != "base64":
        return text
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        shown = text[:20].decode("utf-8", "replace") + ("..." if len(text) > 20 else "")
        raise MalformedError(f"{what} {shown!r} is not base64") from None


def split_line(
    line: bytes,
    separator: bytes | None = None,
    *,
    key_format: str = "raw",
    value_format: str = "raw",
) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line (without its line ending). With ``separator`` the
    text before its first occurrence is the key (an empty one: no key); a line without
    it is a value without a key, as kcat reads it."""
    key: bytes | None = None
    value = line
    if separator:
        head, found, tail = line.partition(separator)
        if found:
            key = decode_field(head, key_format, "key") if head else None
            value = tail
    return key, decode_field(value, value_format)


def record_line(
    key: bytes | None,
    value: bytes,
    separator: bytes | None = None,
    *,
    key_format: str = "raw",
    value_format: str = "raw",
) -> bytes:
    """One output line: ``[key separator] value`` and a newline (no key: an empty key);
    :func:`split_line` reads it back."""
    head = encode_field(key, key_format) + separator if separator is not None else b""
    return head + encode_field(value, value_format) + b"\n"
