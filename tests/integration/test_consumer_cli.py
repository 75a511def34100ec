"""memq consume / cat / peek against the local stack's broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from memq import Producer
from memq.devstack import StackState

FAST_GROUP = ("-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000")


def memq(stack: StackState, *args: str, text: bool = True) -> subprocess.CompletedProcess[Any]:
    env = {**os.environ, "MEMQ_STATE_DIR": stack.state_dir}
    if args and args[0] == "consume":
        args = (*args, *FAST_GROUP)
    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        capture_output=True,
        text=text,
        timeout=180,
        env=env,
        check=False,
    )


def test_consume_json_raw_and_no_commit(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("cli")
    broker = memq_stack.extra["brokers"][0]["endpoint"]
    sent = {f"text-{i}".encode(): None for i in range(40)}
    sent[b"\xff\xfe binary"] = None
    with Producer({"bootstrap.servers": broker, "linger.ms": 1}) as p:
        for i, v in enumerate(sent):
            p.produce(
                topic,
                v,
                key=b"k" if i % 2 else None,
                headers={"h": b"\x00\x01"} if i == 3 else None,
            )
        assert p.flush(30) == 0

    proc = memq(
        memq_stack,
        "consume",
        "--topic",
        topic,
        "--group",
        "g1",
        "--from-beginning",
        "--max",
        str(len(sent)),
        "--format",
        "json",
        "--no-commit",
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(lines) == len(sent)
    assert set(lines[0]) == {
        "id",
        "key",
        "key_b64",
        "value",
        "value_b64",
        "headers",
        "headers_b64",
        "timestamp",
    }
    texts = {x["value"] for x in lines if x["value"] is not None}
    assert texts == {v.decode() for v in sent if v.startswith(b"text")}
    (binary,) = [x for x in lines if x["value"] is None]
    assert binary["value_b64"] == "//4gYmluYXJ5"  # base64 of the non-UTF-8 bytes
    with_header = next(x for x in lines if x["headers"])
    assert with_header["headers"] == {"h": "\x00\x01"} and with_header["headers_b64"] is None
    assert all(x["timestamp"].endswith("Z") and len(x["id"].split(":")) == 4 for x in lines)
    assert "records" in proc.stderr and "no (--no-commit)" in proc.stderr

    # Nothing was committed: the same group reads everything again, as raw lines.
    proc = memq(
        memq_stack,
        "consume",
        "--topic",
        topic,
        "--group",
        "g1",
        "--max",
        str(len(sent)),
        "--format",
        "raw",
        text=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == sorted(sent)
    # Now it was committed: nothing new for this group.
    proc = memq(memq_stack, "consume", "--topic", topic, "--group", "g1", "--timeout", "4")
    assert proc.returncode == 0 and proc.stdout == ""


def test_cat_and_peek(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("inspect")
    broker = memq_stack.extra["brokers"][0]["endpoint"]
    with Producer({"bootstrap.servers": broker, "linger.ms": 1}) as p:
        key = p.produce(topic, b"first", key=b"k1").result(30).key
        for i in range(99):
            p.produce(topic, b"more-%d" % i)
        assert p.flush(30) == 0
    uri = f"s3://{memq_stack.bucket}/{key}"
    proc = memq(memq_stack, "cat", uri, "--records", "1")
    assert proc.returncode == 0, proc.stderr
    assert f"topic {topic}" in proc.stderr and "ok" in proc.stderr
    first = json.loads(proc.stdout.splitlines()[0])
    assert first["value"] == "first"
    assert first["id"] == key.rsplit("/", 1)[1] + "/0/0"  # as `memq backfill` writes ids

    s3 = memq_stack.s3_client()
    obj = bytearray(s3.get_object(Bucket=memq_stack.bucket, Key=key)["Body"].read())
    obj[-3] ^= 0x55
    s3.put_object(Bucket=memq_stack.bucket, Key=key, Body=bytes(obj))
    proc = memq(memq_stack, "cat", uri)
    assert proc.returncode == 1 and "CRC" in proc.stderr  # the bad block is reported

    proc = memq(memq_stack, "peek", "--topic", topic, "--last", "3")
    assert proc.returncode == 0, proc.stderr
    assert key.split("/")[-1][:13] in proc.stdout  # the batch id starts with its time
    # peek names each object as `memq cat` takes it (a bare key was read as a local path)
    uris = re.findall(r"s3://\S+", proc.stdout)
    assert uri in uris
    other = next(u for u in uris if u != uri)
    proc = memq(memq_stack, "cat", other)
    assert proc.returncode == 0 and f"topic {topic}" in proc.stderr, proc.stderr
