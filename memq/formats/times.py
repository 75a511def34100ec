"""Times as users write them (pure): ISO-8601 text to epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso_ms"]


def iso_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 date or time (``Z`` or ``z`` for UTC; no zone:
    UTC; a date alone: its midnight UTC); ValueError for anything else."""
    t = text.strip()
    if t[-1:] in ("Z", "z"):
        t = t[:-1] + "+00:00"
    when = datetime.fromisoformat(t)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
