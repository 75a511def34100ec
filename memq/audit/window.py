"""Time windows for audit queries: ``10m``, ``2h``, ``1d``, ISO-8601 or epoch ms (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from memq.errors import ConfigError

__all__ = ["parse_duration_s", "parse_since"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_s(text: str) -> float:
    """``"90"``/``"90s"`` -> 90.0, ``"10m"`` -> 600.0, ``"1.5h"`` -> 5400.0."""
    m = _DURATION.match(text)
    if m is None:
        raise ConfigError(f"{text!r} is not a duration: use e.g. 30s, 10m, 2h, 1d")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


def parse_since(text: str, now_ms: int) -> int:
    """Start of a window: a duration back from ``now_ms``, ISO-8601 (naive: UTC), epoch ms."""
    t = text.strip()
    if t.isdigit() and len(t) >= 10:  # epoch milliseconds (a bare number of seconds is short)
        return int(t)
    if _DURATION.match(t):
        return now_ms - int(parse_duration_s(t) * 1000)
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{text!r} is neither a duration (10m, 2h, 1d), an ISO-8601 time "
            "(2026-11-22T05:00:00Z) nor epoch milliseconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
