"""memq.Consumer against real servers: groups, commits, seeks, bad objects (issue 4)."""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.errors import CorruptObjectError, ObjectNotFoundError
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.group_members import account, spawn, stop_all

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}


@pytest.fixture
def topic(unique_name: Any) -> str:
    """A topic (hence a notification topic) of this test only: Kafka is shared."""
    return str(unique_name("c"))


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack,
        bucket=s3_bucket,
        topics=[topic],
        batch_bytes=256 * 1024,
        batch_ms=100,
        partitions=4,
    )
    with BrokerThread(cfg) as b:
        yield b


def produce(
    address: str, topic: str, values: list[bytes], timestamps: list[int] | None = None
) -> None:
    with Producer({"bootstrap.servers": address, "linger.ms": 5, "batch.size": 32 * 1024}) as p:
        for i, v in enumerate(values):
            p.produce(topic, v, timestamp=None if timestamps is None else timestamps[i])
        assert p.flush(60) == 0


def consumer(address: str, topic: str, group: str, **extra: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": address, "group.id": group, **GROUP, **extra})
    c.subscribe(topic)
    return c


def drain(c: Consumer, n: int, timeout: float = 60) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.consume(1000, 1.0))
    return out


def test_100k_records_exactly_once_in_object_order_and_fan_out(
    broker: BrokerThread, topic: str
) -> None:
    values = [b"rec-%06d-" % i + bytes(i % 50) for i in range(100_000)]
    produce(broker.address, topic, values)
    for group in ("a", "b"):  # two groups each get every record
        with consumer(broker.address, topic, group) as c:
            got = drain(c, len(values))
            assert Counter(m.value for m in got) == Counter(values)  # exactly once, byte-exact
            extra = c.consume(100, 2.0)
            assert extra == []
            by_object: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for m in got:
                by_object[m.object_key].append((m.block, m.record))
            for positions in by_object.values():
                assert positions == sorted(positions)  # records in object order
            c.commit()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_members_split_partitions_and_the_survivor_takes_over(
    broker: BrokerThread, topic: str, tmp_path: Path, unique_name: Any, protocol: str
) -> None:
    # ~30 objects of 256 KiB: notifications spread over all 4 partitions.
    values = [b"fo-%06d-" % i + os.urandom(1000) for i in range(8000)]
    produce(broker.address, topic, values)
    group = unique_name("fo")
    # group.protocol=consumer: the broker's session (10 s on the local stack) says when
    # the killed member's partitions move.
    session = 6000 if protocol == "classic" else None
    members = [
        spawn(broker.address, topic, group, tmp_path / f"m{i}.jsonl", protocol=protocol,
              session_ms=session, delay=0.002)
        for i in (1, 2)
    ]  # fmt: skip
    first, survivor = members
    try:
        # Both members joined and split the 4 partitions between them.
        wait_for(
            lambda: (
                True
                if first.assignment()
                and survivor.assignment()
                and first.assignment() | survivor.assignment() == {0, 1, 2, 3}
                else None
            ),
            timeout=60,
            what="both members assigned",
        )
        assert not first.assignment() & survivor.assignment()
        wait_for(
            lambda: True if len(first.records()) > 100 else None,
            timeout=60,
            what="member 1 consuming",
        )
        first.kill()  # dies mid-stream, without a goodbye
        wait_for(
            lambda: True if set(account(members, set(values)).delivered) >= set(values) else None,
            timeout=120,
            what="every record delivered by the survivor",
        )
        assert survivor.assignment() == {0, 1, 2, 3}  # the survivor took every partition
        got = account(members, set(values))
        assert not got.missing and set(got.delivered) == set(values)
        # Read twice: only what the killed member handed out after its last commit.
        assert not got.unexplained, sorted(got.unexplained.items())[:5]
    finally:
        stop_all(members)


def test_commit_then_restart_resumes_after_the_last_committed_object(
    broker: BrokerThread, topic: str
) -> None:
    values = [b"cr-%05d" % i for i in range(20_000)]
    produce(broker.address, topic, values)
    c = consumer(
        broker.address, topic, "cr", **{"enable.auto.commit": False, "prefetch.objects": 1}
    )
    first = drain(c, 3000)
    # Finish the object in progress so commits cover whole objects only.
    last = first[-1]
    while True:
        nxt = c.consume(1, 2.0)
        if not nxt or (nxt[0].partition, nxt[0].offset) != (last.partition, last.offset):
            break  # a record of the next object: handed out, but its object is not done
        first.extend(nxt)
    committed = c.commit()
    c.close()
    done_objects = {(m.partition, m.offset) for m in first}
    assert committed and all(
        off > max(o for p, o in done_objects if p == part)
        for (_, part), off in committed.items()
        if any(p == part for p, _ in done_objects)
    )
    c2 = consumer(broker.address, topic, "cr")
    rest = drain(c2, len(values) - len(first))
    c2.close()
    # Nothing of a committed object comes back; everything else does.
    assert not {m.value for m in rest} & {m.value for m in first}
    assert {m.value for m in rest} | {m.value for m in first} == set(values)
    assert all((m.partition, m.offset) not in done_objects for m in rest)


def test_seek_to_time_lands_on_the_first_record_at_or_after_ts(
    broker: BrokerThread, topic: str
) -> None:
    base = 1_790_000_000_000
    values = [b"t-%05d" % i for i in range(12_000)]
    stamps = [base + i * 10 for i in range(len(values))]
    for chunk in range(4):  # separate objects per chunk: flushes between them
        lo, hi = chunk * 3000, (chunk + 1) * 3000
        produce(broker.address, topic, values[lo:hi], stamps[lo:hi])
    cut = base + 7_777 * 10 + 5  # inside an object, between two records
    c = consumer(broker.address, topic, "time", **{"enable.auto.commit": False})
    c.seek_to_time(cut)
    got = drain(c, len([s for s in stamps if s >= cut]))
    assert c.consume(10, 2.0) == []
    c.close()
    assert {m.value for m in got} == {v for v, s in zip(values, stamps, strict=True) if s >= cut}
    assert min(m.timestamp for m in got) == base + 7_778 * 10


def test_seek_to_time_from_kafkas_answer_hands_out_exactly_the_records_from_then(
    broker: BrokerThread, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records stamped as they are produced, in rounds published at different times:
    seeks to several times (before everything, between rounds, between two records of
    one object, after everything) each hand out exactly the records stamped at or after
    it, found from Kafka's offsets_for_times (no notification read one by one)."""
    from memq.consumer.groups import GroupAdmin

    rounds: list[list[tuple[bytes, int]]] = []
    for r in range(5):
        start = int(time.time() * 1000)
        values = [b"r%d-%04d" % (r, i) for i in range(400)]
        stamps = [start + i // 100 for i in range(400)]  # 4 records per ms: ties too
        produce(broker.address, topic, values, stamps)
        rounds.append(list(zip(values, stamps, strict=True)))  # acks=all: published now
    every = [rec for rnd in rounds for rec in rnd]
    nt = broker.config.topics[0].notification_topic(broker.config.cluster)
    c = consumer(broker.address, topic, "time-kafka", **{"enable.auto.commit": False})
    assert Counter(m.value for m in drain(c, len(every))) == Counter(v for v, _ in every)
    reads: list[int] = []
    probe = c._probe
    assert probe is not None
    single = probe.read
    monkeypatch.setattr(probe, "read", lambda *a: reads.append(a[2]) or single(*a))
    inside = rounds[2][250][1]  # between records of one object (ties at that ms: all of them)
    cuts = [every[0][1] - 60_000, rounds[3][0][1], inside, every[-1][1] + 1]
    for cut in cuts:
        c.seek_to_time(cut)
        want = Counter(v for v, ts in every if ts >= cut)
        got = drain(c, sum(want.values())) if want else []
        got += c.consume(1000, 2.0)  # nothing more may come
        assert Counter(m.value for m in got) == want, cut
        assert min((m.timestamp for m in got), default=None) == min(
            (ts for _, ts in every if ts >= cut), default=None
        )
    assert reads == []
    # offsets_for_times and `memq group reset-offsets --to-datetime` give the same
    # offsets: per partition, the first notification whose object reaches the time.
    notes = {p: list(probe.scan(nt, p, *probe.watermarks(nt, p))) for p in range(4)}
    for cut in cuts:
        first = {p: next((o for o, n in ns if n.max_timestamp >= cut), probe.watermarks(nt, p)[1])
                 for p, ns in notes.items()}  # fmt: skip
        asked = c.offsets_for_times([(topic, p, cut) for p in range(4)])
        assert asked == {(topic, p): o for p, o in first.items()}, cut
        plan = GroupAdmin(broker.address).reset_offsets("time-kafka", topic, to="datetime",
                                                        value=cut)  # fmt: skip
        assert {p: new for p, (_, new) in plan.moves.items()} == first, cut
    assert reads == []
    c.close()


def test_seek_to_time_finds_an_object_whose_timestamps_run_back(
    broker: BrokerThread, memq_stack: StackState, topic: str
) -> None:
    """Client timestamps need not grow with offsets: objects stamped 2000-01-01 around one
    stamped now. Bisection alone could land past the recent one; the notifications
    before its answer are read back in bulk (NotificationProbe.scan, on the real Kafka)."""
    from memq.consumer.notifications import NotificationProbe

    old, now = 946_684_800_000, int(time.time() * 1000)
    chunks = [(old + i, [b"old-%d-%d" % (i, j) for j in range(50)]) for i in range(7)]
    chunks.insert(2, (now, [b"new-%d" % j for j in range(50)]))
    for ts, values in chunks:  # an object each
        produce(broker.address, topic, values, [ts] * len(values))
    c = consumer(broker.address, topic, "time-back", **{"enable.auto.commit": False})
    c.seek_to_time(now - 3_600_000)
    got = drain(c, 50)
    got += c.consume(1000, 2.0)
    c.close()
    new = [m for m in got if m.value.startswith(b"new-")]
    assert sorted(m.value for m in new) == sorted(b"new-%d" % j for j in range(50))
    # As in Kafka, the partition goes on from there: only objects after the recent one,
    # in its partition, come along (the other partitions reach the time nowhere).
    at = (new[0].partition, new[0].offset)
    assert all((m.partition, m.offset) > at and m.partition == at[0] for m in got if m not in new)
    # The bulk read is the single reads, in order.
    ntopic = broker.config.topics[0].notification_topic(broker.config.cluster)
    probe = NotificationProbe({"bootstrap.servers": memq_stack.kafka_bootstrap})
    try:
        for p in range(4):
            low, high = probe.watermarks(ntopic, p)
            scanned = list(probe.scan(ntopic, p, low, high + 5))
            assert [off for off, _ in scanned] == list(range(low, high))
            assert [n for _, n in scanned] == [probe.read(ntopic, p, o) for o in range(low, high)]
    finally:
        probe.close()


def test_ends_lag_and_seek_to_end_are_kafkas_high_watermarks(
    broker: BrokerThread, memq_stack: StackState, topic: str
) -> None:
    """get_watermark_offsets, lag(), seek_to_end() and `memq group` take the end of a
    partition from Kafka's high watermark (asked each time, nothing read past it)."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    from memq.consumer.groups import GroupAdmin

    nt = broker.config.topics[0].notification_topic(broker.config.cluster)
    kafka = KafkaConsumer({"bootstrap.servers": memq_stack.kafka_bootstrap, "group.id": "wm"})

    def kafka_ends() -> dict[int, tuple[int, int]]:
        return {p: kafka.get_watermark_offsets(TopicPartition(nt, p), timeout=10, cached=False)
                for p in range(4)}  # fmt: skip

    first, second, third = ([b"%s-%05d" % (n, i) for i in range(3000)]
                            for n in (b"first", b"second", b"third"))  # fmt: skip
    produce(broker.address, topic, first)
    c = consumer(broker.address, topic, "ends", **{"enable.auto.commit": False})
    assert {p: c.get_watermark_offsets(topic, p) for p in range(4)} == kafka_ends()
    assert Counter(m.value for m in drain(c, len(first))) == Counter(first)
    assert c.lag().partitions == {(topic, p): 0 for p in range(4)}
    before = kafka_ends()
    produce(broker.address, topic, second)  # not read: behind by its notifications
    after = kafka_ends()
    assert sum(after[p][1] - before[p][1] for p in range(4)) > 0
    assert c.lag().partitions == {(topic, p): after[p][1] - before[p][1] for p in range(4)}
    c.seek_to_end()
    assert c.lag().notifications == 0
    produce(broker.address, topic, third)
    assert Counter(m.value for m in drain(c, len(third))) == Counter(third)
    assert c.consume(100, 2.0) == []  # the second lot was skipped
    c.commit()
    c.close()
    final = kafka_ends()
    kafka.close()
    admin = GroupAdmin(broker.address)
    d = admin.describe("ends", topic)
    assert [(p["partition"], p["committed"], p["end"], p["lag_objects"])
            for p in d["topics"][topic]] == [
        (p, final[p][1], final[p][1], 0) for p in range(4)]  # fmt: skip
    plan = admin.reset_offsets("ends", topic, to="earliest")
    assert plan.moves == {p: (final[p][1], final[p][0]) for p in range(4)}
    plan = admin.reset_offsets("ends", topic, to="latest")
    assert plan.moves == {p: (final[p][1], final[p][1]) for p in range(4)}


def test_seek_to_message_id_rereads_from_that_record(broker: BrokerThread, topic: str) -> None:
    values = [b"id-%05d" % i for i in range(8000)]
    produce(broker.address, topic, values)
    c = consumer(broker.address, topic, "seek", **{"enable.auto.commit": False})
    got = drain(c, len(values))
    target = next(m for m in got if m.block > 0 and m.record > 3)
    same_object = [m for m in got if (m.partition, m.offset) == (target.partition, target.offset)]
    expected = [
        m.value for m in same_object if (m.block, m.record) >= (target.block, target.record)
    ]
    c.seek(str(target.id))
    again = drain(c, len(expected))
    c.close()
    assert [m.value for m in again[: len(expected)]] == expected
    assert again[0].id == target.id


def test_deleted_and_corrupted_objects(
    broker: BrokerThread, topic: str, memq_stack: StackState, s3_bucket: str
) -> None:
    batches = [
        [b"ok-%d" % i for i in range(200)],
        [b"gone-%d" % i for i in range(200)],
        [b"bad-%d" % i for i in range(200)],
    ]
    keys = []
    with Producer({"bootstrap.servers": broker.address, "linger.ms": 1}) as p:
        for vals in batches:
            futs = [p.produce(topic, v, key=b"same-partition") for v in vals]
            assert p.flush(30) == 0
            keys.append(futs[0].result().key)
    s3 = memq_stack.s3_client()
    s3.delete_object(Bucket=s3_bucket, Key=keys[1])
    obj = bytearray(s3.get_object(Bucket=s3_bucket, Key=keys[2])["Body"].read())
    obj[-5] ^= 0xFF
    s3.put_object(Bucket=s3_bucket, Key=keys[2], Body=bytes(obj))

    c = consumer(broker.address, topic, "strict", **{"enable.auto.commit": False})
    seen: list[bytes] = []
    errors: list[type] = []
    deadline = time.monotonic() + 60
    while len(errors) < 1 and time.monotonic() < deadline:
        try:
            seen.extend(m.value for m in c.consume(100, 1.0))
        except (ObjectNotFoundError, CorruptObjectError) as e:
            errors.append(type(e))
            assert keys[1] in str(e) or keys[2] in str(e)
    c.close()
    assert errors, "a missing object must raise, never pass silently"

    skipped: list[tuple[str, str]] = []
    c = Consumer(
        {
            "bootstrap.servers": broker.address,
            "group.id": "lenient",
            **GROUP,
            "corrupt.object.policy": "skip",
        },
        on_skip=lambda n, e: skipped.append((n.key, type(e).__name__)),
    )
    c.subscribe(topic)
    got = drain(c, 200, timeout=30)
    assert c.consume(100, 3.0) == []
    c.close()
    assert sorted(m.value for m in got) == sorted(batches[0])
    assert sorted(skipped) == sorted(
        [(keys[1], "ObjectNotFoundError"), (keys[2], "CorruptObjectError")]
    )
    assert (c.stats.skipped_missing, c.stats.skipped_corrupt) == (1, 1)


def test_a_failed_fetch_never_swallows_records_already_taken(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """Regression (found by benchmarks/chaos.py): consume(n) took the records of one
    object, then met the next object's failed fetch and raised, losing the records it
    had taken although their object counted as handed out (and could be committed)."""
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=4 << 20, batch_ms=100,
        partitions=1,
    )  # fmt: skip
    first = [b"a%05d-" % i + b"v" * 1000 for i in range(2000)]  # one ~2 MB object
    with BrokerThread(cfg) as b:
        with Producer({"bootstrap.servers": b.address, "linger.ms": 5}) as p:
            fa = [p.produce(topic, v) for v in first]
            assert p.flush(60) == 0
            fb = [p.produce(topic, b"b%d" % i) for i in range(10)]
            assert p.flush(60) == 0
        ka, kb = {f.result(0).key for f in fa}, {f.result(0).key for f in fb}
        assert len(ka) == 1 and len(kb) == 1 and ka != kb
        memq_stack.s3_client().delete_object(Bucket=s3_bucket, Key=kb.pop())
        c = consumer(b.address, topic, "swallow")  # corrupt.object.policy=fail
        got: list[bytes] = []
        err: Exception | None = None
        try:
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                got += [m.value for m in c.consume(1, 1.0)]  # the first object is current
            # The deleted object's fetch has failed (its future is done) before the rest
            # of the first object is taken: the order that lost records.
            wait_for(
                lambda: True if c._prefetch.head_ready() else None,
                timeout=30,
                what="the second object's fetch to fail",
            )
            while err is None and time.monotonic() < deadline:
                try:
                    got += [m.value for m in c.consume(100_000, 1.0)]
                except ObjectNotFoundError as e:
                    err = e
        finally:
            c.close()
    assert err is not None  # the deleted object is reported...
    assert Counter(got) == Counter(first)  # ...after every record before it was handed out


def test_a_lone_notification_is_polled_without_waiting_out_the_timeout(
    broker: BrokerThread, memq_stack: StackState, topic: str
) -> None:
    """librdkafka's consume(n, timeout) waits for n messages or the whole timeout; the
    notification poll must return as soon as one notification is there (it added up to
    the poll timeout to every record's end-to-end latency). One record, so one
    notification, against a poll for 8 with a 30 s timeout."""
    from memq.consumer.notifications import NotificationSource

    produce(broker.address, topic, [b"alone"])
    ntopic = broker.config.topics[0].notification_topic(broker.config.cluster)
    src = NotificationSource({"bootstrap.servers": memq_stack.kafka_bootstrap, "group.id": topic})
    try:
        src.assign_partitions({(ntopic, p): 0 for p in range(4)})
        got: list[Any] = []
        start = time.monotonic()
        while not got and time.monotonic() - start < 60:  # the first fetch may come empty
            got = src.poll(8, 30.0)
        waited = time.monotonic() - start
    finally:
        src.kafka.close()
    assert [p.topic for p in got] == [ntopic] and got[0].notification is not None
    assert waited < 15, f"the poll waited {waited:.1f} s for more notifications"
