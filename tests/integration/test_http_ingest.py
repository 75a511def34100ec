"""HTTP ingest on the broker's HTTP port, against real S3 and Kafka: JSON and raw bodies,
acks, idempotency keys, every documented 4xx, and nothing partial stored on rejection."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard

from memq.devstack import StackState
from memq.run.broker import BrokerThread
from memq.security import make_token
from memq.testing import broker_config
from tests.integration.helpers import read_objects, wait_for_objects

SECRET = b"http-ingest-secret-0123456789"


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["events", "lines"], batch_ms=100,
        cluster=f"http-{uuid.uuid4().hex[:8]}", max_frame_bytes=1 << 20, batch_bytes=512 << 10,
    )  # fmt: skip
    with BrokerThread(cfg) as b:
        yield b


def url(b: BrokerThread, path: str) -> str:
    assert b.server is not None
    return f"http://127.0.0.1:{b.server.http_port}{path}"


def post(u: str, body: bytes, ctype: str, **headers: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(u, data=body, method="POST",
                                 headers={"Content-Type": ctype, **headers})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_json_records_are_stored_exactly(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    body = {"records": [
        {"value": "hello", "key": "user-1", "headers": {"trace": "abc", "empty": None},
         "timestamp": 1_763_790_000_000},
        {"value_b64": base64.b64encode(b"\x00\xffbinary").decode(), "key_b64": "AAE="},
        {"value": "plain"},
    ]}  # fmt: skip
    status, doc = post(url(broker, "/v1/topics/events/records?acks=all"),
                       json.dumps(body).encode(), "application/json")  # fmt: skip
    assert status == 200, doc
    assert doc["records"] == 3 and doc["acks"] == "all" and doc["stored"]["key"]
    (obj,) = read_objects(memq_stack.s3_client(), s3_bucket, topic="events")
    assert obj.key == doc["stored"]["key"]
    recs = obj.records
    assert recs[0] == (1_763_790_000_000, b"user-1", b"hello", (("trace", b"abc"), ("empty", None)))
    assert (recs[1][1], recs[1][2]) == (b"\x00\x01", b"\x00\xffbinary")
    assert recs[2][1:] == (None, b"plain", None)


def test_raw_lines_with_curl_and_acks_1(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    out = subprocess.run(
        ["curl", "-sS", "-X", "POST", "-H", "Content-Type: text/plain", "--data-binary",
         "first line\nsecond line\n", url(broker, "/v1/topics/lines/records?acks=1")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc["records"] == 2 and doc["acks"] == "1"
    objs = wait_for_objects(memq_stack.s3_client(), s3_bucket, 2, topic="lines")
    assert [r[2] for o in objs for r in o.records] == [b"first line", b"second line"]


def test_an_idempotency_key_makes_a_retry_a_duplicate(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    body = json.dumps({"records": [{"value": "once"}]}).encode()
    u = url(broker, "/v1/topics/events/records")
    first = post(u, body, "application/json", **{"Idempotency-Key": "req-42"})
    again = post(u, body, "application/json", **{"Idempotency-Key": "req-42"})
    assert first[0] == again[0] == 200
    assert not first[1]["stored"]["duplicate"] and again[1]["stored"]["duplicate"]
    # The same key with another body is no retry: refused (422), nothing stored.
    other = post(u, json.dumps({"records": [{"value": "twice"}]}).encode(), "application/json",
                 **{"Idempotency-Key": "req-42"})  # fmt: skip
    assert other[0] == 422 and other[1]["status"] == "INVALID_REQUEST", other
    assert "Idempotency-Key 'req-42'" in other[1]["error"] and "new key" in other[1]["error"]
    # ...while a new key is new records.
    assert post(u, body, "application/json", **{"Idempotency-Key": "req-43"})[0] == 200
    assert [r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket, topic="events")
            for r in o.records] == [b"once", b"once"]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "ctype", "status", "words"),
    [
        ("/v1/topics/events/records", b"{not json", "application/json", 400, "not valid JSON"),
        ("/v1/topics/events/records", b'{"records": []}', "application/json", 400, "at least one"),
        (
            "/v1/topics/events/records",
            b'{"records": [{"value_b64": "@@"}]}',
            "application/json",
            400,
            "base64",
        ),
        (
            "/v1/topics/events/records",
            b'{"records": [{"value": 5}]}',
            "application/json",
            400,
            "value_b64",
        ),
        ("/v1/topics/events/records", b"x", "image/png", 400, "Content-Type"),
        # (JSON may carry lone surrogates: not text; the broker answered 500)
        (
            "/v1/topics/events/records",
            b'{"records": [{"value": "\\ud800"}]}',
            "application/json",
            400,
            "value is not valid Unicode text",
        ),
        (
            "/v1/topics/events/records",
            b'{"records": [{"value": "v", "key": "\\udc00"}]}',
            "application/json",
            400,
            "key is not valid Unicode text",
        ),
        (
            "/v1/topics/events/records",
            b'{"records": [{"value": "v", "headers": {"a": "\\ud800"}}]}',
            "application/json",
            400,
            "header 'a' is not valid Unicode text",
        ),
        ("/v1/topics/events/records?acks=2", b"x", "text/plain", 400, "acks"),
        ("/v1/topics/nope/records", b"x", "text/plain", 404, "does not exist"),
        ("/v1/topics/bad%20name/records", b"x", "text/plain", 400, "A-Z"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message_and_store_nothing(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str,
    path: str, body: bytes, ctype: str, status: int, words: str,
) -> None:  # fmt: skip
    code, doc = post(url(broker, path), body, ctype)
    assert code == status and words in doc["error"], doc
    assert read_objects(memq_stack.s3_client(), s3_bucket) == []


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/v1/topics/events/records", {}, 405),
        ("PUT", "/v1/topics/events/records", {}, 405),
        ("POST", "/v1/topics//records", {}, 404),
        ("POST", "/v1/topic/events/records", {}, 404),
    ],
)
def test_refusals_by_the_http_server_itself_are_json_too(
    broker: BrokerThread, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    """(they were aiohttp's text/plain pages: '405: Method Not Allowed')"""
    req = urllib.request.Request(url(broker, path), data=b"x" if method != "GET" else None,
                                 method=method, headers={"Content-Type": "text/plain", **headers})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == status and e.value.headers["Content-Type"].startswith("application/json")
    doc = json.loads(e.value.read())
    assert doc["status"] == "INVALID_REQUEST" and "POST /v1/topics/{topic}/records" in doc["error"]
    if status == 405:
        assert "POST" in e.value.headers["Allow"]


def test_an_oversized_body_is_413(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    big = b"x" * (2 << 20)  # over max_frame_bytes (1 MiB)
    req = urllib.request.Request(url(broker, "/v1/topics/lines/records"), data=big,
                                 method="POST", headers={"Content-Type": "text/plain"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 413
    doc = json.loads(e.value.read())
    assert doc["status"] == "MESSAGE_TOO_LARGE" and "max_frame_bytes" in doc["error"], doc
    assert read_objects(memq_stack.s3_client(), s3_bucket) == []


def test_the_largest_record_is_the_topics_before_compression(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    """As for the producer and the Kafka port: a record over the topic's max_block_bytes
    (less the block framing) is refused even when it compresses to almost nothing."""
    u = url(broker, "/v1/topics/lines/records")
    status, doc = post(
        u, gzip.compress(b"x" * 600_000 + b"\n"), "text/plain", **{"Content-Encoding": "gzip"}
    )
    assert status == 413 and doc["status"] == "MESSAGE_TOO_LARGE", doc
    assert "largest record topic 'lines' takes: 524208 bytes" in doc["error"], doc
    status, doc = post(
        u, gzip.compress(b"y" * 500_000 + b"\n"), "text/plain", **{"Content-Encoding": "gzip"}
    )
    assert status == 200, doc
    stored = [r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket) for r in o.records]
    assert stored == [b"y" * 500_000]


def test_compressed_bodies_are_decoded_and_bad_ones_are_json_errors(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    lines = b"".join(b"line-%d\n" % i for i in range(100))
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    encoded = {
        "gzip": gzip.compress(lines),
        "deflate": zlib.compress(lines),
        "zstd": zstandard.ZstdCompressor().compress(lines),
    }
    for enc, body in encoded.items():
        code, doc = post(url(broker, "/v1/topics/lines/records"), body, "text/plain",
                         **{"Content-Encoding": enc})  # fmt: skip
        assert code == 200 and doc["records"] == 100, (enc, doc)
    body = raw_deflate.compress(lines) + raw_deflate.flush()  # deflate without its wrapper
    code, doc = post(url(broker, "/v1/topics/lines/records"), body, "text/plain",
                     **{"Content-Encoding": "deflate"})  # fmt: skip
    assert code == 200 and doc["records"] == 100, doc
    objs = read_objects(memq_stack.s3_client(), s3_bucket, topic="lines")  # (acks=all)
    assert sorted(r[2] for o in objs for r in o.records) == sorted(lines.split() * 4)
    # Refusals are the documented JSON (they were aiohttp's plain text, or a 500), and a
    # small body that decodes past max_frame_bytes is a 413, not a memory blow-up.
    bomb = zstandard.ZstdCompressor().compress(b"x" * (8 << 20))
    for enc, body, status, words in (
        ("br", lines, 400, "Content-Encoding 'br' is not supported"),
        ("deflate", lines, 400, "not valid deflate"),
        ("gzip", encoded["gzip"][:-12], 400, "gzip body is truncated"),
        ("zstd", encoded["zstd"][:-3], 400, "zstd body is truncated"),
        ("zstd", bomb, 413, "max_frame_bytes"),
    ):
        code, doc = post(url(broker, "/v1/topics/events/records"), body, "text/plain",
                         **{"Content-Encoding": enc})  # fmt: skip
        assert code == status and words in doc["error"], (enc, doc)
    assert read_objects(memq_stack.s3_client(), s3_bucket, topic="events") == []


def test_tokens_and_acls(memq_stack: StackState, s3_bucket: str) -> None:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["orders"], batch_ms=50,
        cluster=f"http-acl-{uuid.uuid4().hex[:8]}",
        auth={"enabled": True, "token_secret": SECRET.decode(),
              "acls": [{"principal": "app", "topic": "orders", "ops": ["produce"]}]},
    )  # fmt: skip
    with BrokerThread(cfg) as b:
        u = url(b, "/v1/topics/orders/records")
        assert post(u, b"x", "text/plain")[0] == 401
        denied = post(u, b"x", "text/plain",
                      Authorization=f"Bearer {make_token(SECRET, 'bi', 60)}")  # fmt: skip
        assert denied[0] == 403 and "may not produce" in denied[1]["error"]
        ok = post(u, b"x", "text/plain", Authorization=f"Bearer {make_token(SECRET, 'app', 60)}")
        assert ok[0] == 200, ok
        # only the accepted request was stored (acks=all: its object is there already)
        objs = read_objects(memq_stack.s3_client(), s3_bucket)
        assert [r[2] for o in objs for r in o.records] == [b"x"]
        with urllib.request.urlopen(url(b, "/openapi.json"), timeout=10) as r:
            spec = json.loads(r.read())
        assert "/v1/topics/{topic}/records" in spec["paths"]


def test_the_docs_examples_run_as_written(
    broker: BrokerThread, memq_stack: StackState, s3_bucket: str
) -> None:
    """docs/ingest.md's shell examples, run with $BROKER set, each answered with success."""
    import os
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "ingest.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", doc, re.S)
    assert len(blocks) == 4
    env = {**os.environ, "BROKER": url(broker, "")}
    for script in blocks:
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                             capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert "error" not in json.loads(out.stdout), out.stdout
    objs = wait_for_objects(memq_stack.s3_client(), s3_bucket, 7, topic="events")
    values = [r[2] for o in objs for r in o.records]
    assert sorted(values) == sorted(
        [b'{"clicked": true}', b"\x00\x01\x02", b"order 1001 paid"]
        + [b"first line", b"second line"] * 2
    )


def test_an_unparsable_request_is_logged_without_its_bytes(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    """A header over aiohttp's 8 KB line limit was logged with a traceback quoting it: a
    valid bearer token in it went to the broker log."""
    import logging
    import socket

    assert broker.server is not None
    token = "eyJzdWIiOiJzZWNyZXQtdG9rZW4ifQ.c2lnbmF0dXJl"
    caplog.set_level(logging.INFO, logger="aiohttp.server")
    with socket.create_connection(("127.0.0.1", broker.server.http_port), timeout=10) as s:
        s.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                  + token.encode() + b" " + b"x" * 9000 + b"\r\n\r\n")  # fmt: skip
        answer = s.recv(65536)
    assert answer.split(b" ", 2)[1] == b"400", answer[:100]
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert token not in logged and "Traceback" not in logged
    assert "bad HTTP request refused: LineTooLong" in logged
