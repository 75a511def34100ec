"""The consumer's group-less notification reader (NotificationProbe) on the real Kafka:
notifications written straight to a Kafka topic with chosen produce times and record
timestamps, so what Kafka answers (watermarks, offsets for times) and what a seek by
time finds can be checked exactly."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memq.consumer.notifications import NotificationProbe
from memq.devstack import StackState
from memq.formats.notification import Notification, encode_notification


@pytest.fixture
def note_topic(memq_stack: StackState, unique_name: Any) -> Iterator[str]:
    """A one-partition Kafka topic of this test, deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique_name("probe")
    admin = AdminClient({"bootstrap.servers": memq_stack.kafka_bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


def notification(i: int, max_ts: int) -> Notification:
    return Notification(
        topic="t", cluster="c", broker="b", storage="s3", bucket="b", key=f"k/{i}", size=1,
        block_count=1, record_count=1, min_timestamp=max_ts - 50, max_timestamp=max_ts,
        checksum=0, batch_id=f"batch-{i}", created_at=max_ts,
    )  # fmt: skip


def publish(bootstrap: str, topic: str, stamps: list[tuple[int, int]]) -> None:
    """One notification per ``(produce time, max record timestamp)``, in order; the
    produce time is the Kafka timestamp, as the brokers' notification producer sets it."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i, (kafka_ts, max_ts) in enumerate(stamps):
        p.produce(topic, encode_notification(notification(i, max_ts)), timestamp=kafka_ts)
        p.poll(0)
    assert p.flush(60) == 0


def test_probe_requests_are_not_held_behind_a_waiting_fetch(
    memq_stack: StackState, note_topic: str
) -> None:
    """A fetch parked at the end of the partition (fetch.wait.max.ms) held up every later
    request of the probe on that connection, reads and watermarks alike: 2 s each with
    this user setting. The probe waits 10 ms at most and stops fetching after a read."""
    now = int(time.time() * 1000)
    publish(memq_stack.kafka_bootstrap, note_topic, [(now + i, now + i) for i in range(50)])
    probe = NotificationProbe(
        {"bootstrap.servers": memq_stack.kafka_bootstrap, "fetch.wait.max.ms": 2000}
    )
    try:
        took = []
        for off in (10, 49, 50, 20):  # 50: the end (the read that parks a fetch)
            t = time.monotonic()
            got = probe.read(note_topic, 0, off)
            probe.watermarks(note_topic, 0)
            took.append(time.monotonic() - t)
            assert (got.key if got else None) == (f"k/{off}" if off < 50 else None)
        assert [off for off, _ in probe.scan(note_topic, 0, 45, 60)] == list(range(45, 50))
        t = time.monotonic()
        probe.watermarks(note_topic, 0)
        took.append(time.monotonic() - t)
    finally:
        probe.close()
    assert statistics.median(took) < 1.0, took


def test_seek_by_time_from_kafkas_answer_is_exact_on_real_kafka(
    memq_stack: StackState, note_topic: str
) -> None:
    """Kafka's offsets_for_times over notifications published every 100 ms by two
    brokers whose clocks are 150 ms apart (Kafka timestamps out of order), uploads
    taking 350 ms (objects in flight at any time), one producer clock 20 s ahead: for
    times all over the partition the first object reaching each is found exactly, and
    without a single read of one notification (no bisection)."""
    from memq.consumer.seeking import first_offset_at

    base = int(time.time() * 1000) - 600_000
    stamps = []
    for i in range(1500):
        published = base + i * 100 + (150 if i % 2 else 0)
        stamps.append((published, published - 350))
    stamps[900] = (stamps[900][0], stamps[900][0] + 20_000)  # a producer clock ahead
    publish(memq_stack.kafka_bootstrap, note_topic, stamps)
    probe = NotificationProbe({"bootstrap.servers": memq_stack.kafka_bootstrap})
    reads: list[int] = []
    single = probe.read
    probe.read = lambda *a: reads.append(a[2]) or single(*a)  # type: ignore[method-assign]
    try:
        times = [base - 1, *(m + d for _, m in stamps[::97] for d in (-1, 0, 1))]
        times += [stamps[900][1], stamps[900][1] - 15_000, stamps[-1][0] + 1]
        for ts in times:
            want = next((i for i, (_, m) in enumerate(stamps) if m >= ts), len(stamps))
            assert first_offset_at(probe, note_topic, 0, ts) == want, ts
    finally:
        probe.close()
    assert reads == []
