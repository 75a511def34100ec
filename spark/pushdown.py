"""Spark filters on ``timestamp`` turned into the scan's time window (pure, no I/O).

With ``spark.sql.python.filterPushdown.enabled`` (Spark 4.1+), Spark hands a Python data
source the conjuncts of a query's ``WHERE`` that compare a column with a literal. Those
on ``timestamp`` become the exact window of the records read. Unlike the
``start_time``/``end_time`` options they do not narrow the listing (a record may lie
any time before or after its batch's seal time): a task reads each object's header and
only the blocks whose index entry overlaps the window, and drops the records outside
it. Spark still evaluates every filter after the scan (they are all returned as not
handled).

A record's ``timestamp`` is in milliseconds and Spark compares microseconds, so a
bound is rounded to the records it keeps: ``timestamp > t`` keeps ``ms >= floor(t/1000)
+ 1``, ``timestamp >= t`` keeps ``ms >= ceil(t/1000)``, ``timestamp < t`` keeps ``ms <
ceil(t/1000)``, ``timestamp <= t`` keeps ``ms < floor(t/1000) + 1``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["FILTER_PUSHDOWN_CONF", "TimeWindow", "time_window"]

#: The Spark setting that lets Spark call a Python data source's ``pushFilters``.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
_COLUMN = ("timestamp",)


class TimeWindow(NamedTuple):
    """Records with ``start_ms <= timestamp < end_ms`` (None: unbounded); ``empty``: none."""

    start_ms: int | None
    end_ms: int | None
    empty: bool = False


def _micros(value: Any) -> int | None:
    """Microseconds since the epoch of a zone-aware datetime literal (else None)."""
    if isinstance(value, dt.datetime) and value.utcoffset() is not None:
        return (value - _EPOCH) // _US
    return None


def _bounds(kind: str, us: int) -> tuple[int | None, int | None]:
    """The ``[lo, hi)`` milliseconds a comparison with ``us`` microseconds keeps."""
    floor_ms, ceil_ms = us // 1000, -(-us // 1000)
    if kind == "GreaterThan":
        return floor_ms + 1, None
    if kind == "GreaterThanOrEqual":
        return ceil_ms, None
    if kind == "LessThan":
        return None, ceil_ms
    if kind == "LessThanOrEqual":
        return None, floor_ms + 1
    if kind == "EqualTo":
        return ceil_ms, floor_ms + 1
    raise ValueError(kind)


_KINDS = frozenset({"GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "EqualTo"})


def time_window(filters: Iterable[Any], start_ms: int | None, end_ms: int | None) -> TimeWindow:
    """The window of ``[start_ms, end_ms)`` narrowed by the ``timestamp`` comparisons
    among ``filters`` (Spark ``Filter`` objects, ANDed; others are ignored)."""
    lo, hi = start_ms, end_ms
    for f in filters:
        kind = type(f).__name__
        if kind not in _KINDS or getattr(f, "attribute", None) != _COLUMN:
            continue
        us = _micros(getattr(f, "value", None))
        if us is None:
            continue
        a, b = _bounds(kind, us)
        if a is not None:
            lo = a if lo is None else max(lo, a)
        if b is not None:
            hi = b if hi is None else min(hi, b)
    # (The window never narrows the listing, so any int64 bound will do: a record may
    # carry any timestamp, year 9999 or 0001 included.)
    return TimeWindow(lo, hi, lo is not None and hi is not None and lo >= hi)
