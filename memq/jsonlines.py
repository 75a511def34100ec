"""One record as one JSON line: the shape shared by ``memq consume`` and ``memq backfill``.

``key``/``value`` are UTF-8 strings when the bytes decode as UTF-8, else null with
``key_b64``/``value_b64`` carrying base64; ``headers`` maps names to UTF-8 text (null
for binary values, whose base64 is in ``headers_b64``; a repeated name keeps its last
value); ``timestamp`` is ISO-8601 UTC with milliseconds.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from memq.formats.block import Header

__all__ = ["iso_ms", "record_json"]


def _text(b: bytes | None) -> tuple[str | None, str | None]:
    if b is None:
        return None, None
    try:
        return b.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(b).decode()


def iso_ms(ts_ms: int) -> str:
    t = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def record_json(
    record_id: str,
    key: bytes | None,
    value: bytes,
    headers: tuple[Header, ...] | None,
    timestamp_ms: int,
) -> str:
    k, kb = _text(key)
    v, vb = _text(value)
    hdrs: dict[str, str | None] | None = None
    hdrs_b64: dict[str, str] | None = None
    if headers is not None:
        hdrs, b64 = {}, {}
        for name, raw in headers:
            text, enc = _text(raw)
            hdrs[name] = text
            if enc is not None:
                b64[name] = enc
            else:
                b64.pop(name, None)
        hdrs_b64 = b64 or None
    doc = {
        "id": record_id,
        "key": k,
        "key_b64": kb,
        "value": v,
        "value_b64": vb,
        "headers": hdrs,
        "headers_b64": hdrs_b64,
        "timestamp": iso_ms(timestamp_ms),
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
