from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.errors import MalformedError
from memq.formats import batch_id, object_key, parse_object_key, topic_prefix
from memq.formats.keys import hour_of
from tests.unit.strategies import names

ms = st.integers(min_value=0, max_value=4102444800000)  # through 2100


@given(names, names, ms, st.integers(0, 10**8), st.booleans(), st.integers(0, 3))
def test_round_trip(cluster, topic, created, seq, hashed, attempt):
    bid = batch_id(created, "b-1", seq, attempt)
    key = object_key(cluster, topic, bid, created, use_hash_prefix=hashed)
    parsed = parse_object_key(key)
    assert (parsed.cluster, parsed.topic, parsed.batch_id) == (cluster, topic, bid)
    assert (parsed.hash is not None) == hashed
    assert (parsed.dt, parsed.hh) == hour_of(created)
    assert parsed.hour_start_ms <= created < parsed.hour_start_ms + 3_600_000
    prefix = topic_prefix(cluster, topic, hash_=parsed.hash, dt=parsed.dt, hh=parsed.hh)
    assert key.startswith(prefix)


def test_layout():
    key = object_key("dev", "events", "1763790000950-00000042-b1", 1763790000950)
    assert key.split("/")[1:] == [
        "dev",
        "topics",
        "events",
        "dt=2025-11-22",
        "hh=05",
        "1763790000950-00000042-b1",
    ]
    assert len(key.split("/")[0]) == 2


def test_batch_ids_sort_by_time():
    ids = [batch_id(t, "b", s) for t, s in [(5, 9), (10, 1), (10, 2), (999, 0)]]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    "bad",
    [
        "x",
        "zz/dev/topics/t/dt=2026-01-01/hh=01/b",
        "00/dev/topics/t/dt=2026-13-01/hh=01/b",
        "dev/topics/t/dt=2026-01-01/hh=24/b",
        "dev/topics/t/dt=2026-01-01/hh=01/",
        "ff/dev/topics/t/dt=2026-01-01/hh=01/b",  # wrong hash for the id
    ],
)
def test_parse_rejects(bad):
    with pytest.raises(MalformedError):
        parse_object_key(bad)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "x" * 250, "ü"])
def test_bad_names(name):
    with pytest.raises(MalformedError):
        object_key("dev", name, "b", 0)
    with pytest.raises(MalformedError):
        topic_prefix(name, "t")


def test_bad_broker_id_and_prefix_args():
    with pytest.raises(MalformedError):
        batch_id(0, "a_b", 0)
    with pytest.raises(MalformedError):
        topic_prefix("c", "t", hh="01")
