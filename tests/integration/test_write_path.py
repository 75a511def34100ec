"""Producers -> broker -> S3 objects + Kafka notifications, with each ack mode (real servers)."""

from __future__ import annotations

from collections import Counter

import pytest

from memq import Producer
from memq.devstack import StackState
from memq.formats import parse_object_key
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.helpers import read_notifications, read_objects, wait_for_objects


def _records(
    n: int, tag: str
) -> list[tuple[bytes, bytes | None, tuple[tuple[str, bytes], ...] | None]]:
    return [
        (
            f"{tag}-{i:07d}-".encode() + bytes([i % 251]) * (i % 97),
            None if i % 3 == 0 else f"k{i % 100}".encode(),
            (("i", str(i).encode()),) if i % 5 == 0 else None,
        )
        for i in range(n)
    ]


def test_ack_all_100k_records_each_in_exactly_one_object(
    memq_stack: StackState, s3_bucket: str
) -> None:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["events"], batch_bytes=2 << 20, batch_ms=300
    )
    sent = _records(100_000, "all")
    with BrokerThread(cfg) as broker:
        p = Producer(
            {
                "bootstrap.servers": broker.address,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 256 * 1024,
                "compression.type": "zstd",
            }
        )
        futs = [
            p.produce("events", v, key=k, headers=h, timestamp=1_700_000_000_000 + i)
            for i, (v, k, h) in enumerate(sent)
        ]
        assert p.flush(120) == 0
        results = [f.result(0) for f in futs]
        p.close()
        notify_topic = cfg.topics[0].notification_topic(cfg.cluster)

    objects = read_objects(memq_stack.s3_client(), s3_bucket)
    stored = Counter(r for o in objects for r in o.records)
    expected = Counter((1_700_000_000_000 + i, k, v, h) for i, (v, k, h) in enumerate(sent))
    assert stored == expected  # every record exactly once, byte-identical
    # Every ack names the object that holds the record.
    by_key = {o.key: o for o in objects}
    for r, (v, _, _) in zip(results[::997], sent[::997], strict=True):
        assert r.bucket == s3_bucket and r.key in by_key
        assert any(rec[2] == v for rec in by_key[r.key].blocks[r.block_index][1])
    for o in objects:
        assert parse_object_key(o.key).topic == "events"

    notes = read_notifications(memq_stack.kafka_bootstrap, notify_topic, expected=len(objects))
    assert sorted(n.key for n in notes) == sorted(by_key)  # exactly one per object
    for n in notes:
        o = by_key[n.key]
        assert (n.bucket, n.size, n.checksum) == (s3_bucket, o.size, o.header.crc)
        assert (n.block_count, n.record_count) == (o.header.block_count, o.header.record_count)
        assert (n.min_timestamp, n.max_timestamp) == (
            o.header.min_timestamp,
            o.header.max_timestamp,
        )
        assert (n.topic, n.cluster, n.broker, n.storage) == ("events", "test", "test-broker", "s3")


@pytest.mark.parametrize("acks", ["1", "0"])
def test_ack_1_and_0_records_reach_s3(memq_stack: StackState, s3_bucket: str, acks: str) -> None:
    n = 20_000 if acks == "1" else 5_000
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["t"], batch_ms=200)
    with BrokerThread(cfg) as broker:
        p = Producer({"bootstrap.servers": broker.address, "acks": acks, "linger.ms": 5})
        values = [b"v%06d" % i for i in range(n)]
        futs = [p.produce("t", v) for v in values]
        assert p.flush(60) == 0
        assert all(f.exception(0) is None for f in futs)
        p.close()
        objects = wait_for_objects(memq_stack.s3_client(), s3_bucket, n, timeout=30)
    assert Counter(r[2] for o in objects for r in o.records) == Counter(values)


def test_filesystem_and_devnull_storage(memq_stack: StackState, tmp_path) -> None:
    root = tmp_path / "store"
    cfg = broker_config(memq_stack, storage="filesystem", root=str(root), topics=["fs"])
    with BrokerThread(cfg) as broker:
        with Producer({"bootstrap.servers": broker.address, "linger.ms": 2}) as p:
            futs = [p.produce("fs", b"rec-%d" % i) for i in range(3000)]
            assert p.flush(30) == 0
        keys = {f.result().key for f in futs}
    from memq.formats import decode_batch

    files = [f for f in root.rglob("*") if f.is_file()]
    assert {f.relative_to(root).as_posix() for f in files} == keys
    got = Counter(r[2] for f in files for _, recs in decode_batch(f.read_bytes())[1] for r in recs)
    assert got == Counter(b"rec-%d" % i for i in range(3000))

    cfg = broker_config(memq_stack, storage="devnull", topics=["dn"])
    with BrokerThread(cfg) as broker, Producer({"bootstrap.servers": broker.address}) as p:
        assert p.produce("dn", b"x").result(30).key is not None


def test_auto_create_topics_and_metadata(memq_stack: StackState, s3_bucket: str) -> None:
    cfg = broker_config(memq_stack, bucket=s3_bucket, auto_create_topics=True)
    with BrokerThread(cfg) as broker, Producer({"bootstrap.servers": broker.address}) as p:
        md = p.produce("fresh-topic", b"hello").result(30)
        assert parse_object_key(md.key or "").topic == "fresh-topic"
        assert "fresh-topic" in broker.server.processors
        meta = broker.server.metadata(
            __import__("memq.protocol").protocol.MetadataRequest(topics=["fresh-topic", "nope"])
        )
        t = meta.topics["fresh-topic"]
        assert t.writers == ["test-broker"]
        assert t.storage == {
            "type": "s3",
            "bucket": s3_bucket,
            "region": "us-east-1",
            "endpoint_url": memq_stack.s3_endpoint,
            "use_hash_prefix": True,
        }
        assert t.notification["topic"] == "memq.test.fresh-topic.notifications"
        assert meta.topics["nope"].error


def test_duplicate_block_is_not_stored_twice(memq_stack: StackState, s3_bucket: str) -> None:
    """A retried block (same producer id, epoch, sequence) is acked without a second copy."""
    import asyncio

    from memq.client.connection import ClientConnection
    from memq.formats import RequestType, encode_block
    from memq.protocol import Ack, WriteAck, decode_msg, encode_write_header

    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["d"], batch_ms=300)
    block = encode_block([(1, None, b"once", None)], producer_id=77, epoch=1, sequence=5)

    async def send_twice(address: str) -> list[WriteAck]:
        conn = await ClientConnection.open(address)
        reqs = [
            conn.request(RequestType.WRITE, encode_write_header("d", Ack.ALL), block)
            for _ in range(2)
        ]
        out = [decode_msg(WriteAck, r.body, "ack") for r in await asyncio.gather(*reqs)]
        conn.close()
        return out

    with BrokerThread(cfg) as broker:
        first, second = asyncio.run(send_twice(broker.address))
    assert (first.duplicate, second.duplicate) == (False, True)
    assert first.key == second.key
    objects = read_objects(memq_stack.s3_client(), s3_bucket)
    assert [r[2] for o in objects for r in o.records] == [b"once"]


def test_each_notification_topic_gets_its_own_partitions_and_retention(
    memq_stack: StackState, s3_bucket: str
) -> None:
    """Topics on one Kafka share a notification sink; their notification topics still get
    their own partition counts and retention (not the first topic's)."""
    import uuid

    from memq.storage_handlers.kafka_topics import describe_topic

    cluster = f"np-{uuid.uuid4().hex[:8]}"
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, cluster=cluster, partitions=2,
        topics=["small", "wide"],
        topic_overrides={},
    )  # fmt: skip
    data = cfg.model_dump(mode="json", by_alias=True)
    data["topics"] = [
        {**data["topic_defaults"], "name": "small", "retention": {"ms": 3_600_000}},
        {**data["topic_defaults"], "name": "wide", "notification": {
            **data["topic_defaults"]["notification"], "partitions": 6}},
    ]  # fmt: skip
    from memq.config import load_broker_config

    with BrokerThread(load_broker_config(data=data, env={})):
        small = describe_topic(memq_stack.kafka_bootstrap, f"memq.{cluster}.small.notifications")
        wide = describe_topic(memq_stack.kafka_bootstrap, f"memq.{cluster}.wide.notifications")
    assert (small.partitions, wide.partitions) == (2, 6)
    assert small.retention_ms == 3_600_000 + 86_400_000


def test_ensure_topic_creates_once_then_finds_the_topic_with_one_request(
    memq_stack: StackState,
) -> None:
    """One CreateTopics request both creates a missing notification topic and recognises an
    existing one (TOPIC_ALREADY_EXISTS): a broker starting 1,000 topics makes no listing
    of every Kafka topic per topic. The sink reuses one admin client."""
    import uuid

    from memq.config import NotificationConfig
    from memq.storage_handlers.kafka_sink import KafkaNotificationSink
    from memq.storage_handlers.kafka_topics import describe_topic

    topic = f"memq.ensure-{uuid.uuid4().hex[:8]}.notifications"
    ncfg = NotificationConfig(bootstrap_servers=memq_stack.kafka_bootstrap, partitions=3)
    sink = KafkaNotificationSink(ncfg)
    try:
        assert sink.ensure_topic(topic, ncfg, retention_ms=7_200_000) is True
        assert sink.ensure_topic(topic, ncfg, retention_ms=7_200_000) is False
        assert len(sink._admins) == 1
    finally:
        sink.close(5)
    described = describe_topic(memq_stack.kafka_bootstrap, topic)
    assert (described.partitions, described.retention_ms) == (3, 7_200_000)
