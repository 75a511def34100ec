"""The governor's assignment algorithm: pure, property-tested."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from memq.governor.assignment import (
    BrokerSpec,
    TopicSpec,
    assign,
    assign_least_loaded,
    writers_needed,
)

racks = st.sampled_from(["a", "b", "c", None])
broker_lists = st.lists(
    st.builds(
        BrokerSpec,
        id=st.from_regex(r"^b[0-9]{1,3}$", fullmatch=True),
        capacity_mbps=st.floats(10, 500),
        rack=racks,
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda b: b.id,
)
topic_lists = st.lists(
    st.builds(
        TopicSpec,
        name=st.from_regex(r"^t[0-9]{1,3}$", fullmatch=True),
        expected_mbps=st.floats(0.1, 300),
        min_writers=st.integers(1, 3),
    ),
    max_size=25,
    unique_by=lambda t: t.name,
)


@given(topic_lists, broker_lists)
@settings(max_examples=300)
def test_capacity_is_never_exceeded(topics, brokers):
    a = assign(topics, brokers)
    caps = {b.id: b.capacity_mbps for b in brokers}
    for b, load in a.load.items():
        assert load <= caps[b] + 1e-6
    # The loads are exactly the placed part of each topic (the rest is its shortfall),
    # split evenly over its writers.
    expected = dict.fromkeys(caps, 0.0)
    for t in topics:
        ws = a.writers[t.name]
        placed = t.expected_mbps - a.shortfall.get(t.name, 0.0)
        assert placed >= -1e-6
        for w in ws:
            expected[w] += placed / len(ws)
    for b in caps:
        assert abs(expected[b] - a.load[b]) < 1e-4


@given(topic_lists, broker_lists)
@settings(max_examples=200)
def test_every_topic_is_served_when_capacity_allows(topics, brokers):
    # Plenty of room: total demand at most a fifth of the smallest broker's capacity.
    small = min(b.capacity_mbps for b in brokers)
    topics = [
        TopicSpec(t.name, min(t.expected_mbps, small / (5 * max(1, len(topics)))), t.min_writers)
        for t in topics
    ]
    a = assign(topics, brokers)
    assert a.shortfall == {}
    for t in topics:
        ws = a.writers[t.name]
        assert len(ws) == min(len(brokers), max(1, t.min_writers))
        assert len(set(ws)) == len(ws)


@given(topic_lists, broker_lists)
def test_deterministic_and_order_independent(topics, brokers):
    a = assign(topics, brokers)
    rng = random.Random(1)
    t2, b2 = topics[:], brokers[:]
    rng.shuffle(t2)
    rng.shuffle(b2)
    assert assign(t2, b2) == a


def test_rack_spread():
    brokers = [BrokerSpec(f"b{i}", 100, rack=r) for i, r in enumerate("aabbcc")]
    topics = [TopicSpec(f"t{i}", 1, min_writers=3) for i in range(30)]
    a = assign(topics, brokers)
    rack = {b.id: b.rack for b in brokers}
    for ws in a.writers.values():
        assert len({rack[w] for w in ws}) == 3  # one writer in each rack


@given(st.integers(2, 10), st.integers(1, 60), st.integers(0, 10_000))
@settings(max_examples=100)
def test_removing_a_broker_moves_only_its_topics(n, ntopics, seed):
    brokers = [BrokerSpec(f"b{i}", 1000) for i in range(n)]
    topics = [TopicSpec(f"t{i}", 5, min_writers=2) for i in range(ntopics)]
    before = assign(topics, brokers)
    gone = brokers[seed % n]
    after = assign(topics, [b for b in brokers if b != gone], before.writers)
    for t in topics:
        old, new = set(before.writers[t.name]), set(after.writers[t.name])
        if gone.id not in old:
            assert old == new  # untouched
        else:
            assert old - {gone.id} <= new  # the survivors stay writers


@given(st.integers(1, 10), st.integers(1, 60))
@settings(max_examples=100)
def test_adding_a_broker_moves_only_topics_it_takes(n, ntopics):
    brokers = [BrokerSpec(f"b{i}", 1000) for i in range(n)]
    topics = [TopicSpec(f"t{i}", 5, min_writers=2) for i in range(ntopics)]
    before = assign(topics, brokers)
    new = BrokerSpec("b-new", 1000)
    after = assign(topics, [*brokers, new], before.writers)
    moved = [t for t in topics if set(before.writers[t.name]) != set(after.writers[t.name])]
    for t in moved:
        assert new.id in after.writers[t.name]  # only topics the newcomer now writes changed
        assert len(set(before.writers[t.name]) - set(after.writers[t.name])) <= 1
    # About min_writers/(n+1) of the topics move, never all of them.
    if ntopics >= 20 and n >= 3:
        assert len(moved) < ntopics


def test_shortfall_keeps_current_writers_and_is_reported():
    brokers = [BrokerSpec("b1", 50), BrokerSpec("b2", 50)]
    topics = [TopicSpec("big", 70), TopicSpec("big2", 70), TopicSpec("small", 10)]
    current = {"big": ("b1",), "big2": ("b2",), "small": ("b2",)}
    a = assign(topics, brokers, current)  # 150 MB/s of demand on 100 MB/s of brokers
    assert a.shortfall and sum(a.shortfall.values()) >= 50 - 1e-6
    assert all(load <= 50 for load in a.load.values())
    # Recomputing with its own output as the current state changes nothing: no thrash.
    assert assign(topics, brokers, a.writers) == a


def test_writers_needed_follows_traffic():
    assert writers_needed(TopicSpec("t", 10), 5, 100) == 1
    assert writers_needed(TopicSpec("t", 250), 5, 100) == 4  # 250 / 80
    assert writers_needed(TopicSpec("t", 10_000), 5, 100) == 5
    assert writers_needed(TopicSpec("t", 1, min_writers=3), 2, 100) == 2
    assert assign([TopicSpec("t", 1)], []).writers == {"t": ()}


def test_a_topic_that_fits_no_broker_memory_is_unplaced_not_overloading_anyone():
    from memq.governor.assignment import memory_demand

    small = [
        BrokerSpec("b1", 100, memory_bytes=8 << 20),
        BrokerSpec("b2", 100, memory_bytes=8 << 20),
    ]
    hot = TopicSpec("hot", 50, min_writers=2, batch_bytes=8 << 20, ring_size=4)
    a = assign([hot], small)
    assert a.writers["hot"] == () and a.unplaced == {"hot": 2} and a.shortfall["hot"] == 50
    # With room in memory the same topic is placed on both.
    big = [BrokerSpec("b1", 100, memory_bytes=1 << 30), BrokerSpec("b2", 100, memory_bytes=1 << 30)]
    placed = assign([hot], big)
    assert set(placed.writers["hot"]) == {"b1", "b2"} and not placed.unplaced
    assert placed.memory["b1"] == round(memory_demand(hot, 25))


@given(topic_lists, broker_lists)
@settings(max_examples=200)
def test_planned_memory_never_exceeds_a_brokers_pool(topics, brokers):
    from memq.governor.assignment import MEMORY_UTILISATION, memory_demand

    brokers = [BrokerSpec(b.id, b.capacity_mbps, b.rack, memory_bytes=256 << 20) for b in brokers]
    for algo in (assign, assign_least_loaded):
        a = algo(topics, brokers)
        planned = dict.fromkeys((b.id for b in brokers), 0.0)
        for t in topics:
            ws = a.writers[t.name]
            for w in ws:
                planned[w] += memory_demand(
                    t,
                    t.expected_mbps
                    / writers_needed(
                        t, len(brokers), sorted(b.capacity_mbps for b in brokers)[len(brokers) // 2]
                    ),
                )
        for b in brokers:
            assert planned[b.id] <= b.memory_bytes * MEMORY_UTILISATION + 1
        assert all(n > 0 for n in a.unplaced.values())


def test_least_loaded_evens_out_load():
    brokers = [BrokerSpec(f"b{i}", 100) for i in range(4)]
    topics = [TopicSpec(f"t{i}", 10, min_writers=1) for i in range(8)]
    a = assign_least_loaded(topics, brokers)
    assert sorted(a.load.values()) == [20.0, 20.0, 20.0, 20.0]
