"""Spark's filters on ``timestamp`` as the scan's time window (memq.spark.pushdown)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from memq.spark.options import EARLIEST_MS, LATEST_MS
from memq.spark.pushdown import TimeWindow, time_window

UTC = dt.UTC
T = ("timestamp",)


def _at(us: int, tz: dt.tzinfo = UTC) -> dt.datetime:
    return (dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=us)).astimezone(tz)


def _keeps(op: str, ms: int, us: int) -> bool:
    """What Spark's comparison of a record at ``ms`` with a literal of ``us`` keeps."""
    rec = ms * 1000
    return {
        "GreaterThan": rec > us,
        "GreaterThanOrEqual": rec >= us,
        "LessThan": rec < us,
        "LessThanOrEqual": rec <= us,
        "EqualTo": rec == us,
    }[op]


OPS = {
    "GreaterThan": GreaterThan,
    "GreaterThanOrEqual": GreaterThanOrEqual,
    "LessThan": LessThan,
    "LessThanOrEqual": LessThanOrEqual,
    "EqualTo": EqualTo,
}


def _in(w: TimeWindow, ms: int) -> bool:
    return (
        not w.empty
        and (w.start_ms is None or w.start_ms <= ms)
        and (w.end_ms is None or ms < w.end_ms)
    )


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize(
    "us", [1_763_776_800_000_000, 1_763_776_800_000_001, 1_763_776_800_999_999, -1_500, -1_000, 0]
)
def test_each_comparison_keeps_exactly_the_records_spark_keeps(op: str, us: int) -> None:
    w = time_window([OPS[op](T, _at(us))], None, None)
    for ms in range(us // 1000 - 3, us // 1000 + 4):
        assert _in(w, ms) == _keeps(op, ms, us), (op, us, ms, w)


def test_random_conjunctions_match_spark_row_by_row() -> None:
    rng = random.Random(19)
    base = 1_763_776_800_000
    for _ in range(300):
        picked = [
            (
                rng.choice(sorted(OPS)),
                (base + rng.randrange(-50, 50)) * 1000 + rng.choice([0, 0, 1, 999]),
            )
            for _ in range(rng.randrange(1, 4))
        ]
        start = rng.choice([None, base - 20, base + 5])
        end = rng.choice([None, base + 30, base + 6])
        if start is not None and end is not None and end <= start:
            end = None
        w = time_window([OPS[op](T, _at(us)) for op, us in picked], start, end)
        for ms in range(base - 60, base + 60):
            spark = all(_keeps(op, ms, us) for op, us in picked)
            option = (start is None or start <= ms) and (end is None or ms < end)
            assert _in(w, ms) == (spark and option), (picked, start, end, ms, w)


def test_zone_of_the_literal_does_not_matter() -> None:
    tokyo = dt.timezone(dt.timedelta(hours=9))
    us = 1_763_776_800_123_456
    assert time_window([GreaterThanOrEqual(T, _at(us, tokyo))], None, None) == time_window(
        [GreaterThanOrEqual(T, _at(us))], None, None
    )


def test_other_columns_kinds_and_values_are_ignored() -> None:
    ignored = [
        GreaterThan(("producer_id",), 5),
        LessThan(("timestamp",), dt.datetime(2025, 1, 1)),  # naive: not a zoned instant
        LessThan(("timestamp",), "2025-01-01"),
        In(T, (_at(0),)),
        Not(GreaterThan(T, _at(0))),
        IsNotNull(T),
        EqualTo(("a", "timestamp"), _at(0)),
    ]
    assert time_window(ignored, None, None) == TimeWindow(None, None, False)
    assert time_window(ignored, 10, 20) == TimeWindow(10, 20, False)


def test_bounds_at_the_ends_of_time_keep_their_records() -> None:
    # The window never narrows the listing: records dated near year 0001 or 9999 are
    # found like any others (a producer may stamp any int64 milliseconds).
    early, late = _at((EARLIEST_MS - 5) * 1000), _at((LATEST_MS + 5) * 1000)
    assert time_window([GreaterThan(T, late)], None, None) == TimeWindow(LATEST_MS + 6, None)
    assert time_window([LessThan(T, early)], None, None) == TimeWindow(None, EARLIEST_MS - 5)
    assert time_window([GreaterThan(T, early), LessThan(T, late)], None, None) == TimeWindow(
        EARLIEST_MS - 4, LATEST_MS + 5
    )


def test_filters_no_record_can_pass_make_an_empty_window() -> None:
    assert time_window([GreaterThan(T, _at(5000)), LessThan(T, _at(4000))], None, None).empty
    assert time_window([GreaterThan(T, _at(5000))], None, 5).empty  # (with the options')
    assert time_window([EqualTo(T, _at(5500))], None, None).empty  # between milliseconds
    assert time_window([EqualTo(T, _at(5000))], None, None) == TimeWindow(5, 6, False)
