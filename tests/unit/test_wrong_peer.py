"""Telling a wrong address from MemQ's answer (issue 43): a MemQ client at a Kafka,
HTTP or TLS port, and a Kafka client at a MemQ port, are named as such instead of
"frame CRC mismatch... the connection corrupted data"; their log lines are bounded."""

from __future__ import annotations

import logging
import struct

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v0

from memq.broker.kafka_codec import (
    SUPPORTED,
    UnsupportedApi,
    decode_request,
    unsupported_response,
)
from memq.broker.loglimit import LogLimiter
from memq.formats.frames import (
    FrameDecoder,
    RequestType,
    encode_request,
    foreign_protocol,
    kafka_api_versions_probe,
    kafka_request,
)


def test_a_kafka_listeners_answer_to_a_memq_request_is_told_by_its_echoed_header() -> None:
    """What the Kafka port answers a MemQ METADATA request (its CRC read as api key and
    version, bytes 8-11 as the correlation id, which the answer echoes)."""
    frame = encode_request(RequestType.METADATA, 1, b"\x90")
    with pytest.raises(UnsupportedApi) as e:
        decode_request(frame[4:], SUPPORTED)
    answer = unsupported_response(e.value, SUPPORTED)
    assert foreign_protocol(answer) == "Kafka"
    dec = FrameDecoder()
    dec.feed(answer)
    assert [f.crc_ok for f in dec.frames()] == [False]  # (what was "CRC mismatch")


def test_http_tls_and_memq_answers() -> None:
    assert foreign_protocol(b"HTTP/1.1 400 Bad Request\r\n") == "HTTP"
    assert foreign_protocol(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46])) == "TLS"
    assert foreign_protocol(encode_request(RequestType.METADATA, 7)) is None  # (a request)
    memq_answer = bytes.fromhex("0000002a") + struct.pack(">I", 0xDEADBEEF) + b"\x01\x01\x00\x02"
    assert foreign_protocol(memq_answer) is None  # MemQ's own, whatever its CRC
    assert foreign_protocol(b"") is None and foreign_protocol(b"\x00\x00") is None


def test_a_kafka_clients_first_request_is_told_at_the_memq_port() -> None:
    body = struct.pack(">hhih", 18, 3, 1, 7) + b"rdkafka" + ApiVersionRequest_v0().encode()
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", len(body) + 8) + body + b"\x00" * 8)
    (frame,) = dec.frames()
    assert kafka_request(frame) == 18  # ApiVersions
    dec = FrameDecoder()
    dec.feed(encode_request(RequestType.WRITE, 1, b"x" * 40))
    (frame,) = dec.frames()
    assert frame.crc_ok and kafka_request(frame) is None
    corrupt = encode_request(RequestType.WRITE, 1, b"x" * 40)[:-1] + b"y"  # (MemQ's, version 1)
    dec = FrameDecoder()
    dec.feed(corrupt)
    (frame,) = dec.frames()
    assert not frame.crc_ok and kafka_request(frame) is None


def test_the_kafka_probe_recognises_only_its_own_answer() -> None:
    request, answered = kafka_api_versions_probe()
    assert struct.unpack(">ihhi", request[:12])[:3] == (10, 18, 0)
    cid = request[8:12]
    assert answered(struct.pack(">i", 40) + cid + b"\x00\x00")
    assert not answered(struct.pack(">i", 40) + b"\x00\x00\x00\x01" + b"\x00\x00")
    assert not answered(b"HTTP/1.1 4")


def test_the_log_limiter_logs_once_per_key_and_interval_then_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    limiter = LogLimiter(interval=60, max_keys=2, clock=lambda: now[0])
    logger = logging.getLogger("memq.test.loglimit")
    caplog.set_level(logging.INFO, logger="memq.test.loglimit")
    assert limiter.log(logger, logging.INFO, "a", "first %s", "x")
    for _ in range(5):
        now[0] += 1
        assert not limiter.log(logger, logging.INFO, "a", "first %s", "x")
    assert limiter.log(logger, logging.INFO, "b", "other")  # another key: its own line
    now[0] += 60
    assert limiter.log(logger, logging.INFO, "a", "first %s", "y")
    assert [r.getMessage() for r in caplog.records] == [
        "first x",
        "other",
        "first y (5 more like this in the last 65 s, not logged)",
    ]
    limiter.log(logger, logging.INFO, "c", "c")  # (a third key: the oldest is forgotten)
    assert len(limiter._seen) == 2
