"""HTTP ingest: ``POST /v1/topics/{topic}/records`` on the broker's HTTP port.

Any program that can POST writes to MemQ; the broker turns the request into one producer
block and feeds it to the topic's processor, with the same acks, dedup, auth, ACLs and
limits as the binary protocol (a request is all-or-nothing: one block, stored whole or
not at all).

Bodies:

- ``application/json``: ``{"records": [{"value": "text"} | {"value_b64": "..."},
  "key"/"key_b64": ..., "headers": {"name": "text" | null}, "timestamp": ms}]}``;
- ``text/plain`` or ``application/x-ndjson``: one record per line (the line's bytes are
  the value; a trailing newline is not a record).

``?acks=0|1|all`` (default ``all``: answered once the batch is in storage and its
notification acknowledged). An ``Idempotency-Key`` header makes retries of the same
request recognisable: the block gets an id derived from the key and the caller's
principal, so a retry that reaches the same writer is answered ``duplicate`` instead of
stored twice (and consumers drop any remaining copy).

Parsing is pure (:func:`parse_records`, :func:`http_status`); the handler is in
:mod:`memq.broker.http`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
import zlib
from typing import Any

import zstandard

from memq.errors import (
    IdempotencyKeyReusedError,
    InvalidRequestError,
    MemqError,
    MessageTooLargeError,
    StatusCode,
)
from memq.formats.block import INT64_MAX, INT64_MIN, Record

__all__ = [
    "OPENAPI",
    "body_fingerprint",
    "decode_body",
    "http_status",
    "idempotent_id",
    "parse_records",
]

#: HTTP status for each wire status code (the rest: 500).
_HTTP = {
    StatusCode.CORRUPT_MESSAGE: 400,
    StatusCode.INVALID_REQUEST: 400,
    StatusCode.UNSUPPORTED_VERSION: 400,
    StatusCode.UNKNOWN_TOPIC: 404,
    StatusCode.MESSAGE_TOO_LARGE: 413,
    StatusCode.THROTTLED: 429,
    StatusCode.UNAUTHENTICATED: 401,
    StatusCode.UNAUTHORIZED: 403,
    StatusCode.NOT_WRITER: 421,
    StatusCode.STORAGE_ERROR: 503,
    StatusCode.NOTIFICATION_ERROR: 503,
    StatusCode.SHUTTING_DOWN: 503,
    StatusCode.REQUEST_TIMED_OUT: 504,
    StatusCode.COORDINATION_ERROR: 503,
}


def http_status(err: MemqError) -> int:
    if isinstance(err, IdempotencyKeyReusedError):
        return 422
    return _HTTP.get(err.status, 500)


def _bytes(rec: dict[str, Any], name: str, i: int, *, required: bool) -> bytes | None:
    text, b64 = rec.get(name), rec.get(f"{name}_b64")
    if text is not None and b64 is not None:
        raise InvalidRequestError(f"record {i}: give {name} or {name}_b64, not both")
    if b64 is not None:
        if not isinstance(b64, str):
            raise InvalidRequestError(f"record {i}: {name}_b64 must be a base64 string")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError(f"record {i}: {name}_b64 is not valid base64") from None
    if text is None:
        if required:
            raise InvalidRequestError(f"record {i}: {name} (UTF-8 text) or {name}_b64 is required")
        return None
    if not isinstance(text, str):
        raise InvalidRequestError(
            f"record {i}: {name} must be a string (use {name}_b64 for binary data)"
        )
    return _utf8(text, f"record {i}: {name}", f" (use {name}_b64 for binary data)")


def _utf8(text: str, what: str, hint: str = "") -> bytes:
    """``text`` as UTF-8; JSON can carry lone surrogates (``"\\ud800"``), which are not text."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(f"{what} is not valid Unicode text{hint}") from None


def _headers(raw: Any, i: int) -> tuple[tuple[str, bytes | None], ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequestError(f"record {i}: headers must be an object of name: text|null")
    out = []
    for name, value in raw.items():
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"record {i}: header {name!r} must be text or null")
        out.append(
            (str(name), None if value is None else _utf8(value, f"record {i}: header {name!r}"))
        )
    return tuple(out) or None


def parse_records(body: bytes, content_type: str, now_ms: int | None = None) -> list[Record]:
    """The records of a request body; InvalidRequestError naming the first problem."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ctype in ("text/plain", "application/x-ndjson", "application/octet-stream"):
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if not lines:
            raise InvalidRequestError("the request holds no record (an empty body)")
        return [(now, None, line.removesuffix(b"\r"), None) for line in lines]
    if ctype != "application/json":
        raise InvalidRequestError(
            f"unsupported Content-Type {content_type!r}: use application/json, text/plain, "
            "application/x-ndjson or application/octet-stream"
        )
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"the body is not valid JSON: {e}") from None
    recs = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(recs, list) or not recs:
        raise InvalidRequestError('the body must be {"records": [ ... ]} with at least one')
    out: list[Record] = []
    for i, rec in enumerate(recs):
        if not isinstance(rec, dict):
            raise InvalidRequestError(f"record {i} must be an object")
        ts = rec.get("timestamp", now)
        if type(ts) is not int or not INT64_MIN <= ts <= INT64_MAX:
            raise InvalidRequestError(f"record {i}: timestamp must be an integer (epoch ms)")
        value = _bytes(rec, "value", i, required=True)
        assert value is not None
        out.append(
            (ts, _bytes(rec, "key", i, required=False), value, _headers(rec.get("headers"), i))
        )
    return out


#: ``Content-Encoding`` values of a request body, and their zlib window bits.
_ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
               "deflate": zlib.MAX_WBITS}  # fmt: skip


def decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The request body without its ``Content-Encoding`` (none, identity, gzip, deflate
    or zstd), at most ``limit`` bytes decoded (a small compressed body may expand a
    thousandfold); a typed error for anything else."""
    enc = (encoding or "identity").strip().lower()
    if enc == "identity":
        return body
    too_big = MessageTooLargeError(
        f"the {enc}-decoded body is over the broker's limit of {limit} bytes "
        "(max_frame_bytes): split the records over several requests"
    )
    if enc == "zstd":
        z = zstandard.ZstdDecompressor().decompressobj()
        parts, size = [], 0
        try:  # (small steps: a few bytes of zstd can stand for megabytes)
            for i in range(0, len(body), 256):
                parts.append(z.decompress(body[i : i + 256]))
                size += len(parts[-1])
                if size > limit or z.eof:
                    break
        except zstandard.ZstdError as e:
            raise InvalidRequestError(f"the body is not valid zstd: {e}") from None
        out = b"".join(parts)
        if size <= limit and not z.eof:
            raise InvalidRequestError("the zstd body is truncated")
    elif enc in _ZLIB_WBITS:
        # ("deflate" is sent with the zlib wrapper, as the RFC says, and without)
        tries = [_ZLIB_WBITS[enc]] + ([-zlib.MAX_WBITS] if enc == "deflate" else [])
        for wbits in tries:
            d = zlib.decompressobj(wbits)
            try:
                out = d.decompress(body, limit + 1)
                break
            except zlib.error:
                continue
        else:
            raise InvalidRequestError(f"the body is not valid {enc}")
        if len(out) <= limit and not d.eof:
            raise InvalidRequestError(f"the {enc} body is truncated")
    else:
        raise InvalidRequestError(
            f"Content-Encoding {encoding!r} is not supported: send the body as is, or "
            "with gzip, deflate or zstd"
        )
    if len(out) > limit:
        raise too_big
    return out


def body_fingerprint(body: bytes, content_type: str) -> bytes:
    """What tells a retry (the same body) from a reused Idempotency-Key (another body)."""
    return hashlib.blake2b(body, digest_size=16, person=content_type.encode()[:16]).digest()


def idempotent_id(principal: str | None, key: str) -> int:
    """A producer id (63 bits) for requests carrying ``Idempotency-Key: key``."""
    if not key or len(key) > 256:
        raise InvalidRequestError("Idempotency-Key must be 1-256 characters")
    digest = hashlib.blake2b(f"{principal or ''}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "status": {"type": "string"}},
    "required": ["error", "status"],
}

#: The OpenAPI description served at ``/openapi.json``.
OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "MemQ broker HTTP ingest", "version": "1"},
    "paths": {
        "/v1/topics/{topic}/records": {
            "post": {
                "summary": "Write records to a topic (one block, all or nothing)",
                "parameters": [
                    {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}},
                    {
                        "name": "acks",
                        "in": "query",
                        "schema": {
                            "type": "string",
                            "enum": ["0", "1", "all", "-1"],
                            "default": "all",
                        },
                    },
                    {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}},
                    {
                        "name": "Content-Encoding",
                        "in": "header",
                        "schema": {
                            "type": "string",
                            "enum": ["identity", "gzip", "deflate", "zstd"],
                        },
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["records"],
                                "properties": {
                                    "records": {
                                        "type": "array",
                                        "minItems": 1,
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "value": {"type": "string"},
                                                "value_b64": {"type": "string", "format": "byte"},
                                                "key": {"type": "string", "nullable": True},
                                                "key_b64": {"type": "string", "format": "byte"},
                                                "headers": {
                                                    "type": "object",
                                                    "additionalProperties": {
                                                        "type": "string",
                                                        "nullable": True,
                                                    },
                                                },
                                                "timestamp": {"type": "integer", "format": "int64"},
                                            },
                                        },
                                    }
                                },
                            }
                        },
                        "text/plain": {
                            "schema": {"type": "string", "description": "one record per line"}
                        },
                        "application/x-ndjson": {"schema": {"type": "string"}},
                    },
                },
                "responses": {
                    "200": {
                        "description": "stored (acks=all: in storage and notified; acks=1: in the open batch)"
                    },
                    "202": {"description": "accepted (acks=0)"},
                    **{
                        str(code): {
                            "description": what,
                            "content": {"application/json": {"schema": _ERROR}},
                        }
                        for code, what in (
                            (400, "malformed body or bad request"),
                            (401, "authentication required"),
                            (403, "the principal may not produce to the topic"),
                            (404, "unknown topic"),
                            (413, "body larger than the topic's block limit"),
                            (421, "this broker does not write the topic: use a writer"),
                            (422, "Idempotency-Key reused with a different body"),
                            (429, "throttled: retry with backoff"),
                            (503, "storage or Kafka failed, or shutting down: retry"),
                        )
                    },
                },
            }
        }
    },
}
