"""Time windows for audit queries: ``10m``, ``2h``, ``1d``, ISO-8601 or epoch ms (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from memq.errors import ConfigError
from memq.formats.times import time_to_ms

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
    """Start of a window: a duration back from ``now_ms`` (with its unit), ISO-8601
    (naive: UTC) or epoch milliseconds; never after ``now_ms`` (an empty window proves
    nothing, so it is an error, not a report of zeros)."""
    t = text.strip()
    if t.isdigit() and int(t) == 0:  # zero seconds back, or the epoch?
        raise ConfigError(f"{text!r} is ambiguous: give a duration with its unit (e.g. 10m)")
    if _DURATION.match(t) and not t.isdigit():
        back = int(parse_duration_s(t) * 1000)
        if back <= 0:
            raise ConfigError(f"{text!r} is an empty window: give a duration > 0 (e.g. 10m)")
        since = now_ms - back
    else:
        try:
            since = time_to_ms(t)
        except ValueError as e:
            # A bare number is a duration without its unit or epoch seconds: not guessed.
            unit = f"{t}s, " if t.isdigit() else ""
            raise ConfigError(f"{e}, or a duration with its unit (e.g. {unit}10m, 2h)") from None
    if since >= now_ms:
        raise ConfigError(
            f"{text!r} is not in the past (now is {_utc(now_ms)} UTC): the window would be empty"
        )
    return since


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
