"""The broker's Kafka-protocol listener against real clients and real servers (moto S3,
the local Kafka-protocol broker for notifications): confluent-kafka (librdkafka, with its
default idempotence), kafkajs through node, raw aiokafka-built requests; records read
back byte-exact with memq.Consumer or from S3."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol.produce import ProduceRequest_v7
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from memq import Consumer
from memq.broker.kafka_connection import INLINE_TRANSCODE_BYTES
from memq.devstack import StackState
from memq.formats.notification import decode_notification
from memq.run.broker import BrokerThread
from memq.security import make_token
from memq.testing import broker_config
from tests.integration.helpers import read_objects
from tests.integration.spark_fixtures import spark_session_fixture  # noqa: F401 (spark_session)

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}
ROOT = Path(__file__).resolve().parents[2]
SECRET = "kafka-listener-secret-0123456789"


@pytest.fixture
def topic(unique_name: Any) -> str:
    return str(unique_name("k"))


def kafka_broker(
    stack: StackState, bucket: str, topics: list[str], batch_ms: int = 200, **overrides: Any
) -> BrokerThread:
    listener = {"port": 0, **overrides.pop("kafka_listener", {})}
    cfg = broker_config(
        stack, bucket=bucket, topics=topics, batch_ms=batch_ms, batch_bytes=4 << 20,
        partitions=3, cluster=f"kl-{uuid.uuid4().hex[:8]}", kafka_listener=listener,
        **overrides,
    )  # fmt: skip
    return BrokerThread(cfg)


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    with kafka_broker(memq_stack, s3_bucket, [topic]) as b:
        yield b


def kafka_address(b: BrokerThread) -> str:
    assert b.server is not None and b.server.kafka_port is not None
    return f"127.0.0.1:{b.server.kafka_port}"


def records(n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    base = 1_763_790_000_000
    return [
        (b"key-%d" % (i % 97), b"value-%06d-" % i + bytes(i % 41),
         [("seq", b"%d" % i), ("kind", b"\x00\xff")], base + i)
        for i in range(n)
    ]  # fmt: skip


def produce_confluent(
    address: str, topic: str, recs: list[Any], **extra: Any
) -> list[tuple[Any, Any]]:
    """Produce with confluent-kafka (librdkafka defaults: acks=all, idempotence on)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 10, **extra})  # fmt: skip
    reports: list[tuple[Any, Any]] = []
    for key, value, headers, ts in recs:
        while True:
            try:
                p.produce(topic, value, key, headers=headers, timestamp=ts,
                          on_delivery=lambda err, msg: reports.append((err, msg)))  # fmt: skip
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0
    return reports


def read_back(address: str, topic: str, n: int, timeout: float = 120) -> list[Any]:
    out: list[Any] = []
    with Consumer({"bootstrap.servers": address, "group.id": "g", **GROUP}) as c:
        c.subscribe(topic)
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out.extend(c.consume(1000, 1.0))
        out.extend(c.consume(1000, 2.0))  # nothing more may come
    return out


def spark_read_back(
    spark: Any, stack: StackState, bucket: str, b: BrokerThread, topic: str
) -> list[tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...], int]]:
    """(key, value, headers sorted by name, timestamp ms) of every record of ``topic``
    read with the Spark ``memq`` source (registered by the ``spark_session`` fixture)
    straight from the broker's S3 objects."""
    from pyspark.sql import functions as F  # noqa: N812

    df = (
        spark.read.format("memq")
        .options(bucket=bucket, topic=topic, cluster=b.config.cluster,
                 endpoint_url=stack.s3_endpoint, region="us-east-1")
        .load()
        .select("key", "value", "headers", F.unix_millis("timestamp").alias("ts_ms"))
    )  # fmt: skip
    return [
        (None if r.key is None else bytes(r.key), bytes(r.value),
         tuple(sorted((k, bytes(v)) for k, v in (r.headers or {}).items())), r.ts_ms)
        for r in df.collect()
    ]  # fmt: skip


def test_confluent_kafka_idempotent_producer_50k_records_read_back_exactly(
    broker: BrokerThread, topic: str, memq_stack: StackState, s3_bucket: str, spark_session: Any
) -> None:
    """Read back byte-exact by memq.Consumer (through the notifications) and by the
    Spark source (straight from S3)."""
    recs = records(50_000)
    reports = produce_confluent(kafka_address(broker), topic, recs)
    assert len(reports) == len(recs) and all(err is None for err, _ in reports)
    got = read_back(broker.address, topic, len(recs))
    assert sorted((m.key, m.value, m.headers, m.timestamp) for m in got) == sorted(
        (k, v, tuple(h), ts) for k, v, h, ts in recs
    )
    rows = spark_read_back(spark_session, memq_stack, s3_bucket, broker, topic)
    assert sorted(rows) == sorted((k, v, tuple(sorted(h)), ts) for k, v, h, ts in recs)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_stored_byte_exact(
    broker: BrokerThread, topic: str, codec: str, memq_stack: StackState, s3_bucket: str
) -> None:
    # compressible (librdkafka sends a batch uncompressed when compression does not pay)
    recs = [(k, v + b"." * 400, h, ts) for k, v, h, ts in records(300)]
    reports = produce_confluent(kafka_address(broker), topic, recs, **{"compression.type": codec})
    assert all(err is None for err, _ in reports)
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    stored = sorted((r[1], r[2], r[3], r[0]) for o in objs for r in o.records)
    assert stored == sorted((k, v, tuple(h), ts) for k, v, h, ts in recs)
    expected = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 2}[codec]  # MemQ's codes
    assert {int(h.compression) for o in objs for h, _ in o.blocks} == {expected}


def test_an_unknown_topic_is_unknown_topic_or_partition(broker: BrokerThread) -> None:
    from confluent_kafka import KafkaError

    # librdkafka fails a message to a topic the metadata calls unknown once
    # topic.metadata.propagation.max.ms has passed (default 30 s)
    reports = produce_confluent(kafka_address(broker), "no-such-topic", records(1),
                                **{"topic.metadata.propagation.max.ms": 1000,
                                   "message.timeout.ms": 20_000})  # fmt: skip
    ((err, _),) = reports
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err


# --- raw requests ---------------------------------------------------------------------------


def raw_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)  # fmt: skip
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def exchange(address: str, frames: list[bytes], answers: int, timeout: float = 30) -> list[bytes]:
    """Send request frames on one connection, read ``answers`` response frames."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        for f in frames:
            s.sendall(f)
        out = []
        for _ in range(answers):
            (n,) = struct.unpack(">i", recv_exactly(s, 4))
            out.append(recv_exactly(s, n))
        return out


def recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def request_frame(req: Any, cid: int) -> bytes:
    header = struct.pack(">hhih", req.API_KEY, req.API_VERSION, cid, 4) + b"test"
    body = header + req.encode()
    return struct.pack(">i", len(body)) + body


def test_a_retried_idempotent_batch_is_answered_as_a_duplicate(
    broker: BrokerThread, topic: str, memq_stack: StackState, s3_bucket: str
) -> None:
    batch = raw_batch(pid=4242, epoch=0, seq=0, values=[b"once-a", b"once-b"])
    req = ProduceRequest_v7(None, -1, 30_000, [(topic, [(1, batch)])])
    first, again = exchange(
        kafka_address(broker), [request_frame(req, 1), request_frame(req, 2)], 2
    )
    for cid, resp in ((1, first), (2, again)):
        assert struct.unpack_from(">i", resp)[0] == cid
        decoded = req.RESPONSE_TYPE.decode(resp[4:])
        ((name, ((partition, code, offset, *_),)),) = decoded.topics
        assert (name, partition, code, offset) == (topic, 1, 0, 0)
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    stored = [r[2] for o in objs for r in o.records]
    assert stored == [b"once-a", b"once-b"]  # one copy
    (o,) = objs
    ((h, _),) = o.blocks
    assert (h.producer_id, h.epoch, h.sequence) == (4242, 0, (1 << 32) | 0)


def test_a_request_larger_than_the_receive_buffers_is_stored_byte_exact(
    broker: BrokerThread, topic: str, memq_stack: StackState, s3_bucket: str
) -> None:
    # 1.5 MiB for partition 0 (received into a buffer of its own, transcoded off the
    # event loop: over INLINE_TRANSCODE_BYTES), a few bytes for partition 2 (inline)
    big = [os.urandom(1024) for _ in range(1500)]
    small = [b"small-a", b"small-b"]
    halves = raw_batch(-1, -1, -1, big[:750]) + raw_batch(-1, -1, -1, big[750:])  # (<= 1 MiB)
    sets = [(0, halves), (2, raw_batch(-1, -1, -1, small))]
    assert len(sets[0][1]) > INLINE_TRANSCODE_BYTES
    req = ProduceRequest_v7(None, -1, 30_000, [(topic, sets)])
    (resp,) = exchange(kafka_address(broker), [request_frame(req, 9)], 1)
    decoded = req.RESPONSE_TYPE.decode(resp[4:])
    ((_, parts),) = decoded.topics
    assert [(p, code) for p, code, *_ in parts] == [(0, 0), (2, 0)]
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    stored = sorted(r[2] for o in objs for r in o.records)
    assert stored == sorted(big + small)


def test_librdkafka_retries_after_cut_connections_store_every_record_once(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """A real idempotent client whose connections are cut while its acks=all requests
    wait: it retries them (same producer id, epoch and sequence) on a new connection,
    the broker answers the ones it stored as duplicates, and every record is read back
    exactly once. The clients reach the broker only through a fault proxy (the
    advertised port is the proxy's); cuts go on until the broker has seen a retry."""
    from confluent_kafka import Producer

    from memq.devstack.faultproxy import FaultProxy

    with FaultProxy("127.0.0.1", 1) as proxy:  # upstream set once the broker has its port
        listener = {"advertised_port": proxy.port}
        with kafka_broker(memq_stack, s3_bucket, [topic], kafka_listener=listener) as b:
            assert b.server is not None and b.server.kafka is not None
            kafka = b.server.kafka
            assert kafka.advertised_port == proxy.port != kafka.port
            proxy.upstream = ("127.0.0.1", kafka.port)
            reg = b.server.metrics.registry

            def duplicates() -> float:
                v = reg.get_sample_value("memq_duplicate_blocks_total", {"topic": topic})
                return v or 0.0

            p = Producer({"bootstrap.servers": proxy.address, "enable.idempotence": True,
                          "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000})  # fmt: skip

            def waiting() -> bool:  # an acks=all request is in the broker, not answered yet
                return any(c._unanswered > 0 for c in list(kafka.connections))

            reports: list[Any] = []
            sent, cuts = 0, 0
            deadline = time.monotonic() + 90
            while duplicates() == 0 or cuts < 3:
                assert time.monotonic() < deadline, f"no retry reached the broker ({cuts} cuts)"
                for _ in range(300):
                    p.produce(topic, b"v-%d" % sent, b"k-%d" % (sent % 13),
                              on_delivery=lambda err, msg: reports.append(err))  # fmt: skip
                    sent += 1
                until = time.monotonic() + 5
                while not waiting() and time.monotonic() < until:
                    p.poll(0.001)
                if waiting():
                    proxy.set_mode("pass")  # cut every connection: answers owed are lost
                    cuts += 1
                p.poll(0.1)
            assert p.flush(120) == 0
            assert len(reports) == sent and all(err is None for err in reports), [
                e for e in reports if e is not None
            ][:3]
            got = read_back(b.address, topic, sent)
    assert duplicates() > 0 and proxy.counts["pass"] > cuts
    assert sorted(m.value for m in got) == sorted(b"v-%d" % i for i in range(sent))


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff",  # a negative length
        b"\x7f\x00\x00\x00" + b"x" * 100,  # over max_frame_bytes
        b"\x00\x00\x00\x20\x00\x03",  # truncated, then the client goes away
        struct.pack(">i", 12) + b"\x00\x03\x00\x09" + b"\x00" * 8,  # Metadata v9 (flexible)
        struct.pack(">i", 20) + b"\x00\x00\x00\x07\x00\x00\x00\x01" + b"\xee" * 12,  # bad Produce
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_garbage_gets_a_clean_close_and_the_broker_keeps_serving(
    broker: BrokerThread, topic: str, garbage: bytes
) -> None:
    host, port = kafka_address(broker).split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(garbage)
        if garbage.startswith(b"\x00\x00\x00\x20"):
            s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(4096):  # the broker closes (maybe after an error answer)
            data += chunk
    # still serving: a normal client produces
    reports = produce_confluent(kafka_address(broker), topic, records(10))
    assert all(err is None for err, _ in reports)


def test_requests_before_a_bad_length_are_answered_then_the_connection_closes(
    broker: BrokerThread,
) -> None:
    from aiokafka.protocol.admin import ApiVersionRequest_v2

    frames = [request_frame(ApiVersionRequest_v2(), cid) for cid in (1, 2)]
    host, port = kafka_address(broker).split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"".join(frames) + b"\x7f\xff\xff\xff" + b"x" * 100)  # one send
        answered = []
        while head := s.recv(4, socket.MSG_WAITALL):
            (n,) = struct.unpack(">i", head)
            answered.append(struct.unpack_from(">i", recv_exactly(s, n))[0])
    assert answered == [1, 2]


def test_a_request_arriving_slowly_is_not_cut_by_the_idle_timeout(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    from aiokafka.protocol.admin import ApiVersionRequest_v2

    req = request_frame(ApiVersionRequest_v2(), 6)
    with kafka_broker(memq_stack, s3_bucket, [topic], idle_timeout_s=2.0) as b:
        host, port = kafka_address(b).split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            pieces = [req[i : i + 1] for i in range(len(req))]
            assert len(pieces) * 0.3 > 2 * 2.0  # the request takes twice idle_timeout_s
            for piece in pieces:  # a slow client (the pauses are the input, not a wait)
                s.sendall(piece)
                time.sleep(0.3)
            (n,) = struct.unpack(">i", recv_exactly(s, 4))
            assert struct.unpack_from(">i", recv_exactly(s, n))[0] == 6


def test_api_versions_of_an_unsupported_version_lists_the_supported_ranges(
    broker: BrokerThread,
) -> None:
    from aiokafka.protocol.admin import ApiVersionResponse_v0

    frame = struct.pack(">hhih", 18, 9, 77, -1)  # ApiVersions v9
    (resp,) = exchange(kafka_address(broker), [struct.pack(">i", len(frame)) + frame], 1)
    assert struct.unpack_from(">i", resp)[0] == 77
    decoded = ApiVersionResponse_v0.decode(resp[4:])
    assert decoded.error_code == 35
    ranges = {k: (lo, hi) for k, lo, hi in decoded.api_versions}
    assert ranges[18] == (0, 2) and ranges[0] == (3, 8) and ranges[3] == (0, 8)
    assert ranges[22] == (0, 1)


def test_acks_0_and_1(broker: BrokerThread, topic: str) -> None:
    for acks in ("0", "1"):
        reports = produce_confluent(kafka_address(broker), topic, records(100),
                                    acks=acks, **{"enable.idempotence": False})  # fmt: skip
        assert all(err is None for err, _ in reports)
    got = read_back(broker.address, topic, 200)
    assert len(got) == 200


# --- node ids, batches sealed once every producer waits ----------------------------------


def sealed(b: BrokerThread, topic: str) -> dict[str, float]:
    """memq_batches_sealed_total of ``topic`` by trigger (zero ones left out)."""
    assert b.server is not None
    reg = b.server.metrics.registry
    out = {}
    for trigger in ("age", "size", "count", "memory", "waiting", "shutdown"):
        v = reg.get_sample_value("memq_batches_sealed_total", {"topic": topic, "trigger": trigger})
        if v:
            out[trigger] = v
    return out


def test_an_idempotent_producer_is_answered_without_waiting_out_batch_ms(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """librdkafka's idempotent producer keeps one request in flight per partition: once
    each partition's request waits on the open batch nothing more can come, so the batch
    is sealed then ("waiting"), not after batch.ms (here 60 s)."""
    from confluent_kafka import Producer

    with kafka_broker(memq_stack, s3_bucket, [topic], batch_ms=60_000) as b:
        md = Producer({"bootstrap.servers": kafka_address(b)}).list_topics(topic, timeout=10)
        assert len(md.brokers) == 1  # one node id per broker (kafkajs keys them by address)
        assert {m.port for m in md.brokers.values()} == {int(kafka_address(b).split(":")[1])}
        assert len({m.host for m in md.brokers.values()}) == 1
        leaders = [md.topics[topic].partitions[p].leader for p in range(3)]
        assert set(leaders) == set(md.brokers)
        recs = records(3000)
        t0 = time.monotonic()
        reports = produce_confluent(kafka_address(b), topic, recs)
        assert time.monotonic() - t0 < 30, "acks=all waited out batch.ms"
        assert len(reports) == len(recs) and all(err is None for err, _ in reports)
        got = sealed(b, topic)
        assert got.get("waiting", 0) >= 1 and "age" not in got, got
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    stored = sorted((r[1], r[2], r[3], r[0]) for o in objs for r in o.records)
    assert stored == sorted((k, v, tuple(h), ts) for k, v, h, ts in recs)


def test_a_producer_that_may_send_more_keeps_the_batch_open_until_batch_ms(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """An acks=1 request on the same partition (a client that does not wait for answers)
    means more may come: the acks=-1 request behind it is answered at batch.ms."""
    with kafka_broker(memq_stack, s3_bucket, [topic], batch_ms=1500) as b:
        one = ProduceRequest_v7(None, 1, 30_000, [(topic, [(0, raw_batch(-1, -1, -1, [b"a"]))])])
        every = ProduceRequest_v7(None, -1, 30_000, [(topic, [(0, raw_batch(-1, -1, -1, [b"b"]))])])
        t0 = time.monotonic()
        answers = exchange(kafka_address(b), [request_frame(one, 1), request_frame(every, 2)], 2)
        elapsed = time.monotonic() - t0
        assert [struct.unpack_from(">i", a)[0] for a in answers] == [1, 2]
        for a in answers:
            ((_, ((_, code, *_),)),) = every.RESPONSE_TYPE.decode(a[4:]).topics
            assert code == 0
        assert elapsed >= 1.4, f"answered after {elapsed:.2f} s, before batch.ms"
        assert sealed(b, topic) == {"age": 1}
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    assert sorted(r[2] for o in objs for r in o.records) == [b"a", b"b"]


def _one_then_five(
    address: str, topic: str, pid: int, last: tuple[int, ...] = (5,)
) -> tuple[list[int], float]:
    """On one connection: a request to partition 0, answered; then one to each of
    partitions 1-4 and one to the partitions ``last``, all sent before any answer. The
    error codes, and the seconds the five took to be answered."""
    host, port = address.split(":")

    def produce(partitions: tuple[int, ...], cid: int) -> bytes:
        seq = -1 if pid < 0 else 0
        parts = [(p, raw_batch(pid, 0 if pid >= 0 else -1, seq, [b"p%d" % p])) for p in partitions]
        return request_frame(ProduceRequest_v7(None, -1, 30_000, [(topic, parts)]), cid)

    def answer(s: socket.socket) -> list[int]:
        (n,) = struct.unpack(">i", recv_exactly(s, 4))
        resp = ProduceRequest_v7.RESPONSE_TYPE.decode(recv_exactly(s, n)[4:])
        ((_, parts),) = resp.topics
        return [int(code) for _, code, *_ in parts]

    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(produce((0,), 1))
        codes = answer(s)  # (partition 0 alone waits on the batch: sealed at once)
        t0 = time.monotonic()
        s.sendall(
            b"".join(produce(ps, 2 + i) for i, ps in enumerate([(1,), (2,), (3,), (4,), last]))
        )
        for _ in range(5):
            codes += answer(s)
        return codes, time.monotonic() - t0


def test_an_idempotent_connection_at_its_in_flight_limit_does_not_hold_a_batch_open(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """An idempotent producer has at most 5 requests in flight per connection: with 5
    waiting it sends nothing more, even for a partition that has nothing outstanding
    (partition 0 here; with more partitions than 5 some always wait in the client), so
    the batch is sealed then ("waiting"), not after batch.ms (here 60 s)."""
    with kafka_broker(memq_stack, s3_bucket, [topic], batch_ms=60_000,
                      kafka_listener={"partitions": 16}) as b:  # fmt: skip
        codes, elapsed = _one_then_five(kafka_address(b), topic, pid=7777)
        assert codes == [0] * 6
        assert elapsed < 20, f"answered after {elapsed:.1f} s: waited out batch.ms"
        assert sealed(b, topic) == {"waiting": 2}
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    assert sorted(r[2] for o in objs for r in o.records) == [b"p%d" % p for p in range(6)]


def test_a_request_at_the_in_flight_limit_is_never_split_over_batches(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """The fifth request writes partitions 5, 6 and 7 (the Java client puts several in
    one request): the batch is sealed once all three are in it, not after each."""
    with kafka_broker(memq_stack, s3_bucket, [topic], batch_ms=60_000,
                      kafka_listener={"partitions": 16}) as b:  # fmt: skip
        codes, elapsed = _one_then_five(kafka_address(b), topic, pid=7778, last=(5, 6, 7))
        assert codes == [0] * 8
        assert elapsed < 20, f"answered after {elapsed:.1f} s: waited out batch.ms"
        assert sealed(b, topic) == {"waiting": 2}
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=topic)
    assert len(objs) == 2
    assert sorted(r[2] for o in objs for r in o.records) == [b"p%d" % p for p in range(8)]


def test_a_non_idempotent_connection_with_5_in_flight_may_send_more(
    memq_stack: StackState, s3_bucket: str, topic: str
) -> None:
    """Without idempotence a client may keep more than 5 requests in flight: partition
    0's flow, answered, may send again, so the batch waits for batch.ms."""
    with kafka_broker(memq_stack, s3_bucket, [topic], batch_ms=1500,
                      kafka_listener={"partitions": 16}) as b:  # fmt: skip
        codes, elapsed = _one_then_five(kafka_address(b), topic, pid=-1)
        assert codes == [0] * 6
        assert elapsed >= 1.4, f"answered after {elapsed:.2f} s, before batch.ms"
        assert sealed(b, topic) == {"waiting": 1, "age": 1}


# --- auth -----------------------------------------------------------------------------------


def test_sasl_plain_with_a_memq_token_and_acls(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    from confluent_kafka import KafkaError

    allowed, denied = unique_name("ok"), unique_name("no")
    auth = {"enabled": True, "token_secret": SECRET,
            "acls": [{"principal": "app", "topic": allowed, "ops": ["produce", "consume"]}]}  # fmt: skip
    with kafka_broker(memq_stack, s3_bucket, [allowed, denied], auth=auth) as b:
        token = make_token(SECRET.encode(), "app", 600)
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "app", "sasl.password": token, "message.timeout.ms": 10_000}  # fmt: skip
        ok = produce_confluent(kafka_address(b), allowed, records(5), **sasl)
        assert all(err is None for err, _ in ok)
        ((err, _),) = produce_confluent(kafka_address(b), denied, records(1), **sasl)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
        bad = {**sasl, "sasl.password": make_token(b"another-secret-xxxxxxxx", "app", 600)}
        ((err, _),) = produce_confluent(kafka_address(b), allowed, records(1), **bad)
        assert err is not None, "a token signed with another secret must be refused"
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=allowed)
        assert sum(o.header.record_count for o in objs) == 5


def test_sasl_oauthbearer_with_a_memq_token_as_the_bearer_token(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    """librdkafka's OAUTHBEARER with an application token callback (how Kafka clients
    plug in their identity provider): the bearer token is a MemQ token."""
    from confluent_kafka import KafkaError

    allowed, denied = unique_name("ok"), unique_name("no")
    auth = {"enabled": True, "token_secret": SECRET,
            "acls": [{"principal": "app", "topic": allowed, "ops": ["produce"]}]}  # fmt: skip

    def bearer(secret: bytes) -> dict[str, Any]:
        token = make_token(secret, "app", 600)
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _config: (token, time.time() + 600),
                "message.timeout.ms": 10_000}  # fmt: skip

    with kafka_broker(memq_stack, s3_bucket, [allowed, denied], auth=auth) as b:
        ok = produce_confluent(kafka_address(b), allowed, records(7), **bearer(SECRET.encode()))
        assert len(ok) == 7 and all(err is None for err, _ in ok), ok[0]
        ((err, _),) = produce_confluent(
            kafka_address(b), denied, records(1), **bearer(SECRET.encode())
        )
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
        ((err, _),) = produce_confluent(kafka_address(b), allowed, records(1),
                                        **bearer(b"another-secret-xxxxxxxx"))  # fmt: skip
        assert err is not None, "a token signed with another secret must be refused"
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=allowed)
        assert sum(o.header.record_count for o in objs) == 7
        assert not read_objects(memq_stack.s3_client(), s3_bucket, topic=denied)


def test_sasl_ssl_the_kafka_port_is_tls_with_the_brokers_certificate(
    memq_stack: StackState, s3_bucket: str, unique_name: Any, tmp_path: Path
) -> None:
    """``kafka_listener.tls`` (the default) with a broker ``tls`` section: SASL_SSL with
    the CA verifies the broker and stores the records; a plaintext client gets nothing."""
    from memq.devstack.certs import make_dev_certs

    certs = make_dev_certs(tmp_path / "certs")
    name = unique_name("tls")
    tls = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key),
           "ca_file": str(certs.ca_file)}  # fmt: skip
    auth = {"enabled": True, "token_secret": SECRET,
            "acls": [{"principal": "app", "topic": name, "ops": ["produce"]}]}  # fmt: skip
    with kafka_broker(memq_stack, s3_bucket, [name], tls=tls, auth=auth) as b:
        sasl = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca_file),
                "sasl.mechanism": "PLAIN", "sasl.username": "app",
                "sasl.password": make_token(SECRET.encode(), "app", 600),
                "message.timeout.ms": 20_000}  # fmt: skip
        ok = produce_confluent(kafka_address(b), name, records(9), **sasl)
        assert len(ok) == 9 and all(err is None for err, _ in ok), ok[0]
        plain = {**sasl, "security.protocol": "SASL_PLAINTEXT", "message.timeout.ms": 5_000}
        ((err, _),) = produce_confluent(kafka_address(b), name, records(1), **plain)
        assert err is not None, "a plaintext client must not get through the TLS port"
        objs = read_objects(memq_stack.s3_client(), s3_bucket, topic=name)
        assert sum(o.header.record_count for o in objs) == 9


# --- the docs' examples, kafkajs -------------------------------------------------------------

KAFKAJS = ROOT / ".venv" / "node" / "node_modules" / "kafkajs"
DOC = (ROOT / "docs" / "ingest.md").read_text()


def doc_block(lang: str) -> str:
    (block,) = re.findall(rf"```{lang}\n(.*?)```", DOC.split("## Kafka protocol", 1)[1], re.S)
    return str(block)


def test_the_docs_confluent_kafka_example_runs_as_written(
    memq_stack: StackState, s3_bucket: str
) -> None:
    with kafka_broker(memq_stack, s3_bucket, ["events"]) as b:
        out = subprocess.run(
            [sys.executable, "-c", doc_block("python")], capture_output=True, text=True,
            timeout=120, check=False, env={**os.environ, "MEMQ_KAFKA": kafka_address(b)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        got = read_back(b.address, "events", 1000)
    assert sorted((m.key, m.value, m.headers) for m in got) == sorted(
        (b"user-%d" % (i % 10), b"click %d" % i, (("source", b"web"),)) for i in range(1000)
    )


def kcat() -> str:
    """Debian's kcat: `make install` installs it (as root); without it these tests fail."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: apt-get install -y kcat (make install does as root)")
    out = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0 and "kcat" in out.stdout, out.stdout + out.stderr
    return path


def test_the_docs_kcat_example_runs_as_written(memq_stack: StackState, s3_bucket: str) -> None:
    kcat()
    with kafka_broker(memq_stack, s3_bucket, ["events"]) as b:
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", doc_block("bash")], capture_output=True,
            text=True, timeout=120, check=False, env={**os.environ, "MEMQ_KAFKA": kafka_address(b)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        got = read_back(b.address, "events", 2)
    assert sorted((m.key, m.value, m.headers) for m in got) == [
        (b"user-1", b"login", (("source", b"kcat"),)),
        (b"user-2", b"logout", (("source", b"kcat"),)),
    ]


def test_kafkajs_producer_1000_records_read_back_exactly(broker: BrokerThread, topic: str) -> None:
    """The docs' kafkajs example (idempotent, acks=-1) through node."""
    if shutil.which("node") is None:
        pytest.fail(
            "node is not installed: `make test-deps` as root installs it (apt-get install nodejs npm)"
        )
    if not KAFKAJS.exists():
        pytest.fail("kafkajs is not installed: `make test-deps` (npm install --prefix .venv/node)")
    env = {**os.environ, "NODE_PATH": str(KAFKAJS.parent), "MEMQ_KAFKA": kafka_address(broker),
           "TOPIC": topic, "COUNT": "1000"}  # fmt: skip
    out = subprocess.run(["node", "-e", doc_block("js")], capture_output=True, text=True,
                         timeout=180, check=False, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"sent": 1000}
    got = read_back(broker.address, topic, 1000)
    assert sorted((m.key, m.value, m.headers) for m in got) == sorted(
        (b"key-%d" % i, b"value-%d" % i, (("source", b"kafkajs"),)) for i in range(1000)
    )


KAFKAJS_50K = """
const { Kafka } = require("kafkajs");
const producer = new Kafka({ clientId: "t", brokers: [process.env.MEMQ_KAFKA] })
  .producer({ idempotent: true, maxInFlightRequests: 1 });
const BASE = 1763790000000;
async function main() {
  await producer.connect();
  for (let i = 0; i < 50000; i += 1000) {
    const messages = [];
    for (let j = i; j < i + 1000; j++) {
      messages.push({ key: `k-${j % 89}`, value: Buffer.from(`v-${j}-` + "\\xff".repeat(j % 7), "latin1"),
                      headers: { n: `${j}`, src: "kafkajs" }, timestamp: `${BASE + j}` });
    }
    await producer.send({ topic: process.env.TOPIC, acks: -1, messages });
  }
  await producer.disconnect();
  console.log(JSON.stringify({ sent: 50000 }));
}
main().catch((e) => { console.error(e); process.exit(1); });
"""


def test_kafkajs_producer_50k_records_with_timestamps_read_back_exactly(
    broker: BrokerThread, topic: str, memq_stack: StackState, s3_bucket: str, spark_session: Any
) -> None:
    """kafkajs (idempotent, acks=-1), 50,000 records with their own timestamps: read back
    byte-exact by memq.Consumer and by the Spark source."""
    if shutil.which("node") is None:
        pytest.fail(
            "node is not installed: `make test-deps` as root installs it (apt-get install nodejs npm)"
        )
    if not KAFKAJS.exists():
        pytest.fail("kafkajs is not installed: `make test-deps` (npm install --prefix .venv/node)")
    env = {**os.environ, "NODE_PATH": str(KAFKAJS.parent), "MEMQ_KAFKA": kafka_address(broker),
           "TOPIC": topic}  # fmt: skip
    out = subprocess.run(["node", "-e", KAFKAJS_50K], capture_output=True, text=True,
                         timeout=300, check=False, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"sent": 50_000}
    want = sorted(
        (b"k-%d" % (j % 89), b"v-%d-" % j + b"\xff" * (j % 7),
         (("n", b"%d" % j), ("src", b"kafkajs")), 1_763_790_000_000 + j)
        for j in range(50_000)
    )  # fmt: skip
    got = read_back(broker.address, topic, 50_000)
    assert sorted((m.key, m.value, tuple(sorted(m.headers)), m.timestamp) for m in got) == want
    assert sorted(spark_read_back(spark_session, memq_stack, s3_bucket, broker, topic)) == want


def test_kcat_produces_keyed_records_with_headers_and_reads_the_notifications(
    broker: BrokerThread, topic: str, memq_stack: StackState
) -> None:
    """Debian's kcat (librdkafka), as log shippers and shell users run it: it produces to
    the Kafka port, and reads the notification topic on Kafka, one JSON notification per
    object the consumer read."""
    lines = "".join(f"key-{i}:line {i}\n" for i in range(100))
    out = subprocess.run(
        [kcat(), "-P", "-b", kafka_address(broker), "-t", topic, "-K", ":", "-H", "source=kcat",
         "-X", "acks=all", "-X", "enable.idempotence=true"],
        input=lines, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = read_back(broker.address, topic, 100)
    assert sorted((m.key, m.value, m.headers) for m in got) == sorted(
        (b"key-%d" % i, b"line %d" % i, (("source", b"kcat"),)) for i in range(100)
    )
    nt = broker.config.topics[0].notification_topic(broker.config.cluster)
    out = subprocess.run(
        [kcat(), "-C", "-b", memq_stack.kafka_bootstrap, "-t", nt, "-e", "-q", "-f", "%s\n"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    notes = [decode_notification(line) for line in out.stdout.splitlines()]
    assert sorted(n.key for n in notes) == sorted({m.object_key for m in got})
    assert sum(n.record_count for n in notes) == 100


def test_kafkas_console_producer_keyed_lines_read_back_exactly(
    broker: BrokerThread, topic: str
) -> None:
    """Apache Kafka's own Java producer (kafka-console-producer, from the local stack's
    Kafka jars): idempotent, acks=all, keyed lines to the Kafka port, read back exactly.
    Its request timeout (1.5 s by default in the console producer) is raised: an acks=all
    answer waits for batch.ms, the S3 PUT and the notification, more than that on a
    loaded machine (its retries are answered as duplicates, but only 3 are allowed)."""
    from memq.devstack.kafka import kafka_java

    lines = "".join(f"user-{i % 7}:event {i} \u00e9\n" for i in range(300))
    argv = kafka_java(
        "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", kafka_address(broker),
        "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
        "--producer-property", "acks=all", "--producer-property", "enable.idempotence=true",
        "--producer-property", "request.timeout.ms=30000",
    )  # fmt: skip
    out = subprocess.run(argv, input=lines, capture_output=True, text=True, timeout=180,
                         check=False, encoding="utf-8")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert " ERROR " not in out.stderr, out.stderr[-3000:]
    got = read_back(broker.address, topic, 300)
    assert Counter((m.key, m.value, m.headers) for m in got) == Counter(
        (b"user-%d" % (i % 7), f"event {i} \u00e9".encode(), None) for i in range(300)
    )


# --- the dev stack --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dev_stack_brokers_list_a_kafka_endpoint_that_takes_records(
    memq_stack: StackState, tmp_path: Path, unique_name: Any
) -> None:
    """`memq dev up --kafka-listener-port P` (on this session's servers) starts a
    clustered broker whose Kafka port is P; `memq dev status` names it as where Kafka
    producers write, and the notification Kafka as MemQ's internal queue; an auto-created
    topic takes records through it."""
    env = {**os.environ, "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
           "MEMQ_KAFKA_BOOTSTRAP": memq_stack.kafka_bootstrap,
           "MEMQ_ZK_CONNECT": memq_stack.zk_connect}  # fmt: skip
    d = str(tmp_path / "st")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memq.cli.main", *args, "--state-dir", d],
                              capture_output=True, text=True, env=env, timeout=180, check=False)  # fmt: skip

    def memq(*args: str) -> str:
        out = run(*args)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    port = free_port()
    memq("dev", "up", "--no-auditor", "--kafka-listener-port", str(port))
    try:
        doc = json.loads(memq("dev", "status", "--json"))
        (b,) = doc["brokers"]
        assert b["kafka_listener"] == b["kafka"] == f"127.0.0.1:{port}" and b["healthy"]
        assert doc["kafka_listener"]["bootstrap_servers"] == f"127.0.0.1:{port}"
        assert doc["kafka_listener"]["brokers"] == {"broker-1": f"127.0.0.1:{port}"}
        # the notification Kafka keeps its keys, and says what it is
        assert doc["kafka"]["bootstrap"] == doc["notification_kafka"]["bootstrap"]
        assert doc["kafka"]["bootstrap"] == memq_stack.kafka_bootstrap
        assert "internal notification queue" in doc["kafka"]["role"]
        text = " ".join(memq("dev", "status").split())
        assert (
            f"Kafka producers write to MemQ at (bootstrap.servers): 127.0.0.1:{port} "
            "(broker-1)" in text
        )
        assert (
            "MemQ's internal notification Kafka (pointers to stored objects; records "
            f"produced there are not in MemQ): {memq_stack.kafka_bootstrap}" in text
        )
        assert "Kafka bootstrap" not in text
        # another Kafka port on the running stack: an error saying what to do
        other = run("dev", "up", "--no-auditor", "--kafka-listener-port", str(port + 1))
        assert other.returncode == 1 and "Traceback" not in other.stderr, other.stderr
        assert (
            f"already running with its Kafka port at 127.0.0.1:{port} (asked for "
            f"--kafka-listener-port {port + 1})" in " ".join(other.stderr.split())
        )
        topic = unique_name("dev")
        reports = produce_confluent(doc["kafka_listener"]["bootstrap_servers"], topic,
                                    records(20), **{"message.timeout.ms": 60_000})  # fmt: skip
        assert len(reports) == 20 and all(err is None for err, _ in reports), reports[0]
        # 64 partitions, so that the Java client's defaults (one 16 KiB batch per
        # partition per request) make 1 MiB requests
        from confluent_kafka import Producer

        md = Producer({"bootstrap.servers": doc["kafka_listener"]["bootstrap_servers"]})
        assert len(md.list_topics(topic, timeout=30).topics[topic].partitions) == 64
        # ...and its HTTP ingest URL takes records too (the topic has its writer now)
        assert b["ingest"] == b["http"] + "/v1/topics/{topic}/records"
        req = urllib.request.Request(
            b["ingest"].format(topic=topic) + "?acks=all", data=b"one\ntwo\n",
            method="POST", headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
        assert doc["records"] == 2 and doc["stored"]["key"], doc
        # A topic auto-created by an HTTP request: that very request is answered once the
        # governor assigned the topic (curl does not retry a 421 NOT_WRITER).
        req = urllib.request.Request(
            b["ingest"].format(topic=unique_name("dev-http")) + "?acks=all", data=b"first\n",
            method="POST", headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
        assert doc["records"] == 1 and doc["stored"]["key"], doc
    finally:
        memq("dev", "down")


# --- clients at the wrong port ---------------------------------------------------------------


def memq_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memq.cli.main", *args], capture_output=True,
                          text=True, timeout=120, check=False, env=env)  # fmt: skip


def test_a_kafka_consumer_is_told_to_read_with_memq_and_the_broker_log_stays_bounded(
    broker: BrokerThread, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Kafka consumer (confluent-kafka, a group) on the Kafka port gets one error that
    names MemQ's consumer (it got UNSUPPORTED_VERSION, then looped on "all brokers
    down" while the broker logged a warning a second); it keeps asking for the group's
    coordinator, on the same connection, and the broker logs that once."""
    import logging

    from confluent_kafka import Consumer as KafkaConsumer

    assert broker.server is not None
    reg = broker.server.metrics.registry
    caplog.set_level(logging.INFO, logger="memq.broker")

    def asked() -> float:
        labels = {"type": "KAFKA_FINDCOORDINATOR", "status": "INVALID_REQUEST"}
        return reg.get_sample_value("memq_requests_total", labels) or 0.0

    c = KafkaConsumer({"bootstrap.servers": kafka_address(broker), "group.id": "kafka-reader",
                       "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        c.subscribe([topic])
        errors = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not errors or asked() < 4):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
    finally:
        c.close()
    assert errors, "the consumer was never told"
    assert all(e.code() == 42 for e in errors), errors  # INVALID_REQUEST, once per cause
    assert "MemQ's Kafka port takes Kafka producers only" in errors[0].str(), errors[0].str()
    assert "memq consume" in errors[0].str()
    assert asked() >= 4  # it keeps asking (about once a second)...
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("memq.broker")]
    about = [m for m in lines if "coordinator" in m or "kafka-reader" in m]
    assert len(about) == 1, about  # ...and the broker said so once
    assert "asked for the group coordinator of 'kafka-reader'" in about[0]
    assert not [m for m in lines if "closing" in m], lines  # (no reconnect loop)


def test_kcat_reading_the_kafka_port_stops_with_an_error(
    broker: BrokerThread, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kcat as a consumer: with a group (-G) it prints the FindCoordinator error naming
    MemQ's consumer, without one (-C) that reading offsets is not supported; either
    exits 1 at once, and the broker logs at most one line about it."""
    import logging

    caplog.set_level(logging.INFO, logger="memq.broker")
    group = subprocess.run([kcat(), "-b", kafka_address(broker), "-G", "kcat-reader", topic],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert group.returncode == 1, group.stderr
    assert (
        "FindCoordinator response error: MemQ's Kafka port takes Kafka producers only"
        in group.stderr
        and "memq consume" in group.stderr
    )
    plain = subprocess.run([kcat(), "-b", kafka_address(broker), "-C", "-t", topic, "-e"],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert plain.returncode == 1 and "not supported by broker" in plain.stderr, plain.stderr
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("memq.broker")]
    assert len([m for m in lines if "kcat-reader" in m or "closing" in m]) <= 1, lines


def test_memq_produce_at_a_kafka_port_names_the_mistake(
    broker: BrokerThread, memq_stack: StackState
) -> None:
    """MemQ's own client at a Kafka address (the broker's Kafka port, the stack's
    notification Kafka) or at the HTTP port: one typed error naming what answered and
    where MemQ clients go (it said "frame CRC mismatch... the connection corrupted
    data", or retried until its timeout)."""
    assert broker.server is not None
    http = f"127.0.0.1:{broker.server.http_port}"
    for address, kind in ((kafka_address(broker), "Kafka"),
                          (memq_stack.kafka_bootstrap, "Kafka"), (http, "HTTP")):  # fmt: skip
        t0 = time.monotonic()
        out = memq_cli("produce", "-b", address, "--topic", "t", "--count", "1", "--timeout", "60")
        assert out.returncode == 1, out.stdout + out.stderr
        text = " ".join(out.stderr.split())
        assert f"{address} speaks the {kind} protocol" in text, text
        assert "MemQ clients connect to a broker's MemQ port (`memq dev status`" in text, text
        assert "CRC" not in text and "Traceback" not in text, text
        assert time.monotonic() - t0 < 50, "it retried a wrong address until its timeout"
    from memq import Producer
    from memq.errors import WrongProtocolError

    with (
        Producer({"bootstrap.servers": kafka_address(broker)}) as p,
        pytest.raises(WrongProtocolError, match="speaks the Kafka protocol"),
    ):
        p.produce("t", b"x").result(timeout=60)


def test_a_kafka_client_at_the_memq_port_is_logged_once_saying_where_to_go(
    broker: BrokerThread, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The reverse: a Kafka producer pointed at the MemQ port; the broker names the
    mistake (once, though the client keeps reconnecting) and nothing is stored."""
    import logging

    from confluent_kafka import Producer as KafkaProducer

    caplog.set_level(logging.INFO, logger="memq.broker")
    p = KafkaProducer({"bootstrap.servers": broker.address, "message.timeout.ms": 3000,
                       "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100})  # fmt: skip
    failed: list[Any] = []
    p.produce(topic, b"lost", on_delivery=lambda err, _m: failed.append(err))
    assert p.flush(30) == 0
    assert failed and failed[0] is not None
    lines = [r.getMessage() for r in caplog.records if "Kafka client" in r.getMessage()]
    assert len(lines) == 1, lines
    assert (
        "a Kafka client (a request of Kafka api key 18) on the MemQ port: Kafka clients "
        "write to this broker's Kafka port (kafka_listener" in lines[0]
    )
