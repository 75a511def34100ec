"""The consumer's state machine under scripted rebalances, failures and slow fetches.

Runs a real ``memq.Consumer`` over the in-process fakes of ``consumer_harness``: one
test per delivery bug fixed (a-f of the "Delivery guarantees" issue), dedup, and
property-based scripts checking the invariants (at-least-once, commits never pass a
record not handed out, exactly-once with dedup on).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.consumer import MessageId
from memq.errors import MemqFormatError, NotificationError, StorageError
from tests.unit.consumer_harness import TOPIC, Block, Harness, Stored, tp

NO_DEDUP = {"dedup.enable": False}
MANUAL = {"enable.auto.commit": False}
AUTO = {"enable.auto.commit": True, "auto.commit.interval.ms": 3_600_000}  # on revoke/close


def values(objs: list[Stored]) -> list[bytes]:
    return [v for o in objs for v in o.values]


def wait_until(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


@pytest.fixture
def harnesses() -> Any:
    made: list[Harness] = []

    def make(**kw: Any) -> Harness:
        made.append(Harness(**kw))
        return made[-1]

    yield make
    for h in made:
        h.close()


# --- a: nothing polled is dropped while the prefetch queue is full -------------------------


def test_a_notifications_polled_while_the_queue_is_full_are_kept(harnesses: Any) -> None:
    h = harnesses(partitions=2, config={"prefetch.objects": 1, **NO_DEDUP})
    first = h.publish(0)
    gate = h.storage.gates[first.key] = threading.Event()  # its fetch waits: the queue is full
    later = [h.publish(1) for _ in range(3)]
    h.assign(0)
    assert h.consume(10, 0.05) == []
    # Partition 1 is assigned by a poll made while the queue is full (the group is
    # served, every assigned partition paused); it is not paused yet, so that poll
    # returns its first notification, which must wait, not vanish.
    h.assign(1)
    assert h.consume(10, 0.05) == []
    assert h.member.positions[tp(1)] == 1  # Kafka's position is past it now
    gate.set()
    h.drain()
    h.check_commits()
    h.check_at_least_once()
    assert sorted(m.value for m in h.delivered) == sorted(values([first, *later]))


# --- b: an undecodable notification is raised in place, the rest of its poll kept ------------


def test_b_an_undecodable_notification_fails_in_place_until_seeked_past(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={**NO_DEDUP, **MANUAL})  # corrupt.object.policy=fail
    a = h.publish(0)
    h.publish_garbage(0)  # offset 1, polled in the same batch as everything else
    b, c = h.publish(0), h.publish(0)
    h.assign(0)
    assert [m.value for m in h.consume_until(len(a.values))] == a.values
    for _ in range(3):  # the same error each time: the offset never moves past it
        with pytest.raises(MemqFormatError):
            h.consume(100, 0.05)
    assert h.consumer.commit() == {(TOPIC, 0): 1}  # up to the bad one, not past it
    h.consumer.seek(MessageId(0, 2, 0, 0))  # the application moves past it explicitly
    rest = h.consume_until(len(b.values) + len(c.values))
    assert [m.value for m in rest] == values([b, c])
    h.check_commits()


def test_b_the_skip_policy_skips_only_the_undecodable_notification(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={"corrupt.object.policy": "skip"})
    a = h.publish(0)
    h.publish_garbage(0)
    b, c = h.publish(0), h.publish(0)
    h.assign(0)
    h.drain()
    assert [m.value for m in h.delivered] == values([a, b, c])
    assert h.consumer.stats.skipped_corrupt == 1
    h.consumer.commit()
    assert h.kafka.committed[tp(0)] == 4


# --- c: rebalance callbacks: cleanup always runs, lost partitions are never committed --------


def test_c_a_failed_commit_on_revoke_never_breaks_the_rebalance(harnesses: Any) -> None:
    h = harnesses(partitions=2, config={**NO_DEDUP, **AUTO})
    p0 = [h.publish(0) for _ in range(4)]
    p1 = [h.publish(1) for _ in range(2)]
    h.assign(0, 1)
    assert [m.value for m in h.consume_until(3)] == p0[0].values  # p0's first object done
    assert any(p.tp == tp(0) for p in h.consumer._prefetch.queue)  # more of p0 prefetched
    h.member.fail_commits = 1
    h.member.revoke([tp(0)])
    before = len(h.delivered)
    rest = h.consume_until(len(values(p1)))  # no error: the revoke is served inside
    assert sorted(m.value for m in rest) == sorted(values(p1))
    assert all(m.partition == 1 for m in h.delivered[before:])  # p0's queue was dropped
    assert h.consumer.stats.commit_failures == 1 and h.member.commit_failures == 1
    assert not any(p.tp == tp(0) for p in h.consumer._prefetch.queue)
    h.check_commits()


def test_c_lost_partitions_are_never_committed(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={**NO_DEDUP, **AUTO})
    objs = [h.publish(0) for _ in range(3)]
    h.assign(0)
    h.consume_until(len(objs[0].values))
    h.member.lose([tp(0)])
    assert h.consume(10, 0.05) == []
    assert h.member.commits_while_lost == 0
    assert not h.consumer._prefetch.queue and h.consumer._prefetch.current is None
    h.drain()  # assigned back: from the committed offset (nothing was committed)
    h.check_at_least_once()


# --- d: a partition assigned back resumes from where this member got to ------------------------


def test_d_a_partition_assigned_back_resumes_from_the_done_offset(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={**NO_DEDUP, **MANUAL})
    objs = [h.publish(0) for _ in range(5)]  # 3 records each
    h.assign(0)
    h.consume_until(6)  # objects 0 and 1 done
    assert len(h.consumer._prefetch.queue) == 3  # 2, 3 and 4 prefetched: Kafka is past them
    h.member.revoke([tp(0)])
    h.assign(0)  # the same rebalance gives it back
    h.drain()
    # From object 2 (the done offset): not from Kafka's position (5, past the prefetched
    # ones), not from the committed offset (none: the beginning, again).
    assert [m.value for m in h.delivered] == values(objs)


@pytest.mark.parametrize("commits", [AUTO, MANUAL], ids=["auto", "manual"])
def test_d_a_partition_given_back_after_another_member_committed_further_starts_there(
    harnesses: Any, commits: dict[str, Any]
) -> None:
    # Incremental rebalances (group.protocol=consumer, cooperative-sticky) revoke a
    # partition in one rebalance and may give it back in a later one, after another
    # member read on and committed: where this member got to is stale then.
    h = harnesses(partitions=1, config={**NO_DEDUP, **commits})
    objs = [h.publish(0) for _ in range(5)]  # 3 records each
    h.assign(0)
    h.consume_until(6)  # objects 0 and 1 done
    h.member.revoke([tp(0)])
    h.consume(10, 0.05)  # the revocation is served: the partition goes to another member
    h.kafka.committed[tp(0)] = 4  # ...which hands out objects 2 and 3 and commits
    h.others.update(values(objs[2:4]))
    h.assign(0)  # a later rebalance gives it back
    h.drain()
    assert [m.value for m in h.delivered] == values([objs[0], objs[1], objs[4]])
    h.check_at_least_once()


def test_d_start_positions_of_a_lost_partition_are_forgotten(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={**NO_DEDUP, **MANUAL, "prefetch.objects": 1})
    objs = [h.publish(0, [h.block(records=2), h.block(records=2)]) for _ in range(3)]
    h.assign(0)
    h.consume_until(4)  # object 0
    h.consumer.seek(MessageId(0, 2, 1, 0))  # object 2 from its second block...
    h.member.lose([tp(0)])  # ...but the partition is lost before it is fetched
    h.drain()  # back, from the committed offset (none: the beginning): all of object 2
    h.check_at_least_once()
    assert h.delivered[-4:] == [m for m in h.delivered if m.offset == 2]
    assert [m.value for m in h.delivered[-4:]] == objs[2].values


def test_d_close_in_the_middle_of_an_object_leaves_the_commit_at_its_next_record(
    harnesses: Any,
) -> None:
    # close() commits the position inside the object in progress, then closes the Kafka
    # consumer, which serves the revocation (and its auto-commit): that commit must not
    # take the group back to the start of the object (read again, whole, by the next
    # owner: duplicates after a graceful leave).
    h = harnesses(partitions=1, config={**NO_DEDUP, **AUTO, "prefetch.objects": 1})
    objs = [h.publish(0, [h.block(records=2), h.block(records=2)]) for _ in range(2)]
    h.assign(0)
    h.consume_until(4 + 3)  # object 0, and object 1 up to its last record
    h.consumer.close()
    assert h.kafka.commit_log[-1] == (tp(0), 1, "memq:1:1")
    assert h.committed_records() == set(values(objs)[:7])
    h.check_commits()


@pytest.mark.parametrize("how", ["revoke", "close"])
def test_d_a_partition_left_before_anything_was_handed_out_keeps_its_commit_inside_an_object(
    harnesses: Any, how: str
) -> None:
    # Another member handed out object 0 and the first block of object 1 and committed
    # there. This member is assigned the partition and leaves it (a rebalance, close())
    # before its fetch of object 1 returns: its commit on the way out must keep that
    # position, not take the group back to the start of object 1.
    h = harnesses(partitions=1, config={**NO_DEDUP, **AUTO})
    objs = [h.publish(0, [h.block(records=2), h.block(records=2)]) for _ in range(3)]
    h.kafka.committed[tp(0)], h.kafka.metadata[tp(0)] = 1, "memq:1:0"
    h.others.update(objs[0].values + objs[1].values[:2])
    gate = h.storage.gates[objs[1].key] = threading.Event()  # a slow GET
    h.assign(0)
    assert h.consume(10, 0.05) == []
    if how == "close":
        h.consumer.close()
    else:
        h.member.revoke([tp(0)])
        assert h.consume(10, 0.05) == []
    assert all(c == (tp(0), 1, "memq:1:0") for c in h.kafka.commit_log), h.kafka.commit_log
    gate.set()
    if how == "revoke":  # given back: it starts there
        h.drain()
        assert [m.value for m in h.delivered] == objs[1].values[2:] + objs[2].values
        h.check_at_least_once()


# --- e: transient fetch errors are retried; iteration never ends silently ----------------------


def test_e_transient_fetch_errors_are_retried_within_the_deadline(harnesses: Any) -> None:
    h = harnesses(partitions=1)
    objs = [h.publish(0) for _ in range(3)]
    h.storage.fail_times[objs[1].key] = 3
    h.assign(0)
    got: list[bytes] = []
    for m in h.consumer:  # a StorageError would end this loop
        got.append(m.value)
        if len(got) == len(values(objs)):
            break
    assert got == values(objs)
    assert h.consumer.stats.fetch_retries == 3


def test_e_a_persistent_fetch_error_is_raised_typed_after_the_deadline(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={"fetch.retry.timeout.ms": 300, **MANUAL})
    objs = [h.publish(0) for _ in range(3)]
    h.storage.fail_times[objs[1].key] = 1 << 30
    t0 = time.monotonic()
    h.assign(0)
    h.consume_until(len(objs[0].values))
    with pytest.raises(StorageError):
        deadline = t0 + 10
        while time.monotonic() < deadline:
            assert h.consume(100, 0.05) == []  # retrying: nothing yet, no error yet
    # (no retry starts whose backoff would end past the deadline)
    assert time.monotonic() - t0 >= 0.25
    assert h.consumer.commit() == {(TOPIC, 0): 1}  # not past the failing object
    h.storage.fail_times[objs[1].key] = 0  # the store recovers
    h.drain()
    assert [m.value for m in h.delivered] == values(objs)


# --- auto-commit covers what earlier calls handed out ------------------------------------------


def test_auto_commit_never_covers_the_batch_just_handed_out(harnesses: Any) -> None:
    """A crash while the application processes a batch hands that batch out again: the
    auto-commit made inside consume() covers only what earlier calls returned."""
    h = harnesses(
        partitions=1,
        config={"enable.auto.commit": True, "auto.commit.interval.ms": 100, **NO_DEDUP},
    )
    objs = [h.publish(0) for _ in range(3)]
    h.assign(0)
    first = h.consume_until(len(objs[0].values) + 3)  # an object and a bit of the next
    time.sleep(0.15)  # the interval passes while the application works (a clock, not sync)
    batch = h.consume(5, 0.05)  # asking for more says ``first`` was processed...
    assert batch and set(m.value for m in first) <= h.committed_records()
    # ...but nothing says ``batch`` was: a crash now gives it to the next owner.
    assert not set(m.value for m in batch) & h.committed_records()
    h.check_commits()


# --- f: close waits for fetches in flight (bounded) before closing readers ---------------------


def test_f_close_waits_for_fetches_in_flight_before_closing_readers(harnesses: Any) -> None:
    h = harnesses(partitions=1)
    obj = h.publish(0)
    gate = h.storage.gates[obj.key] = threading.Event()
    h.assign(0)
    assert h.consume(10, 0.01) == []
    wait_until(lambda: h.storage.active == 1)  # the GET is running
    threading.Timer(0.1, gate.set).start()
    h.consumer.close()
    assert h.storage.closed
    assert (h.storage.active_at_close, h.storage.reads_after_close) == (0, 0)
    assert h.consumer.stats.fetches_abandoned == 0


def test_f_close_is_bounded_when_a_fetch_hangs(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={"close.timeout.ms": 100})
    obj = h.publish(0)
    h.storage.gates[obj.key] = threading.Event()  # never set (until the fixture ends)
    h.assign(0)
    h.consume(10, 0.01)
    wait_until(lambda: h.storage.active == 1)
    t0 = time.monotonic()
    h.consumer.close()
    assert time.monotonic() - t0 < 2
    assert h.consumer.stats.fetches_abandoned == 1


def test_f_close_stops_fetch_retries_waiting_for_their_backoff(harnesses: Any) -> None:
    h = harnesses(
        partitions=1,
        config={
            "retry.backoff.ms": 60_000,
            "retry.backoff.max.ms": 60_000,
            "fetch.retry.timeout.ms": 600_000,
        },
    )
    obj = h.publish(0)
    h.storage.fail_times[obj.key] = 1 << 30
    h.assign(0)
    h.consume(10, 0.01)
    wait_until(lambda: h.consumer.stats.fetch_retries >= 1)  # sleeping before a retry
    t0 = time.monotonic()
    h.consumer.close()
    assert time.monotonic() - t0 < 2
    assert h.consumer.stats.fetches_abandoned == 0


# --- dedup: copies of blocks already handed out are dropped -------------------------------------


def test_dedup_drops_a_block_stored_twice_and_audits_it_once(harnesses: Any) -> None:
    h = harnesses(partitions=2, audit=True)
    b1, b2, b3 = h.block(records=4), h.block(records=2), h.block(records=3)
    h.publish(0, [b1, b2])
    h.assign(0)
    h.consume_until(6)  # the first copy is handed out first
    second = h.publish(1, [b1, b3])  # b1 again: a retry stored by another writer
    h.drain()
    assert sorted(m.value for m in h.delivered) == sorted(b1.values + b2.values + b3.values)
    stats = h.consumer.stats
    assert (stats.duplicate_blocks_dropped, stats.duplicate_records_dropped) == (1, 4)
    assert h.spy is not None
    audited = sorted((r["kind"], r["sequence"], r["records"]) for r in h.spy.records)
    # The dropped copy is reported as such, never as consumed.
    consumed = [("consumed", 0, 4), ("consumed", 1, 2), ("consumed", 2, 3)]
    assert audited == [*consumed, ("dropped", 0, 4)]
    dropped = next(r for r in h.spy.records if r["kind"] == "dropped")
    assert (dropped["key"], dropped["block_index"]) == (second.key, 0)  # the copy's object


def test_dedup_a_notification_published_twice_is_handed_out_once(harnesses: Any) -> None:
    h = harnesses(partitions=2)
    a = h.publish(0)
    h.republish(1, a)
    h.republish(0, a)
    h.drain()
    assert [m.value for m in h.delivered] == a.values
    assert h.consumer.stats.duplicate_blocks_dropped == 2
    h.consumer.commit()
    assert h.kafka.committed == {tp(0): 2, tp(1): 1}  # the copies are done too


def test_dedup_off_hands_out_every_copy(harnesses: Any) -> None:
    h = harnesses(partitions=1, config=NO_DEDUP)
    a = h.publish(0)
    h.republish(0, a)
    h.drain()
    assert [m.value for m in h.delivered] == a.values * 2


def test_dedup_a_block_older_than_the_window_is_delivered_and_counted(harnesses: Any) -> None:
    h = harnesses(partitions=1, config={"dedup.window.blocks": 2})
    blocks = [h.block() for _ in range(4)]
    for b in blocks:
        h.publish(0, [b])
    h.publish(0, [blocks[0]])  # out of the window (2 newest remembered): delivered
    h.publish(0, [blocks[3]])  # in the window: dropped
    h.drain()
    assert [m.value for m in h.delivered] == values_of(blocks) + blocks[0].values
    s = h.consumer.stats
    assert (s.dedup_out_of_window, s.duplicate_blocks_dropped) == (1, 1)


def test_dedup_a_block_in_a_paused_partitions_object_is_handed_out_once(harnesses: Any) -> None:
    """Two objects in progress with the same block (one parked midway, its partition
    paused): the first to hand the block out wins, the other drops its copy when it
    gets to it (it was kept when its object was fetched)."""
    h = harnesses(partitions=2, config=MANUAL, audit=True)
    b1, b2 = h.block(records=1), h.block(records=1)
    first = h.publish(1, [b1, b2])
    h.assign(0, 1)
    h.consume_until(1)  # b1; b2 waits in partition 1's object
    h.consumer.pause([(TOPIC, 1)])
    h.republish(0, first)  # b1 and b2 again, on a partition not paused
    wait_until(lambda: h.consume(10, 0.01) is not None and h.idle())  # the copy is done
    assert [m.value for m in h.delivered] == b1.values + b2.values
    h.consumer.commit()
    h.check_commits()
    h.consumer.resume([(TOPIC, 1)])
    h.drain()
    assert [m.value for m in h.delivered] == b1.values + b2.values  # nothing more
    assert h.consumer.stats.duplicate_blocks_dropped == 2
    assert h.spy is not None
    audited = sorted((r["kind"], r["key"], r["sequence"]) for r in h.spy.records)
    copy = first.key  # (both notifications point at the same object)
    assert audited == [
        ("consumed", copy, 0),
        ("consumed", copy, 1),
        ("dropped", copy, 0),
        ("dropped", copy, 1),
    ]
    h.consumer.commit()
    h.check_commits()
    assert h.kafka.committed == {tp(0): 1, tp(1): 1}


def values_of(blocks: list[Block]) -> list[bytes]:
    return [v for b in blocks for v in b.values]


def test_dedup_a_lost_partition_read_again_is_handed_out_once(harnesses: Any) -> None:
    h = harnesses(partitions=1, config=MANUAL)
    objs = [h.publish(0, [h.block(records=2), h.block(records=3)]) for _ in range(3)]
    h.assign(0)
    h.consume_until(10)  # objects 0 and 1
    h.member.lose([tp(0)])
    h.drain()  # from the committed offset (none): objects 0 and 1 are read again
    assert [m.value for m in h.delivered] == values(objs)
    assert h.consumer.stats.duplicate_blocks_dropped == 4


def test_seek_reads_again_even_with_dedup(harnesses: Any) -> None:
    h = harnesses(partitions=1, config=MANUAL)
    objs = [h.publish(0) for _ in range(2)]
    h.assign(0)
    h.consume_until(6)
    h.consumer.seek(MessageId(0, 0, 0, 1))
    again = h.consume_until(5)
    assert [m.value for m in again] == values(objs)[1:]


# --- properties: scripts of events -------------------------------------------------------------

PARTS = 3
parts_st = st.lists(st.integers(0, PARTS - 1), min_size=1, max_size=PARTS, unique=True)
part_st = st.integers(0, PARTS - 1)
blocks_st = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=3)
STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "publish": st.tuples(st.just("publish"), part_st, blocks_st, st.booleans()),
    "republish": st.tuples(st.just("republish"), part_st),
    "garbage": st.tuples(st.just("garbage"), part_st),
    "flaky": st.tuples(st.just("flaky"), st.integers(1, 2)),
    "slow": st.tuples(st.just("slow")),
    "stall": st.tuples(st.just("stall")),
    "release": st.tuples(st.just("release")),
    "consume": st.tuples(st.just("consume"), st.integers(1, 12)),
    "commit": st.tuples(st.just("commit")),
    "fail_commit": st.tuples(st.just("fail_commit")),
    "assign": st.tuples(st.just("assign"), parts_st),
    "revoke": st.tuples(st.just("revoke"), parts_st),
    "revoke_failing": st.tuples(st.just("revoke_failing"), parts_st),
    "lose": st.tuples(st.just("lose"), parts_st),
    "other": st.tuples(st.just("other"), part_st, st.integers(1, 3)),
    "missing": st.tuples(st.just("missing")),
    "pause": st.tuples(st.just("pause"), part_st),
    "resume": st.tuples(st.just("resume"), part_st),
}
#: One member's world, weighted towards publishing and consuming.
ONE_MEMBER = [
    *["publish"] * 6,
    *["consume"] * 6,
    *["assign"] * 3,
    *["revoke", "revoke_failing", "lose"] * 2,
    "republish",
    "garbage",
    "flaky",
    "slow",
    "stall",
    "release",
    "commit",
    "fail_commit",
    "pause",
    "resume",
]
#: Plus other members consuming partitions this one lost, and deleted objects.
GROUP = [*ONE_MEMBER, "other", "other", "missing"]


def scripts(kinds: list[str]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    step = st.sampled_from(kinds).flatmap(lambda k: STEPS[k])
    return st.tuples(STEPS["assign"], st.lists(step, min_size=10, max_size=50)).map(
        lambda first_rest: [first_rest[0], *first_rest[1]]
    )


def run_script(h: Harness, steps: list[tuple[Any, ...]], data: st.DataObject) -> None:
    """Apply ``steps``; after each, no commit may pass a record not handed out."""
    pending_fail = 0
    pending_slow = pending_stall = False
    published: list[Stored] = []
    for step in steps:
        kind = step[0]
        if kind == "publish":
            _, part, spec, copy = step
            blocks = [h.block(producer_id=pid, records=n) for pid, n in spec]
            if copy and published:  # a block stored again (writer crash + retry)
                blocks.insert(0, data.draw(st.sampled_from(published)).blocks[0])
            s = h.publish(part, blocks)
            published.append(s)
            if pending_fail:
                h.storage.fail_times[s.key] = pending_fail
                pending_fail = 0
            if pending_slow:
                h.storage.delays[s.key] = 0.002
                pending_slow = False
            if pending_stall:  # its fetch waits until released: the queue fills up
                h.storage.gates[s.key] = threading.Event()
                pending_stall = False
        elif kind == "republish" and published:
            h.republish(step[1], data.draw(st.sampled_from(published)))
        elif kind == "garbage":
            h.publish_garbage(step[1])
        elif kind == "flaky":
            pending_fail = step[1]
        elif kind == "slow":
            pending_slow = True
        elif kind == "stall":
            pending_stall = True
        elif kind == "release":
            for gate in h.storage.gates.values():
                gate.set()
        elif kind == "missing" and published:
            h.storage.objects.pop(data.draw(st.sampled_from(published)).key, None)
        elif kind == "consume":
            h.consume(step[1], 0.02)
        elif kind == "commit":
            with contextlib.suppress(NotificationError):  # an injected failure
                h.consumer.commit()
        elif kind == "fail_commit":
            h.member.fail_commits += 1
        elif kind in ("assign", "revoke", "lose"):
            getattr(h.member, kind)([tp(p) for p in step[1]])
        elif kind == "revoke_failing":
            h.member.fail_commits = 1
            h.member.revoke([tp(p) for p in step[1]])
        elif kind == "other":
            other_member_reads(h, step[1], step[2])
        elif kind == "pause" and tp(step[1]) in h.member.positions:
            h.consumer.pause([(TOPIC, step[1])])
        elif kind == "resume" and (TOPIC, step[1]) in h.consumer.paused():
            h.consumer.resume([(TOPIC, step[1])])
        h.check_commits()
    h.consumer.resume(h.consumer.paused())
    h.member.fail_commits = 0
    for gate in h.storage.gates.values():
        gate.set()
    h.drain()
    h.check_commits()
    h.check_at_least_once()
    assert h.errors == []  # nothing failed that the policies should have handled
    assert h.member.commits_while_lost == 0


def other_member_reads(h: Harness, part: int, n: int) -> None:
    """Another member of the group (owning ``part`` now) hands out ``n`` objects, commits."""
    p = tp(part)
    if p in h.member.positions:
        return
    start = h.kafka.committed.get(p, 0)
    end = min(start + n, len(h.kafka.logs[p]))
    for o in range(start, end):
        s = h.stored.get((p, o))
        if s is None:
            continue
        if s.key in h.storage.objects:
            h.others.update(s.values)
        else:
            h.skipped_keys.append(s.key)  # its skip policy, explicitly
    h.kafka.committed[p] = end
    h.kafka.commit_log.append((p, end, ""))


#: Scripts per property test: 60 in ``make test``; ``make chaos`` runs 2,000 (a rare
#: interleaving found once in CI was not reproduced in 600).
EXAMPLES = int(os.environ.get("MEMQ_STATE_EXAMPLES", "60"))

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    steps=scripts(GROUP),
    dedup=st.booleans(),
    auto=st.booleans(),
    prefetch=st.integers(1, 3),
    data=st.data(),
)
def test_property_at_least_once_and_commits_never_pass_a_record_not_handed_out(
    steps: list[tuple[Any, ...]], dedup: bool, auto: bool, prefetch: int, data: st.DataObject
) -> None:
    h = Harness(
        partitions=PARTS,
        config={
            "dedup.enable": dedup,
            "enable.auto.commit": auto,
            "auto.commit.interval.ms": 100,
            "prefetch.objects": prefetch,
            "corrupt.object.policy": "skip",
        },
    )
    try:
        run_script(h, steps, data)
    finally:
        h.close()


@SETTINGS
@given(
    steps=scripts(ONE_MEMBER),
    auto=st.booleans(),
    prefetch=st.integers(1, 3),
    data=st.data(),
)
def test_property_exactly_once_with_dedup(
    steps: list[tuple[Any, ...]], auto: bool, prefetch: int, data: st.DataObject
) -> None:
    """One member (rebalances revoke, lose and give back its partitions; blocks are
    stored twice, notifications published twice, fetches fail and are slow): every
    record is handed out exactly once."""
    h = Harness(
        partitions=PARTS,
        config={
            "enable.auto.commit": auto,
            "auto.commit.interval.ms": 100,
            "prefetch.objects": prefetch,
            "corrupt.object.policy": "skip",
        },
    )
    try:
        run_script(h, steps, data)
        assert h.duplicates() == {}
    finally:
        h.close()
