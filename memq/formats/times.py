"""Times as users read and write them (pure): ISO-8601 text and epoch milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["iso_to_ms", "ms_to_iso", "time_to_ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_to_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 date or time (``Z`` or ``z`` for UTC; no zone:
    UTC; a date alone: its midnight UTC); ValueError for anything else."""
    t = text.strip()
    if t[-1:] in ("Z", "z"):
        t = t[:-1] + "+00:00"
    when = datetime.fromisoformat(t)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    # Exact integers: timestamp() * 1000 in floats made ~20% of the milliseconds of some
    # years (2004, 2038) one millisecond early.
    return (when - _EPOCH) // timedelta(milliseconds=1)


def time_to_ms(text: str) -> int:
    """Epoch milliseconds of ISO-8601 text (:func:`iso_to_ms`) or of epoch-millisecond
    digits; ValueError with a one-line reason for anything else. A positive number of
    fewer than 12 digits is refused, not guessed: epoch *seconds* (1795576922) or an ISO
    basic date (20261125) read as milliseconds would silently be January 1970."""
    t = text.strip()
    if _INTEGER.fullmatch(t):
        ms = int(t)
        if ms > 0 and len(t) < 12:
            raise ValueError(
                f"{text!r} is ambiguous: give epoch milliseconds (13 digits) or ISO-8601 "
                "(e.g. 2026-11-22T05:00:00Z)"
            )
        return ms
    try:
        return iso_to_ms(t)
    except ValueError:
        raise ValueError(
            f"{text!r} is not ISO-8601 (e.g. 2026-11-22T05:00:00Z) or epoch milliseconds"
        ) from None


_INTEGER = re.compile(r"-?\d+")


def ms_to_iso(ts_ms: int) -> str:
    """``2026-11-22T05:00:00.000Z``; a time outside the years 1-9999 (a record may carry
    any int64) as its epoch milliseconds, digits, rather than an error."""
    try:
        t = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return str(ts_ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
