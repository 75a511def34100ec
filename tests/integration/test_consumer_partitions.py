"""Partition-level reads, pauses, statistics, commits inside an object and expired objects,
with memq.Consumer against real servers (moto S3, the local Kafka, a broker thread)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from memq import Consumer, Producer
from memq.consumer import Message, MessageId, ObjectExpiredError
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.run.broker import BrokerThread
from memq.testing import broker_config

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}


@pytest.fixture
def topic(unique_name: Any) -> str:
    return str(unique_name("p"))


def start(stack: StackState, bucket: str, topic: str, **kw: Any) -> BrokerThread:
    cfg = broker_config(
        stack, bucket=bucket, topics=[topic], batch_bytes=1 << 20, batch_ms=50, **kw
    )
    return BrokerThread(cfg)


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    with start(memq_stack, s3_bucket, topic, partitions=2) as b:
        yield b


def produce_objects(address: str, topic: str, chunks: list[list[bytes]]) -> list[str]:
    """One object per chunk (a flush between them); their keys."""
    with Producer({"bootstrap.servers": address, "linger.ms": 1}) as p:
        return produce_with(p, topic, chunks)


def produce_with(p: Producer, topic: str, chunks: list[list[bytes]]) -> list[str]:
    keys = []
    for chunk in chunks:
        futs = [p.produce(topic, v) for v in chunk]
        assert p.flush(60) == 0
        keys.append(futs[0].result(0).key)
    return keys


def drain(c: Consumer, n: int, timeout: float = 60) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.consume(1000, 0.5))
    return out


def spread(address: str, topic: str, c: Consumer, tag: str) -> dict[int, list[bytes]]:
    """Objects until both partitions hold at least two; the values per partition."""
    chunks: list[list[bytes]] = []
    with Producer({"bootstrap.servers": address, "linger.ms": 1}) as p:
        for i in range(60):
            chunks.append([b"%s-%02d-%03d" % (tag.encode(), i, j) for j in range(150)])
            produce_with(p, topic, chunks[-1:])
            if i >= 3 and all(c.get_watermark_offsets(topic, part)[1] > 1 for part in (0, 1)):
                break
    assert all(c.get_watermark_offsets(topic, part)[1] > 1 for part in (0, 1))
    by_part: dict[int, list[bytes]] = {0: [], 1: []}
    probe = Consumer({"bootstrap.servers": address, "auto.offset.reset": "earliest"})
    probe.assign([(topic, 0), (topic, 1)])
    for m in drain(probe, sum(len(ch) for ch in chunks)):
        by_part[m.partition].append(m.value)
    probe.close()
    assert sum(map(len, by_part.values())) == sum(map(len, chunks))
    return by_part


def test_assign_without_a_group_offsets_for_times_and_watermarks(
    broker: BrokerThread, topic: str
) -> None:
    c = Consumer({"bootstrap.servers": broker.address})  # no group.id
    try:
        by_part = spread(broker.address, topic, c, "a")
        assert c.partitions_for(topic) == [0, 1]
        low, high = c.get_watermark_offsets(topic, 0)
        assert (low, high) == (0, high) and high >= 2
        # Everything, once, without joining anything.
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        t0 = time.monotonic()
        got = drain(c, sum(map(len, by_part.values())))
        assert time.monotonic() - t0 < 20  # no group join to wait for
        assert Counter(m.value for m in got) == Counter(by_part[0] + by_part[1])
        # From the second object of partition 0 only, found by time.
        second = next(m for m in got if m.partition == 0 and m.offset == 1)
        ts = max(m.timestamp for m in got if m.partition == 0 and m.offset == 1)
        assert c.offsets_for_times([(topic, 0, ts)]) == {(topic, 0): 1}
        assert c.offsets_for_times([(topic, 0, 2**62)]) == {(topic, 0): high}
        c.assign([(topic, 0, c.offsets_for_times([(topic, 0, ts)])[(topic, 0)])])
        again = drain(c, len([m for m in got if m.partition == 0 and m.offset >= 1]))
        assert again[0].id == MessageId(0, 1, 0, 0) and {m.partition for m in again} == {0}
        # From a message id: that very record.
        target = MessageId(0, 1, second.block, 7)
        c.assign([(topic, 0, str(target))])
        first = drain(c, 1)[0]
        assert first.id == target
        with pytest.raises(Exception, match=r"group\.id"):
            c.commit()
    finally:
        c.close()


def test_pause_keeps_a_partition_back_while_the_other_goes_on(
    broker: BrokerThread, topic: str
) -> None:
    c = Consumer({"bootstrap.servers": broker.address, "prefetch.objects": 4})
    try:
        by_part = spread(broker.address, topic, c, "b")
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        got = drain(c, 10)
        c.pause([(topic, 0)])
        assert c.paused() == [(topic, 0)]
        before = len(got)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got += c.consume(1000, 0.5)
            if Counter(m.value for m in got if m.partition == 1) == Counter(by_part[1]):
                break
        assert Counter(m.value for m in got if m.partition == 1) == Counter(by_part[1])
        assert c.consume(100, 2.0) == []
        assert all(m.partition == 1 for m in got[before:])  # nothing new of partition 0
        c.resume([(topic, 0)])
        got += drain(c, len(by_part[0]) + len(by_part[1]) - len(got))
        assert Counter(m.value for m in got) == Counter(by_part[0] + by_part[1])
        zero = [(m.offset, m.block, m.record) for m in got if m.partition == 0]
        assert zero == sorted(zero)  # in order, across the pause
    finally:
        c.close()


def test_stats_dict_stats_cb_and_collector_on_a_real_consumer(
    broker: BrokerThread, topic: str
) -> None:
    ticks: list[dict[str, Any]] = []
    values = [b"s-%05d" % i for i in range(3000)]
    produce_objects(broker.address, topic, [values[:1500], values[1500:]])
    c = Consumer(
        {"bootstrap.servers": broker.address, "group.id": "stats", **GROUP,
         "statistics.interval.ms": 100},
        stats_cb=ticks.append,
    )  # fmt: skip
    try:
        c.subscribe(topic)
        got = drain(c, len(values))
        assert len(got) == len(values)
        wait_for(
            lambda: True if ticks and ticks[-1]["records"] == len(values) else None,
            timeout=10,
            what="a stats_cb tick with every record",
        )
        s = c.stats_dict()
        assert s["records"] == len(values) and s["objects"] >= 2
        assert s["bytes_fetched"] > 0 and s["assigned_partitions"] == 2
        assert s["skipped"] == {"missing": 0, "corrupt": 0, "expired": 0}
        wait_for(
            lambda: True if c.stats_dict()["lag_objects"] == 0 else c.consume(10, 0.2) and None,
            timeout=20,
            what="lag 0 from the Kafka client's watermarks",
        )
        registry = CollectorRegistry()
        registry.register(c.prometheus_collector())
        text = generate_latest(registry).decode()
        assert f'memq_consumer_records{{client_id="memq-consumer"}} {float(len(values))}' in text
    finally:
        c.close()


def test_stopping_inside_an_object_commits_it_honestly(broker: BrokerThread, topic: str) -> None:
    """A commit inside an object carries the next record's position in its metadata, which
    Kafka keeps: a restart of the group goes on at the very next record (precise_commits).
    A Kafka that drops commit metadata reads that object again, whole (the unit harness)."""
    values = [b"m-%05d" % i for i in range(2000)]
    produce_objects(broker.address, topic, [values])
    conf = {"bootstrap.servers": broker.address, "group.id": "inside", **GROUP,
            "enable.auto.commit": False}  # fmt: skip
    c = Consumer(conf)
    c.subscribe(topic)
    first: list[Message] = []
    deadline = time.monotonic() + 60
    while len(first) < 10 and time.monotonic() < deadline:
        first += c.consume(10 - len(first), 1.0)  # exactly 10 handed out
    assert len(first) == 10
    committed = c.commit()
    assert committed == {(topic, first[0].partition): first[0].offset}  # that object
    assert c.precise_commits is True  # Kafka kept the commit metadata
    c.close()
    c2 = Consumer(conf)
    c2.subscribe(topic)
    rest = drain(c2, len(values) - 10)
    rest += c2.consume(100, 1.0)  # and nothing more
    c2.close()
    assert Counter(m.value for m in rest) == Counter(values) - Counter(m.value for m in first)
    assert len(rest) == len(values) - 10


def test_expired_objects_are_skipped_and_seek_to_beginning_steps_over_them(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    retention = 2000
    with start(
        memq_stack, s3_bucket, topic, partitions=1, topic_overrides={"retention": {"ms": retention}}
    ) as b:
        chunks = [[b"e%d-%03d" % (i, j) for j in range(100)] for i in range(3)]
        keys = produce_objects(b.address, topic, chunks[:2])
        s3 = memq_stack.s3_client()
        for k in keys:  # what retention does to objects past retention.ms
            s3.delete_object(Bucket=s3_bucket, Key=k)
        time.sleep(retention / 1000 + 0.5)  # their notifications are now past retention
        produce_objects(b.address, topic, chunks[2:])  # a fresh one
        skipped: list[tuple[str, type]] = []
        c = Consumer(
            {"bootstrap.servers": b.address, "group.id": "expiry", **GROUP},
            on_skip=lambda n, e: skipped.append((n.key, type(e))),
        )
        c.subscribe(topic)
        got = drain(c, 100)
        assert c.consume(100, 2.0) == []
        c.close()
        assert [m.value for m in got] == chunks[2]
        assert sorted(skipped) == sorted((k, ObjectExpiredError) for k in keys)
        assert c.stats.skipped_expired == 2 and c.stats.skipped_missing == 0

        # seek_to_beginning lands on the oldest object still there: nothing to skip.
        c = Consumer({"bootstrap.servers": b.address})
        c.assign([(topic, 0, 2)])
        c.seek_to_beginning()
        got = drain(c, 100)
        c.close()
        assert [m.value for m in got] == chunks[2] and got[0].offset == 2
        assert c.stats.skipped_expired == 0

        # missing.object.policy=fail raises them.
        c = Consumer({"bootstrap.servers": b.address, "missing.object.policy": "fail"})
        c.assign([(topic, 0, 0)])
        with pytest.raises(ObjectExpiredError, match=r"past the topic's retention\.ms"):
            drain(c, 1, timeout=30)
        c.close()
