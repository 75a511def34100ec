"""Consumer dedup against real servers: a notification published twice (the same object
twice in the notification topic, as a notification retry can do) is handed out once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from memq import Consumer, Producer
from memq.devstack import StackState
from memq.formats.notification import encode_notification
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.helpers import read_notifications

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}


def drain(c: Consumer, n: int, settle: float = 3.0) -> list[Any]:
    """``n`` records, then ``settle`` quiet seconds (so "once" can be asserted)."""
    out: list[Any] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.consume(1000, 1.0))
    out.extend(c.consume(1000, settle))
    return out


def test_a_notification_published_twice_is_handed_out_once(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    from confluent_kafka import Producer as KafkaProducer

    topic = unique_name("dd")
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=64 * 1024, batch_ms=50,
        partitions=1,
    )  # fmt: skip
    notify_topic = cfg.topics[0].notification_topic(cfg.cluster)
    values = [b"dd-%05d-" % i + b"x" * 200 for i in range(3000)]
    with BrokerThread(cfg) as b:
        with Producer({"bootstrap.servers": b.address, "linger.ms": 5}) as p:
            for chunk in range(3):  # an object per chunk at least (flushed in between)
                for v in values[chunk * 1000 : (chunk + 1) * 1000]:
                    p.produce(topic, v)
                assert p.flush(60) == 0
        notes = read_notifications(memq_stack.kafka_bootstrap, notify_topic, expected=3)
        assert len(notes) > 1
        kp = KafkaProducer({"bootstrap.servers": memq_stack.kafka_bootstrap})
        for n in notes:  # every object announced a second time
            kp.produce(notify_topic, encode_notification(n), partition=0)
        assert kp.flush(30) == 0

        with Consumer({"bootstrap.servers": b.address, "group.id": "once", **GROUP}) as c:
            c.subscribe(topic)
            got = drain(c, len(values))
            stats = c.stats
        assert Counter(m.value for m in got) == Counter(values)  # exactly once
        assert stats.objects == 2 * len(notes)  # the copies were read, and done
        assert stats.duplicate_blocks_dropped == sum(n.block_count for n in notes)
        assert stats.duplicate_records_dropped == len(values)

        c = Consumer(
            {"bootstrap.servers": b.address, "group.id": "twice", "dedup.enable": False, **GROUP}
        )
        with c:
            c.subscribe(topic)
            got = drain(c, 2 * len(values))
        assert Counter(m.value for m in got) == Counter({v: 2 for v in values})
