"""Producer behaviour against real brokers: buffer limits, CLI, hedged S3 uploads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memq import BufferFullError, Producer
from memq.config import S3Config
from memq.devstack import StackState
from memq.devstack.faultproxy import FaultProxy
from memq.errors import MemqError
from memq.formats import encode_batch, encode_block, parse_object_key
from memq.formats.block import RECORD_OVERHEAD
from memq.run.broker import BrokerThread
from memq.storage_handlers.s3 import S3Writer
from memq.testing import broker_config
from tests.integration.helpers import read_objects, wait_for_objects


def test_buffer_full_blocks_then_raises(memq_stack: StackState, s3_bucket: str) -> None:
    host, port = memq_stack.s3_endpoint.removeprefix("http://").rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        cfg = broker_config(
            memq_stack,
            bucket=s3_bucket,
            topics=["full"],
            s3_endpoint=proxy.url,
            batch_bytes=256 * 1024,
            batch_ms=50,
            ring_size=2,
        )
        with BrokerThread(cfg) as broker:
            proxy.set_mode("stall")  # uploads hang: acks=all never completes
            p = Producer(
                {
                    "bootstrap.servers": broker.address,
                    "buffer.memory": 1 << 20,
                    "max.block.ms": 300,
                    "linger.ms": 1,
                    "delivery.timeout.ms": 60_000,
                }
            )
            t0 = time.monotonic()
            with pytest.raises(BufferFullError, match=r"buffer\.memory"):
                for _ in range(1000):  # incompressible, so the buffer counts ~10 KB each
                    p.produce("full", os.urandom(10_000))
            assert time.monotonic() - t0 < 30
            assert isinstance(BufferFullError("x"), BufferError)  # Kafka users catch BufferError
            proxy.set_mode("pass")
            assert p.flush(60) == 0
            # produce_batch() that runs out of buffer.memory part way: the records already
            # in blocks are delivered all the same, and the error says which (a retry of
            # the whole batch stored them twice).
            proxy.set_mode("stall")
            values = [b"%05d" % i + os.urandom(8000) for i in range(300)]
            with pytest.raises(BufferFullError) as info:
                p.produce_batch("full", values)
            queued = info.value.queued  # type: ignore[attr-defined]
            assert 0 < len(queued) < 300 and queued == list(range(len(queued)))
            assert f"{len(queued)} of these 300 records were queued" in str(info.value)
            proxy.set_mode("pass")
            assert info.value.future.result(60) == len(queued)  # type: ignore[attr-defined]
            # flush() returns once the delivery callbacks ran (it returned before them).
            ran: list[object] = []

            def slow(err: object, _md: object) -> None:
                time.sleep(0.05)
                ran.append(err)

            for i in range(20):
                p.produce("full", b"cb-%d" % i, on_delivery=slow)
            assert p.flush(60) == 0 and ran == [None] * 20
            p.close()
            stored = [r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket, topic="full")
                      for r in o.records if len(r[2]) == 8005]  # fmt: skip
            assert sorted(stored) == values[: len(queued)]


def test_many_topics_share_buffer_memory_and_blocks_still_fill(
    memq_stack: StackState, s3_bucket: str
) -> None:
    """An open block holds a small part of buffer.memory and takes more as it fills: 40
    topics with one record each fit in 4 MiB (with a whole batch.size of 1 MiB each, the
    5th produce() would have had to wait for a linger), and a busy topic's block still
    grows to batch.size (all its records in one block)."""
    trickle = [f"few-{i:02d}" for i in range(40)]
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=[*trickle, "busy"], batch_ms=50)
    with BrokerThread(cfg) as broker:
        p = Producer(
            {
                "bootstrap.servers": broker.address,
                "buffer.memory": 4 << 20,
                "batch.size": 1 << 20,
                "max.block.ms": 0,  # BufferFullError at once instead of waiting
                "linger.ms": 60_000,  # only flush() seals
                "compression.type": "none",
            }
        )
        try:
            values = [os.urandom(1000) for _ in range(900)]  # ~0.9 MB: one 1 MiB block
            busy = [p.produce("busy", v) for v in values]
            few = [p.produce(t, t.encode()) for t in trickle]
            assert p.flush(60) == 0
            assert {f.result(0).sequence for f in busy} == {busy[0].result(0).sequence}
            assert [f.result(0).topic for f in few] == trickle
            assert p.stats["buffered_bytes"] == 0
        finally:
            p.close()
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic="busy")
    assert [len(recs) for o in objs for _, recs in o.blocks] == [900]
    assert sorted(r[2] for o in objs for r in o.records) == sorted(values)


def test_hedged_upload_wins_when_the_first_attempt_hangs(
    memq_stack: StackState, s3_bucket: str
) -> None:
    host, port = memq_stack.s3_endpoint.removeprefix("http://").rsplit(":", 1)
    obj = encode_batch(
        [encode_block([(1, None, b"hedged", None)], producer_id=1, epoch=0, sequence=0)]
    )
    with FaultProxy(host, int(port)) as proxy:
        cfg = S3Config(
            bucket=s3_bucket,
            endpoint_url=proxy.url,
            region="us-east-1",
            hedge_after_ms=1000,
            read_timeout_ms=4000,
            attempts=1,
        )
        writer = S3Writer(cfg, "test")
        assert writer.client is not None  # built now: the first PUT connects at once
        # The first PUT's connection hangs; every later connection (the hedge) passes.
        proxy.set_mode("stall", count=1, then="pass")
        stored = writer.store("h", "1795000000000-00000001-b", 1795000000000, obj)
        writer.close()
    assert proxy.counts["stall"] == 1 and proxy.counts["pass"] >= 1
    assert stored.key.endswith("-h1")
    assert parse_object_key(stored.key).batch_id == "1795000000000-00000001-b-h1"
    objects = read_objects(memq_stack.s3_client(), s3_bucket)
    assert [o.key for o in objects] == [stored.key]  # the hung first attempt never landed
    assert objects[0].records == [(1, None, b"hedged", None)]


def _memq(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_memq_produce_cli_uses_the_local_stack(memq_stack: StackState, unique_name) -> None:
    topic = unique_name("cli")
    env = {**os.environ, "MEMQ_STATE_DIR": memq_stack.state_dir}
    lines = b"".join(b"line %d\n" % i for i in range(500))
    proc = _memq("produce", "--topic", topic, stdin=lines, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stderr.decode()
    assert "500" in out and "ack latency" in out and "errors" in out
    proc = _memq(
        "produce", "--topic", topic, "--count", "300", "--size", "200", "--acks", "1", env=env
    )
    assert proc.returncode == 0, proc.stderr.decode()
    objs = wait_for_objects(memq_stack.s3_client(), memq_stack.bucket, 800, topic=topic, timeout=30)
    mine = [r for o in objs for r in o.records]
    assert sorted(r[2] for r in mine if r[2].startswith(b"line")) == sorted(
        b"line %d" % i for i in range(500)
    )
    assert sum(1 for r in mine if len(r[2]) == 200) == 300


def test_memq_produce_without_stack_is_one_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "MEMQ_STATE_DIR": str(tmp_path / "none")}
    proc = _memq("produce", "--topic", "x", "--count", "1", env=env)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "memq dev up" in err and "Traceback" not in err


def test_produce_batch_stores_every_record_in_order(memq_stack: StackState, s3_bucket: str) -> None:
    """The bulk path: 60,000 records in calls of 20,000, split over blocks of 256 KiB,
    stored byte-exact and in order; one future per call."""
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["bulk"], batch_ms=100)
    values = [b"bulk-%06d-" % i + bytes(i % 37) for i in range(60_000)]
    keys = [b"k%d" % (i % 7) if i % 3 else None for i in range(60_000)]
    with BrokerThread(cfg) as broker:
        with Producer({"bootstrap.servers": broker.address, "batch.size": 256 * 1024}) as p:
            futs = [
                p.produce_batch("bulk", values[i : i + 20_000], keys[i : i + 20_000], timestamp=7)
                for i in range(0, 60_000, 20_000)
            ]
            assert [f.result(timeout=60) for f in futs] == [20_000] * 3
            assert p.stats["records_acked"] == 60_000 and p.stats["blocks_acked"] > 3
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic="bulk")
    blocks = sorted(
        (bh.sequence, recs) for o in objs for bh, recs in o.blocks
    )  # one producer, one topic: its sequence order is the produce order
    got = [r for _, recs in blocks for r in recs]
    # Keyed records go to their key lane's blocks (docs/guarantees.md, keyed ordering):
    # every record once, and each key's records (and the unkeyed ones) in produce order.
    sent = list(zip(keys, values, strict=True))
    assert sorted((r[1] or b"", r[2]) for r in got) == sorted((k or b"", v) for k, v in sent)
    for key in {*keys}:
        assert [r[2] for r in got if r[1] == key] == [v for k, v in sent if k == key]
    assert {r[0] for r in got} == {7} and all(r[3] is None for r in got)


def test_produce_batch_of_one_record_size_fills_blocks_in_order(
    memq_stack: StackState, s3_bucket: str
) -> None:
    """Records of one size take the bulk path's uniform sizing (running totals as a
    range) and the encoder's one-lead join: 50,000 distinct 100-byte records in calls of
    10,000, over blocks of 64 KiB, stored byte-exact and in order; with a long linger
    every block but the last is sealed full, and holds as many records as the others."""
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["sized"], batch_ms=100)
    values = [b"%099d" % i for i in range(50_000)]
    with BrokerThread(cfg) as broker:
        conf = {"bootstrap.servers": broker.address, "batch.size": 64 * 1024, "linger.ms": 1000}
        with Producer(conf) as p:
            futs = [
                p.produce_batch("sized", values[i : i + 10_000]) for i in range(0, 50_000, 10_000)
            ]
            assert [f.result(timeout=60) for f in futs] == [10_000] * 5
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic="sized")
    blocks = sorted((bh.sequence, bh.record_count, recs) for o in objs for bh, recs in o.blocks)
    assert [r[2] for _, _, recs in blocks for r in recs] == values
    assert all(r[1] is None and r[3] is None for _, _, recs in blocks for r in recs)
    counts = [c for _, c, _ in blocks]
    full = max(counts)  # (what fits in 64 KiB)
    assert full * (100 + RECORD_OVERHEAD) > 60 * 1024
    assert counts[:-1] == [full] * (len(counts) - 1)


def test_flush_or_close_in_a_delivery_callback_is_an_error_not_a_hang(
    memq_stack: StackState, s3_bucket: str
) -> None:
    """flush() in an on_delivery callback waited for the I/O thread it was blocking:
    that producer delivered nothing more, ever. Now it raises at once, as close() did."""
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["cb"], batch_ms=100)
    raised: list[BaseException] = []

    def cb(err: object, md: object) -> None:
        for call in (lambda: p.flush(5), lambda: p.close(5)):
            try:
                call()
            except MemqError as e:
                raised.append(e)

    with BrokerThread(cfg) as broker, Producer({"bootstrap.servers": broker.address}) as p:
        p.produce("cb", b"first", on_delivery=cb).result(30)
        assert p.produce("cb", b"second").result(30).topic == "cb"  # the thread goes on
    assert [str(e) for e in raised] == [
        "flush() cannot be called from a delivery callback",
        "close() cannot be called from a delivery callback",
    ]


def test_a_kafka_producers_settings_produce_to_memq(memq_stack: StackState, s3_bucket: str) -> None:
    """A confluent-kafka user's producer dict, enable.idempotence=true and librdkafka's
    names included, is taken as it is (enable.idempotence was an unknown key) and its
    records are stored with the codec it names."""
    from memq.formats.compression import Compression

    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["kafka-keys"], batch_ms=100)
    with BrokerThread(cfg) as broker:
        conf = {"bootstrap.servers": broker.address, "enable.idempotence": True, "acks": -1,
                "client.id": "kafka-user", "compression.codec": "lz4",
                "queue.buffering.max.ms": 5, "message.timeout.ms": 60_000}  # fmt: skip
        with Producer(conf) as p:
            futs = [p.produce("kafka-keys", b"v-%03d-" % i + b"x" * 200) for i in range(100)]
            assert [f.result(timeout=60).topic for f in futs] == ["kafka-keys"] * 100
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic="kafka-keys")
    want = [b"v-%03d-" % i + b"x" * 200 for i in range(100)]
    assert sorted(r[2] for o in objs for r in o.records) == want
    assert {bh.compression for o in objs for bh, _ in o.blocks} == {Compression.LZ4}
