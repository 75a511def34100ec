"""Whole objects received into reused buffers (``read_whole``) against real servers: the
bytes are the object's, a buffer is never reused while anything refers to it, a body cut
short is a typed error, and connections stay pooled."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.config import FilesystemConfig, S3Config
from memq.devstack import StackState
from memq.errors import ObjectNotFoundError, StorageError
from memq.run.broker import BrokerThread
from memq.storage_handlers.filesystem import FilesystemReader, FilesystemWriter
from memq.storage_handlers.receive import ReceiveBuffers
from memq.storage_handlers.s3 import S3Reader, S3Writer
from memq.testing import broker_config

MiB = 1 << 20


def s3_config(stack: StackState, bucket: str, endpoint: str | None = None) -> S3Config:
    return S3Config(
        bucket=bucket, endpoint_url=endpoint or stack.s3_endpoint, region="us-east-1",
        attempts=2, backoff_ms=10, backoff_max_ms=20, read_timeout_ms=500,
    )  # fmt: skip


def test_s3_objects_arrive_in_reused_buffers_over_pooled_connections(
    memq_stack: StackState, s3_bucket: str
) -> None:
    cfg = s3_config(memq_stack, s3_bucket)
    objects = [bytes([i]) * (2 * MiB - i) + b"end%d" % i for i in range(6)]
    writer = S3Writer(cfg, "c")
    keys = [writer.store("t", f"b{i}", 1_763_790_000_000, o).key for i, o in enumerate(objects)]
    reader, pool = S3Reader(cfg), ReceiveBuffers(8 * MiB)
    held = reader.read_whole(s3_bucket, keys[0], len(objects[0]), pool)
    assert isinstance(held, memoryview) and held.readonly and isinstance(held.obj, bytearray)
    for key, obj in zip(keys[1:], objects[1:], strict=True):
        got = reader.read_whole(s3_bucket, key, len(obj), pool)
        assert isinstance(got, memoryview) and got == obj
        del got  # (dropped: its buffer is reused by the next GET)
    assert held == objects[0]  # kept all along: never written over
    assert (pool.made, pool.reused) == (2, 4)
    # One connection served every GET (each went back to urllib3's pool when read).
    conns = reader.client._endpoint.http_session._manager.connection_from_url(
        memq_stack.s3_endpoint
    )
    assert conns.num_connections == 1
    # Another size than the notification's: the object comes back whole, as bytes.
    other = reader.read_whole(s3_bucket, keys[1], len(objects[1]) - 1, pool)
    assert type(other) is bytes and other == objects[1]
    with pytest.raises(ObjectNotFoundError):
        reader.read_whole(s3_bucket, "no/such/key", 2 * MiB, pool)


def test_filesystem_objects_arrive_in_reused_buffers(tmp_path: Path) -> None:
    writer = FilesystemWriter(FilesystemConfig(root=str(tmp_path)), "c")
    obj = b"memq" * (MiB // 2)
    stored = writer.store("t", "b1", 1_763_790_000_000, obj)
    reader, pool = FilesystemReader(), ReceiveBuffers(8 * MiB)
    first = reader.read_whole(stored.bucket, stored.key, len(obj), pool)
    assert isinstance(first, memoryview) and first.readonly and first == obj
    del first
    again = reader.read_whole(stored.bucket, stored.key, len(obj), pool)
    assert again == obj and pool.reused == 1
    short = reader.read_whole(stored.bucket, stored.key, len(obj) + 1, pool)
    assert type(short) is bytes and short == obj  # (the caller's size check reports it)
    with pytest.raises(ObjectNotFoundError):
        reader.read_whole(stored.bucket, "t/none", len(obj), pool)


class CutServer:
    """An HTTP server that answers every GET with ``Content-Length: size`` and then
    sends only ``sent`` bytes of it: closing the connection (``then="close"``) or
    keeping it open without a word more (``then="hang"``)."""

    def __init__(self, size: int, sent: int, then: str) -> None:
        self.size, self.sent, self.then = size, sent, then
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.requests = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._open.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    break
                data += more
            self.requests += 1
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Length: %d\r\n\r\n" % self.size + b"x" * self.sent
            )
            if self.then == "close":
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self._open:
            c.close()


@pytest.fixture
def cut_server(request: pytest.FixtureRequest) -> Iterator[CutServer]:
    server = CutServer(*request.param)
    yield server
    server.close()


@pytest.mark.parametrize(
    "cut_server", [(2 * MiB, MiB, "close"), (2 * MiB, MiB, "hang")], indirect=True
)
def test_a_body_cut_short_is_a_typed_error_after_the_retries(
    memq_stack: StackState, cut_server: CutServer
) -> None:
    reader = S3Reader(s3_config(memq_stack, "bucket", cut_server.url))
    pool = ReceiveBuffers(8 * MiB)
    t0 = time.monotonic()
    with pytest.raises(StorageError) as e:
        reader.read_whole("bucket", "k", 2 * MiB, pool)
    if cut_server.then == "close":
        assert f"ended after {MiB} of {2 * MiB} bytes" in str(e.value)
    else:
        assert "Timeout" in str(e.value) or "timed out" in str(e.value)
    assert cut_server.requests == 2 and time.monotonic() - t0 < 10  # (attempts=2)
    # The failed GET's buffer may still be referred to by the error's traceback (the
    # retry log's record keeps it here): the pool then makes another, within its bound.
    assert pool.take(2 * MiB) is not None and pool.held_bytes <= 8 * MiB


def test_consumer_arrow_batches_kept_by_the_caller_stay_intact_while_buffers_recycle(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    """Objects of ~1 MiB (pooled), a prefetch bound of 4 MiB (few buffers): the caller
    keeps every other batch's Arrow table (3,000 records: three objects or so) and drops
    the rest, so buffers are reused while kept tables point into others; every kept
    value is still what was sent."""
    import pyarrow as pa

    topic = unique_name("rb")
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=1536 * 1024, batch_ms=200,
        partitions=1,
    )  # fmt: skip
    sent = [b"rb-%06d-" % i + bytes([i % 251]) * 1000 for i in range(24_000)]
    with BrokerThread(cfg) as b:
        conf = {"bootstrap.servers": b.address, "linger.ms": 5, "compression.type": "none"}
        with Producer(conf) as p:
            p.produce_batch(topic, sent)
            assert p.flush(60) == 0
        conf = {
            "bootstrap.servers": b.address,
            "auto.offset.reset": "earliest",
            "prefetch.bytes": 4 * MiB,
        }
        kept: list[pa.Table] = []
        seen: Counter[bytes] = Counter()
        with Consumer(conf) as c:
            c.assign([(topic, 0, 0)])
            deadline = time.monotonic() + 60
            n = 0
            while sum(seen.values()) < len(sent) and time.monotonic() < deadline:
                batch = c.consume_batch(3000, 1.0)
                if not batch:
                    continue
                table = batch.to_arrow()
                seen.update(table.column("value").to_pylist())
                if n % 2 == 0:
                    kept.append(table)
                n += 1
                del batch, table
            buffers = c._prefetch._buffers
    assert seen == Counter(sent)
    assert buffers.made >= 1 and buffers.reused >= 3  # (the path ran, and recycled)
    kept_values = [v for t in kept for v in t.column("value").to_pylist()]
    assert len(kept_values) >= len(sent) // 3
    assert Counter(kept_values) <= Counter(sent)  # nothing kept was written over
