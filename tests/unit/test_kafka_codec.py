"""The Kafka listener's codec (memq.broker.kafka_codec): requests built by aiokafka's own
classes decode, responses of every supported version encode, record batches of every
codec become MemQ records byte for byte, and bad bytes are typed errors."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v2, ApiVersionResponse_v0
from aiokafka.protocol.produce import ProduceRequest_v3, ProduceRequest_v8
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from memq.broker.kafka_codec import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    SUPPORTED,
    KafkaError,
    KafkaFrameReceiver,
    UnsupportedApi,
    build_response,
    decode_records,
    decode_request,
    encode_response,
    kafka_error,
    node_id,
    response_class,
    unsupported_response,
)
from memq.broker.kafka_connection import _bearer
from memq.broker.kafka_structs import MetadataRequest_v8
from memq.errors import (
    AuthenticationError,
    ChecksumError,
    FrameTooLargeError,
    MalformedError,
    MemqFormatError,
    NotificationError,
    NotWriterError,
    StorageError,
    ThrottledError,
    UnknownTopicError,
)
from memq.formats.compression import Compression


def frame(req: Any, cid: int = 7, client: bytes = b"test") -> bytes:
    head = struct.pack(">hhih", req.API_KEY, req.API_VERSION, cid, len(client)) + client
    return head + req.encode()


def batch(codec: int = 0, *, pid: int = -1, seq: int = -1, n: int = 3, **kw: Any) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                  base_sequence=seq, batch_size=1 << 20)  # fmt: skip
    for i in range(n):
        b.append(i, timestamp=1_000 + i, key=b"k%d" % i if i else None,
                 value=kw.get("value", b"value-%d" % i), headers=[("h", b"\x00\xff"), ("n", None)])  # fmt: skip
    return bytes(b.build())


def test_requests_built_by_aiokafka_decode() -> None:
    req = decode_request(frame(ApiVersionRequest_v2(), 42), SUPPORTED)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (18, 2, 42, "test")
    meta = decode_request(frame(MetadataRequest_v8(["a", "b"], True, False, False)), SUPPORTED)
    assert list(meta.body.topics) == ["a", "b"] and meta.body.allow_auto_topic_creation
    data = batch()
    prod = decode_request(frame(ProduceRequest_v8(None, -1, 5000, [("t", [(2, data)])])), SUPPORTED)
    assert prod.body.required_acks == -1 and prod.body.topics == [("t", [(2, data)])]


def _receive(rx: KafkaFrameReceiver, stream: bytes, step: int) -> list[bytes]:
    """Feed ``stream`` in pieces of at most ``step`` bytes, as the event loop does
    (into whatever buffer the receiver offers); the requests received."""
    out: list[bytes] = []
    while stream:
        buf = rx.get_buffer()
        n = min(len(buf), step, len(stream))
        buf[:n] = stream[:n]
        stream = stream[n:]
        out.extend(bytes(f) for f in rx.received(n))
    return out


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_the_frame_receiver_splits_requests_under_any_chunking(step: int) -> None:
    big = frame(ProduceRequest_v8(None, -1, 5000, [("t", [(0, batch(n=300, value=b"v" * 900))])]))
    reqs = [frame(ApiVersionRequest_v2(), 1), big, frame(ApiVersionRequest_v2(), 3), big]
    stream = b"".join(struct.pack(">i", len(r)) + r for r in reqs)
    rx = KafkaFrameReceiver(1 << 20)
    assert _receive(rx, stream, step) == reqs and rx.buffered == 0
    # a request received into a buffer of its own decodes from it (no copy before)
    rx = KafkaFrameReceiver(1 << 20)
    buf = rx.get_buffer()
    buf[:4096] = stream[len(reqs[0]) + 4 :][:4096]
    assert rx.received(4096) == []
    rest = big[4096 - 4 :]
    buf = rx.get_buffer()
    assert len(buf) == len(rest)  # exactly the rest of the request
    buf[:] = rest
    (view,) = rx.received(len(rest))
    assert isinstance(view, memoryview) and view.obj is not None and bytes(view) == big
    prod = decode_request(view, SUPPORTED)
    assert prod.body.topics[0][1][0][1] == batch(n=300, value=b"v" * 900)


@pytest.mark.parametrize("length", [-1, 0, 7, (1 << 20) + 1])
def test_the_frame_receiver_refuses_a_length_outside_8_to_max(length: int) -> None:
    ok = frame(ApiVersionRequest_v2(), 1)
    rx = KafkaFrameReceiver(1 << 20)
    stream = struct.pack(">i", len(ok)) + ok + struct.pack(">i", length) + b"\x00" * 100
    assert _receive(rx, stream, 1 << 20) == [ok]  # the request before it still counts
    assert isinstance(rx.broken, FrameTooLargeError) and "allowed 8" in str(rx.broken)


@pytest.mark.parametrize(
    ("key", "version"), [(PRODUCE, 2), (PRODUCE, 9), (METADATA, 9), (1, 4), (99, 0)]
)
def test_unsupported_apis_are_answered_with_the_supported_ranges(key: int, version: int) -> None:
    raw = struct.pack(">hhih", key, version, 5, -1) + b"\x00" * 16
    with pytest.raises(UnsupportedApi) as e:
        decode_request(raw, SUPPORTED)
    answer = unsupported_response(e.value, SUPPORTED)
    (length, cid) = struct.unpack_from(">ii", answer)
    assert length == len(answer) - 4 and cid == 5
    resp = ApiVersionResponse_v0.decode(answer[8:])
    assert resp.error_code == KafkaError.UNSUPPORTED_VERSION
    assert {k: (lo, hi) for k, lo, hi in resp.api_versions} == SUPPORTED


@pytest.mark.parametrize("cut", [3, 8, 12, 20])
def test_truncated_requests_are_malformed(cut: int) -> None:
    raw = frame(ProduceRequest_v3(None, 1, 1000, [("topic", [(0, batch())])]))
    with pytest.raises(MalformedError):
        decode_request(raw[:cut] if cut > 8 else raw[: cut - 1], SUPPORTED)


@pytest.mark.parametrize(
    ("codec", "memq"),
    [(0, Compression.NONE), (1, Compression.GZIP), (2, Compression.ZSTD),
     (3, Compression.LZ4), (4, Compression.ZSTD)],
)  # fmt: skip
def test_every_codec_decodes_byte_exact(codec: int, memq: Compression) -> None:
    recs = decode_records(batch(codec, pid=9, seq=4))
    assert recs.records == [
        (1_000 + i, b"k%d" % i if i else None, b"value-%d" % i, (("h", b"\x00\xff"), ("n", None)))
        for i in range(3)
    ]
    assert (recs.producer_id, recs.producer_epoch, recs.base_sequence) == (9, 0, 4)
    assert recs.compression == memq and not recs.transactional


def test_several_batches_and_null_values() -> None:
    data = batch(n=2) + batch(1, n=1, value=None)
    recs = decode_records(data)
    assert [r[2] for r in recs.records] == [b"value-0", b"value-1", b""]


def test_a_flipped_bit_is_a_checksum_error() -> None:
    data = bytearray(batch(n=5))
    data[-3] ^= 0x10
    with pytest.raises(ChecksumError):
        decode_records(bytes(data))


@pytest.mark.parametrize("where", ["crc", "attributes", "last byte", "second batch"])
def test_a_corrupted_batch_anywhere_is_a_checksum_error(where: str) -> None:
    first = batch(n=2)
    data = bytearray(first + batch(1, n=3))
    at = {"crc": 18, "attributes": 21, "last byte": len(first) - 1, "second batch": -2}[where]
    data[at] ^= 0x01
    with pytest.raises(ChecksumError, match="CRC-32C"):
        decode_records(bytes(data))


def test_the_crc32c_is_kafkas_and_falls_back_to_aiokafkas(monkeypatch: Any) -> None:
    import google_crc32c
    from aiokafka.record.util import calc_crc32c

    from memq.broker import kafka_codec

    data = bytes(range(256)) * 33
    assert kafka_codec._crc32c(data) == calc_crc32c(data)
    monkeypatch.setattr(google_crc32c, "implementation", "python")
    assert kafka_codec._crc32c_function() is calc_crc32c


@pytest.mark.parametrize("cut", [1, 20, 61])
def test_a_truncated_record_set_is_malformed(cut: int) -> None:
    with pytest.raises(MalformedError):
        decode_records(batch()[:-cut])


def test_old_message_formats_are_refused() -> None:
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    legacy.append(0, timestamp=1, key=None, value=b"v")
    with pytest.raises(MalformedError, match="magic 1"):
        decode_records(bytes(legacy.build()))


def test_garbage_record_sets_are_typed_errors() -> None:
    for junk in (b"", b"\x00" * 11, b"\xff" * 80, b"\x00" * 8 + struct.pack(">i", 49) + b"\x00" * 4
                 + b"\x02" + b"\x00" * 44):  # fmt: skip
        with pytest.raises(MemqFormatError):
            decode_records(junk)


@pytest.mark.parametrize("version", range(9))
def test_metadata_responses_of_every_version_encode_and_decode(version: int) -> None:
    doc = {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9094, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [{"error_code": 0, "topic": "t", "is_internal": False,
                    "partitions": [{"error_code": 0, "partition": 0, "leader": 1,
                                    "leader_epoch": 0, "replicas": [1], "isr": [1],
                                    "offline_replicas": []}],
                    "topic_authorized_operations": -(1 << 31)}],
        "cluster_authorized_operations": -(1 << 31),
    }  # fmt: skip
    resp = build_response(METADATA, version, doc)
    framed = encode_response(3, resp)
    back = response_class(METADATA, version).decode(framed[8:])
    assert back.topics[0][1] == "t" and back.brokers[0][2] == 9094


def test_api_versions_answer() -> None:
    resp = build_response(API_VERSIONS, 2, {"error_code": 0, "throttle_time_ms": 0,
                                            "api_versions": [(0, 3, 8)]})  # fmt: skip
    assert resp.encode() == struct.pack(">hihhhi", 0, 1, 0, 3, 8, 0)


def test_memq_errors_map_to_kafka_codes() -> None:
    assert kafka_error(NotWriterError("x")) == KafkaError.NOT_LEADER_OR_FOLLOWER
    assert kafka_error(UnknownTopicError("x")) == KafkaError.UNKNOWN_TOPIC_OR_PARTITION
    assert kafka_error(StorageError("x")) == KafkaError.KAFKA_STORAGE_ERROR
    assert kafka_error(StorageError("x"), produce_version=3) == KafkaError.NOT_LEADER_OR_FOLLOWER
    assert kafka_error(NotificationError("x")) == KafkaError.NOT_ENOUGH_REPLICAS
    assert kafka_error(ThrottledError("x")) == KafkaError.REQUEST_TIMED_OUT
    assert kafka_error(MalformedError("x")) == KafkaError.INVALID_RECORD
    assert kafka_error(ChecksumError("x")) == KafkaError.CORRUPT_MESSAGE
    assert kafka_error(RuntimeError("x")) == KafkaError.UNKNOWN_SERVER_ERROR


def test_node_ids_are_stable_non_negative_int32() -> None:
    ids = {node_id(f"broker-{i}") for i in range(1000)}
    assert len(ids) == 1000 and all(0 <= i < 1 << 31 for i in ids)
    assert node_id("broker-1") == node_id("broker-1")


# --- SASL/OAUTHBEARER client responses (RFC 7628 3.1) ------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b"n,,\x01auth=Bearer tok.en\x01\x01", (b"tok.en", "")),
        (b"n,a=app,\x01host=h\x01port=9\x01auth=bearer  tok \x01\x01", (b"tok", "app")),
        (b"n,,\x01auth=Bearer t\x01ext=1\x01\x01", (b"t", "")),  # librdkafka's extensions
        (b"n,a=a=2Cb=3D,\x01auth=Bearer t\x01\x01", (b"t", "a,b=")),  # saslname escapes
    ],
)
def test_an_oauthbearer_response_gives_its_token_and_authzid(
    message: bytes, expected: tuple[bytes, str]
) -> None:
    assert _bearer(message) == expected


@pytest.mark.parametrize(
    "message",
    [b"", b"auth=Bearer t", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Basic t\x01\x01",
     b"n,,\x01auth=Bearer \x01\x01", b"n,,\x01host=h\x01\x01", b"n,,x\x01auth=Bearer t\x01\x01",
     b"n,,\x01auth=Bearer t\x01", b"n,x,\x01auth=Bearer t\x01\x01", b"\x00app\x00tok"],
)  # fmt: skip
def test_a_malformed_oauthbearer_response_is_refused(message: bytes) -> None:
    with pytest.raises(AuthenticationError, match="OAUTHBEARER"):
        _bearer(message)


def test_the_kafka_port_takes_the_same_largest_record_as_every_way_in() -> None:
    """A compressed record set can hide a record over the topic's limit in a small block:
    it is refused as the producer and HTTP refuse it (the limit counts before compression)."""
    from memq.broker.kafka_connection import _to_block
    from memq.errors import MessageTooLargeError

    def one(value: bytes, codec: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 24)  # fmt: skip
        b.append(0, timestamp=1_763_790_000_000, key=None, value=value, headers=[])
        return bytes(b.build())

    limit = 64 * 1024
    with pytest.raises(MessageTooLargeError, match="largest record this topic takes: 65456"):
        _to_block(one(b"z" * 100_000, 1), (1, 0), 0, block_limit=limit)  # (gzip: ~100 bytes)
    block, n, _, _ = _to_block(one(b"z" * 60_000, 1), (1, 0), 0, block_limit=limit)
    assert n == 1 and len(block) < limit
