"""Reading back what brokers wrote: objects from S3 and notifications from Kafka."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from memq.formats import BatchHeader, BlockHeader, Notification, decode_batch, decode_notification
from memq.formats.block import Record


@dataclass
class StoredBatch:
    key: str
    size: int
    header: BatchHeader
    blocks: list[tuple[BlockHeader, list[Record]]]

    @property
    def records(self) -> list[Record]:
        return [r for _, recs in self.blocks for r in recs]


def read_objects(
    s3: Any, bucket: str, prefix: str = "", topic: str | None = None
) -> list[StoredBatch]:
    """Every object (of ``topic``, chosen by key before reading) decoded and verified."""
    from memq.formats import parse_object_key

    out = []
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            if topic is not None and parse_object_key(obj["Key"]).topic != topic:
                continue
            data = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            header, blocks = decode_batch(data)
            out.append(StoredBatch(obj["Key"], len(data), header, blocks))
    return out


def wait_for_objects(
    s3: Any, bucket: str, records: int, timeout: float = 60.0, topic: str | None = None
) -> list[StoredBatch]:
    """Poll S3 until the objects (of ``topic``, if given) hold ``records`` records
    (with acks 0/1 the upload happens after the ack)."""
    deadline = time.monotonic() + timeout
    while True:
        objs = read_objects(s3, bucket, topic=topic)
        n = sum(o.header.record_count for o in objs)
        if n >= records or time.monotonic() > deadline:
            return objs
        time.sleep(0.2)


def read_notifications(
    bootstrap: str, topic: str, expected: int, timeout: float = 30.0, settle: float = 2.0
) -> list[Notification]:
    """Read ``topic`` from the beginning until ``expected`` notifications arrived, then keep
    polling for ``settle`` idle seconds to catch any extra one (so "exactly" can be asserted).
    """
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = c.list_topics(topic, timeout=10)
        parts = list(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Notification] = []
        deadline = time.monotonic() + timeout
        idle_since: float | None = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                if len(out) >= expected:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= settle:
                        break
                continue
            idle_since = None
            out.append(decode_notification(m.value()))
        return out
    finally:
        c.close()


def multiset(records: list[Record]) -> Counter[Record]:
    return Counter(records)


def external_stack_env(stack: Any, **extra: str) -> dict[str, str]:
    """Environment for a subprocess that reuses the session's servers (as external ones)
    instead of starting its own: S3 (with its credentials), Kafka, ZooKeeper; ``extra``
    adds or overrides variables (e.g. ``MEMQ_S3_BUCKET``, ``MEMQ_STATE_DIR``)."""
    import os

    return {
        **os.environ,
        **stack.aws_env(),
        "MEMQ_S3_ENDPOINT": stack.s3_endpoint,
        "MEMQ_S3_BUCKET": stack.bucket,
        "MEMQ_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "MEMQ_ZK_CONNECT": stack.zk_connect,
        **extra,
    }
