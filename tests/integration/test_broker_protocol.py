"""Bad input, limits, back-pressure and the HTTP side port of a real broker."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator

import pytest

from memq import Producer
from memq.client.connection import ClientConnection
from memq.devstack import StackState
from memq.devstack.faultproxy import FaultProxy
from memq.errors import (
    InvalidRequestError,
    MemqFormatError,
    MessageTooLargeError,
    StatusCode,
    ThrottledError,
    UnknownRequestTypeError,
    UnknownTopicError,
)
from memq.formats import (
    Compression,
    FrameDecoder,
    RequestType,
    Response,
    encode_block,
    encode_request,
    parse_frame,
)
from memq.protocol import Ack, encode_write_header
from memq.run.broker import BrokerThread
from memq.testing import broker_config

from .helpers import read_objects


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack,
        bucket=s3_bucket,
        topics=["t"],
        batch_ms=100,
        batch_bytes=512 * 1024,
        max_frame_bytes=1 << 20,
        idle_timeout_s=2.0,
        max_connections=20,
    )
    with BrokerThread(cfg) as b:
        yield b


def _block(value: bytes = b"x", seq: int = 0) -> bytes:
    return encode_block([(1, None, value, None)], producer_id=5, epoch=0, sequence=seq)


async def _request(address: str, req_type: int, *body: bytes) -> Response:
    conn = await ClientConnection.open(address)
    try:
        return await conn.request(req_type, *body, timeout=20)
    finally:
        conn.close()


def _raw_exchange(
    address: str, payload: bytes, *, read_timeout: float = 10.0
) -> tuple[list[Response], bool]:
    """Send raw bytes; return the responses read and whether the broker closed the socket."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=read_timeout) as s:
        s.sendall(payload)
        dec = FrameDecoder()
        out: list[Response] = []
        closed = False
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    closed = True
                    break
                dec.feed(data)
                out.extend(
                    r for r in (parse_frame(f) for f in dec.frames()) if isinstance(r, Response)
                )
                if out and not closed:
                    s.settimeout(1.0)  # answers arrived: only wait briefly for a close
        except TimeoutError:
            pass
        return out, closed


def _assert_still_serving(broker: BrokerThread) -> None:
    with Producer({"bootstrap.servers": broker.address, "linger.ms": 1}) as p:
        assert p.produce("t", b"still alive").result(30).key


def test_unknown_topic_is_a_typed_non_retriable_error(broker: BrokerThread) -> None:
    with Producer({"bootstrap.servers": broker.address, "delivery.timeout.ms": 30_000}) as p:
        err = p.produce("no-such-topic", b"x").exception(30)
    assert isinstance(err, UnknownTopicError) and "memq topic create" in str(err)


def test_oversize_block_and_record(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    big = encode_block(
        [(1, None, os.urandom(600_000), None)],
        producer_id=1,
        epoch=0,
        sequence=0,
        compression=Compression.NONE,
    )
    with pytest.raises(MessageTooLargeError):
        asyncio.run(
            _request(
                broker.address, RequestType.WRITE, encode_write_header("t", Ack.ALL), big + big
            )
        )
    # The producer refuses a record that cannot fit the topic's limit before sending it.
    cfg = broker_config(
        memq_stack,
        bucket=s3_bucket,
        topics=["small"],
        topic_overrides={"max_block_bytes": 64 * 1024},
    )
    with BrokerThread(cfg) as b, Producer({"bootstrap.servers": b.address}) as p:
        with pytest.raises(
            MessageTooLargeError, match=r"takes: 65456 bytes .*max_block_bytes 65536"
        ):
            p.produce("small", b"x" * 100_000)
        for values in ([b"x" * 100_000] * 3, [b"x", b"x" * 100_000]):  # (one size, mixed)
            with pytest.raises(MessageTooLargeError, match="a record of 100"):
                p.produce_batch("small", values)
        assert p.produce("small", b"x" * 1000).result(30).key
    # The largest record is the topic's, not batch.size: a larger one goes in a block of
    # its own (as Kafka sends a record larger than batch.size alone), read back whole.
    with (
        BrokerThread(cfg) as b,
        Producer({"bootstrap.servers": b.address, "batch.size": 16_384}) as p,
    ):
        big = os.urandom(60_000)
        key = p.produce("small", big).result(30).key
        keyed = p.produce("small", big[::-1], key=b"k").result(30).key
        assert p.produce_batch("small", [b"s", big, b"t"]).result(30) == 3
        stored = [
            r[2]
            for o in read_objects(memq_stack.s3_client(), s3_bucket, topic="small")
            for r in o.records
        ]
        assert stored.count(big) == 2 and stored.count(big[::-1]) == 1 and key and keyed
    _assert_still_serving(broker)


def test_crc_mismatch_is_corrupt_message_and_connection_stays_usable(broker: BrokerThread) -> None:
    bad = bytearray(_block(b"payload"))
    bad[-1] ^= 0x01

    async def go() -> None:
        conn = await ClientConnection.open(broker.address)
        with pytest.raises(MemqFormatError, match="CRC"):
            await conn.request(RequestType.WRITE, encode_write_header("t", Ack.ALL), bytes(bad))
        ok = await conn.request(
            RequestType.WRITE, encode_write_header("t", Ack.ALL), _block(b"fine", 1)
        )
        assert ok.status == StatusCode.OK
        conn.close()

    asyncio.run(go())


def test_garbage_truncated_and_oversized_frames(broker: BrokerThread) -> None:
    # Garbage: whatever its first 4 bytes say, the broker answers with a typed error or
    # closes; it never crashes or waits forever.
    resps, closed = _raw_exchange(broker.address, b"\xff\xfe" + os.urandom(62))
    assert (
        closed
        and resps
        and resps[0].status in {StatusCode.MESSAGE_TOO_LARGE, StatusCode.CORRUPT_MESSAGE}
    )
    # Oversized by announcement: the broker never waits for 100 MB.
    resps, closed = _raw_exchange(broker.address, (100 << 20).to_bytes(4, "big") + b"\x00" * 12)
    assert closed and resps and resps[0].status == StatusCode.MESSAGE_TOO_LARGE
    # Too-small length is malformed.
    resps, closed = _raw_exchange(broker.address, (3).to_bytes(4, "big") + b"abc")
    assert closed and resps[0].status == StatusCode.CORRUPT_MESSAGE
    # A frame cut short, then the client goes away: nothing to answer, broker unharmed.
    frame = encode_request(RequestType.PING, 9, b"hello")
    resps, closed = _raw_exchange(broker.address, frame[:-2], read_timeout=0.5)
    assert resps == []
    # Bad frame CRC: CORRUPT_MESSAGE naming the request id, then close.
    bad = bytearray(frame)
    bad[-1] ^= 1
    resps, closed = _raw_exchange(broker.address, bytes(bad))
    assert closed and (resps[0].request_id, resps[0].status) == (9, StatusCode.CORRUPT_MESSAGE)
    _assert_still_serving(broker)


def test_http_on_the_memq_port_is_told_where_http_is(broker: BrokerThread) -> None:
    """curl at the MemQ protocol port gets an HTTP 400 naming the HTTP port (it got a
    closed connection, the broker logging a 1.2 GB frame)."""
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{broker.address}/metrics", timeout=10)
    assert e.value.code == 400
    body = e.value.read().decode()
    assert "MemQ protocol port" in body and "on its HTTP port" in body, body
    _assert_still_serving(broker)


def test_wrong_protocol_version_and_unknown_type(broker: BrokerThread) -> None:
    frame = bytearray(encode_request(RequestType.PING, 41, b""))
    frame[8] = 7  # version
    frame[4:8] = zlib.crc32(frame[8:]).to_bytes(4, "big")
    ping = encode_request(RequestType.PING, 42, b"after")
    resps, _closed = _raw_exchange(broker.address, bytes(frame) + ping)
    assert [(r.request_id, r.status) for r in resps] == [
        (41, StatusCode.UNSUPPORTED_VERSION),
        (42, StatusCode.OK),
    ]
    assert "version 7" in resps[0].error and resps[1].body == b"after"
    with pytest.raises(UnknownRequestTypeError):
        asyncio.run(_request(broker.address, 999))
    with pytest.raises((InvalidRequestError, MemqFormatError)):
        asyncio.run(_request(broker.address, RequestType.METADATA, b"\xc1not msgpack"))
    with pytest.raises(InvalidRequestError, match="ack mode"):
        asyncio.run(_request(broker.address, RequestType.WRITE, b"\x07\x00\x00\x01t" + _block()))


def test_idle_and_slowloris_connections_are_cut(broker: BrokerThread) -> None:
    host, port = broker.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(RequestType.PING, 1, b"x")[:5])  # a frame that never completes
        assert s.recv(10) == b""  # closed by the broker after idle_timeout_s (2 s)
    _assert_still_serving(broker)


def test_connection_limit(broker: BrokerThread) -> None:
    host, port = broker.address.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(25)]
    try:
        refused = 0
        for s in socks:
            s.settimeout(0.5)
            try:
                refused += s.recv(1) == b""
            except ConnectionResetError:
                refused += 1
            except TimeoutError:
                pass  # accepted and idle: a normal connection
        assert refused >= 5  # max_connections=20: the surplus is refused
    finally:
        for s in socks:
            s.close()
    _assert_still_serving(broker)


def test_back_pressure_throttles_when_storage_is_slow(
    memq_stack: StackState, s3_bucket: str
) -> None:
    host, port = memq_stack.s3_endpoint.removeprefix("http://").rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        cfg = broker_config(
            memq_stack,
            bucket=s3_bucket,
            topics=["bp"],
            s3_endpoint=proxy.url,
            batch_bytes=64 * 1024,
            batch_ms=20,
            ring_size=2,
            throttle_timeout_ms=300,
        )
        with BrokerThread(cfg) as b:
            proxy.set_mode("stall")

            async def flood() -> list[BaseException | None]:
                conn = await ClientConnection.open(b.address)
                hdr = encode_write_header("bp", Ack.ALL)
                reqs = [
                    conn.request(RequestType.WRITE, hdr, _block(os.urandom(40_000), i), timeout=30)
                    for i in range(8)
                ]
                out = await asyncio.gather(*reqs, return_exceptions=True)
                conn.close()
                return [None if not isinstance(r, BaseException) else r for r in out]

            results = asyncio.run(flood())
            throttled = [r for r in results if isinstance(r, ThrottledError)]
            assert throttled, results
            assert "no free batch buffer" in str(throttled[0])
            proxy.set_mode("pass")
            with Producer({"bootstrap.servers": b.address}) as p:
                assert p.produce("bp", b"after").result(60).key


def test_http_metrics_health_and_ready(broker: BrokerThread) -> None:
    _assert_still_serving(broker)
    assert broker.server is not None
    base = f"http://127.0.0.1:{broker.server.http_port}"
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        text = r.read().decode()
    for name in (
        "memq_requests_total",
        "memq_received_bytes_total",
        "memq_batches_sealed_total",
        "memq_batch_bytes_bucket",
        "memq_upload_seconds_bucket",
        "memq_ack_seconds_bucket",
        "memq_buffers_in_use",
        "memq_connections",
    ):
        assert name in text, name
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
        assert json.loads(r.read())["status"] == "ok"
    with urllib.request.urlopen(f"{base}/readyz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"{base}/status", timeout=5) as r:
        assert "t" in json.loads(r.read())["topics"]
