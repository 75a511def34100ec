"""Keyed ordering end to end: one producer, ~50 keys, a real broker (moto S3, the local
Kafka with a 2-partition notification topic); every record read once, per key in order."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.devstack import StackState
from memq.run.broker import BrokerThread
from memq.testing import broker_config


@pytest.mark.parametrize("acks", ["all", "1"])
def test_one_producer_keeps_per_key_order(
    memq_stack: StackState, s3_bucket: str, unique_name: Any, acks: str
) -> None:
    topic = str(unique_name("keyed"))
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=64 << 10, batch_ms=20,
        partitions=2,
    )  # fmt: skip
    n, keys = 20_000, 50
    with BrokerThread(cfg) as b:
        sent = [(b"key-%02d" % (i % keys), b"%05d" % i) for i in range(n)]
        with Producer({"bootstrap.servers": b.address, "linger.ms": 2, "acks": acks}) as p:
            for i, (k, v) in enumerate(sent):
                p.produce(topic, v, key=k)
                if i % 1000 == 999:
                    p.flush(60)  # many blocks and batches, not one
            assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": b.address, "auto.offset.reset": "earliest"})
        c.assign([(topic, 0), (topic, 1)])
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got.extend((m.key or b"", m.value) for m in c.consume(1000, 0.5))
        c.close()
    assert Counter(got) == Counter(sent)
    per_key: dict[bytes, list[bytes]] = defaultdict(list)
    for k, v in got:
        per_key[k].append(v)
    for k, vs in per_key.items():
        assert vs == sorted(vs), f"key {k!r} out of order"
