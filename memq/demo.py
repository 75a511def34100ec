"""The end-to-end demo behind ``make demo`` / ``memq demo``.

Foundation stage: proves the real stack and the formats. It packs records into
producer blocks, seals them into one batch object, uploads it to S3, publishes its
notification to Kafka, then reads both back (range-reading the header and each
block) and verifies every byte.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memq.devstack import DevStack, StackState
from memq.errors import MemqError
from memq.formats import (
    BATCH_PREFIX_SIZE,
    BatchBuilder,
    Compression,
    Notification,
    batch_header_length,
    batch_id,
    decode_batch_header,
    decode_notification,
    decode_records,
    encode_block,
    verify_batch_block,
    verify_block,
)

__all__ = ["DemoResult", "run_demo"]

TOPIC = "demo"
CLUSTER = "dev"


@dataclass
class DemoResult:
    records: int = 0
    blocks: int = 0
    object_size: int = 0
    key: str = ""
    notification: str = ""
    checks: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def _records(n: int, seed: int) -> list[tuple[int, bytes | None, bytes, Any]]:
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    return [
        (
            now + i,
            f"user-{rng.randrange(1000)}".encode(),
            rng.randbytes(rng.randrange(50, 400)),
            (("source", b"demo"),) if i % 10 == 0 else None,
        )
        for i in range(n)
    ]


def run_demo(
    state: StackState,
    *,
    records: int = 20_000,
    block_records: int = 1_000,
    say: Callable[[str], None] = print,
) -> DemoResult:
    from confluent_kafka import Consumer, TopicPartition

    from memq.config import NotificationConfig, S3Config
    from storage_handlers.kafka_sink import KafkaNotificationSink
    from storage_handlers.s3 import S3Reader, S3Writer

    os.environ.update({k: v for k, v in state.aws_env().items() if k not in os.environ})
    res = DemoResult()
    clock = time.perf_counter
    recs = _records(records, seed=7)
    t0 = clock()
    blocks = [
        encode_block(
            recs[i : i + block_records],
            producer_id=1,
            epoch=0,
            sequence=i // block_records,
            compression=Compression.ZSTD,
        )
        for i in range(0, len(recs), block_records)
    ]
    builder = BatchBuilder(capacity=sum(len(b) for b in blocks), max_blocks=len(blocks))
    for b in blocks:
        builder.append(b, verify_block(b))
    obj = builder.seal()
    header = decode_batch_header(obj)
    res.timings["encode"] = clock() - t0
    res.records, res.blocks, res.object_size = records, len(blocks), len(obj)
    say(f"packed {records} records into {len(blocks)} zstd blocks, one {len(obj)}-byte object")

    s3cfg = S3Config(bucket=state.bucket, endpoint_url=state.s3_endpoint, region="us-east-1")
    created = int(time.time() * 1000)
    bid = batch_id(created, "demo", 0)
    t0 = clock()
    stored = S3Writer(s3cfg, CLUSTER).store(TOPIC, bid, created, obj)
    res.timings["upload"] = clock() - t0
    res.key = f"s3://{stored.bucket}/{stored.key}"
    say(f"uploaded {res.key}")

    notify_topic = "memq-demo-notifications"
    sink = KafkaNotificationSink(
        NotificationConfig(bootstrap_servers=state.kafka_bootstrap, partitions=1)
    )
    sink.ensure_topic(notify_topic)
    n = Notification(
        topic=TOPIC,
        cluster=CLUSTER,
        broker="demo",
        storage="s3",
        bucket=stored.bucket,
        key=stored.key,
        size=stored.size,
        block_count=header.block_count,
        record_count=header.record_count,
        min_timestamp=header.min_timestamp,
        max_timestamp=header.max_timestamp,
        checksum=header.crc,
        batch_id=bid,
        created_at=created,
    )
    t0 = clock()
    ack = sink.publish(notify_topic, n).result(timeout=30)
    sink.close()
    res.timings["notify"] = clock() - t0
    res.notification = f"{ack.topic}[{ack.partition}]@{ack.offset}"
    say(f"notification acknowledged by Kafka at {res.notification}")

    # Read back: the notification from Kafka, then the object by range reads.
    t0 = clock()
    consumer = Consumer(
        {
            "bootstrap.servers": state.kafka_bootstrap,
            "group.id": "memq-demo",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(ack.topic, ack.partition, ack.offset)])
    deadline = time.monotonic() + 30
    msg = None
    while msg is None and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None and m.value() is not None:
            msg = m.value()
    consumer.close()
    if msg is None:
        raise MemqError(f"notification at {res.notification} could not be read back in 30 s")
    got = decode_notification(msg)
    if got != n:
        raise MemqError(f"notification read back differs: {got} != {n}")
    res.checks.append("notification read back from Kafka equals the one published")

    reader = S3Reader(s3cfg)
    prefix = reader.read(got.bucket, got.key, 0, BATCH_PREFIX_SIZE)
    hlen = batch_header_length(prefix)
    rheader = decode_batch_header(reader.read(got.bucket, got.key, 0, hlen))
    if rheader.crc != got.checksum or rheader.object_size != got.size:
        raise MemqError("object header does not match its notification (checksum/size)")
    res.checks.append("object header range-read, CRC verified, matches the notification checksum")
    decoded = []
    for i, e in enumerate(rheader.entries):
        raw = reader.read(got.bucket, got.key, e.offset, e.offset + e.length)
        if raw != blocks[i]:
            raise MemqError(f"block {i} read back differs from what was sent")
        decoded.extend(decode_records(raw, verify_batch_block(raw, e, index=i)))
    if decoded != recs:
        raise MemqError("records read back differ from those written")
    res.checks.append(f"{len(rheader.entries)} blocks range-read, byte-identical, CRCs verified")
    res.checks.append(f"{len(decoded)} records decoded, equal to the records written")
    res.timings["read_back"] = clock() - t0
    return res


def demo_with_stack(
    stack: DevStack, *, keep: bool, say: Callable[[str], None], **kw: Any
) -> DemoResult:
    """Run the demo on the running stack, or on one started (and stopped) for it."""
    state = stack.load()
    started = state is None
    if state is None:
        say("starting the local stack (moto S3, Tansu Kafka, ZooKeeper)...")
        state = stack.up(progress=say)
    try:
        return run_demo(state, say=say, **kw)
    finally:
        if started and not keep:
            say("stopping the local stack...")
            stack.down(progress=say)
