"""kcat-like `memq produce` / `memq consume` against the session's local stack: per-line
keys (--key-separator), headers (-H), producer settings (-X), base64 values and keys."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

from memq.devstack import StackState

FAST_GROUP = ("-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000")


def memq(stack: StackState, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    if args[0] == "consume":
        args = (*args, "--from-beginning", "--no-commit", *FAST_GROUP)
    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        input=stdin,
        capture_output=True,
        timeout=180,
        env={**os.environ, "MEMQ_STATE_DIR": stack.state_dir},
        check=False,
    )


def consume_json(stack: StackState, topic: str, n: int) -> list[dict[str, Any]]:
    proc = memq(stack, "consume", "-t", topic, "-g", f"{topic}-json", "--max", str(n), "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_keys_and_headers_from_lines_come_back_exactly(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("kcat")
    lines = [
        "user-1:first",
        "user-2:a:value:with:the:separator",  # only the first separator splits
        "no separator here",  # no key
        ":empty key",  # an empty key is no key
        "user-3:",  # an empty value
        "ключ:значение ✓",  # UTF-8 both sides
    ]
    proc = memq(
        memq_stack,
        "produce", "-t", topic, "--key-separator", ":",
        "-H", "trace=abc-123", "-H", "team=data=eng", "-H", "empty=",
        "-X", "linger.ms=1", "-X", "client.id=kcat-test",
        stdin=("\n".join(lines) + "\n").encode(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    got = consume_json(memq_stack, topic, len(lines))
    headers = {"trace": "abc-123", "team": "data=eng", "empty": ""}
    assert all(r["headers"] == headers and r["headers_b64"] is None for r in got)
    assert all(r["key_b64"] is None and r["value_b64"] is None for r in got)
    assert sorted((r["key"] or "", r["value"]) for r in got) == sorted(
        [
            ("user-1", "first"),
            ("user-2", "a:value:with:the:separator"),
            ("", "no separator here"),
            ("", "empty key"),
            ("user-3", ""),
            ("ключ", "значение ✓"),
        ]
    )
    assert {r["value"]: r["key"] for r in got}["no separator here"] is None
    assert {r["value"]: r["key"] for r in got}["empty key"] is None

    # raw output with --key-separator prints the lines `memq produce -K` reads.
    proc = memq(memq_stack, "consume", "-t", topic, "-g", f"{topic}-raw", "--max", str(len(lines)), "-K", ":")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    expected = [
        ln if not ln.startswith(":") and ":" in ln else ":" + ln.lstrip(":") for ln in lines
    ]
    assert sorted(proc.stdout.decode().splitlines()) == sorted(expected)


def test_base64_round_trips_every_byte_value(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("b64")
    values = [bytes([i]) for i in range(256)] + [bytes(range(256)), b"", b"\n\r\n"]
    keys = [bytes([255 - i, 0x0A]) for i in range(256)] + [bytes(range(256)), None, b"\x00"]
    stdin = b"".join(
        (base64.b64encode(k) if k is not None else b"") + b" " + base64.b64encode(v) + b"\n"
        for k, v in zip(keys, values, strict=True)
    )
    proc = memq(
        memq_stack,
        "produce", "-t", topic, "-K", " ", "--key-format", "base64", "--value-format", "base64",
        "-H", "kind=binary", "-X", "acks=all",
        stdin=stdin,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    sent = sorted(zip(keys, values, strict=True), key=repr)

    # json: binary keys and values as key_b64 / value_b64, text ones as text.
    got = consume_json(memq_stack, topic, len(values))
    assert len(got) == len(values)

    def field(r: dict[str, Any], name: str) -> bytes | None:
        if r[f"{name}_b64"] is not None:
            return base64.b64decode(r[f"{name}_b64"])
        return None if r[name] is None else r[name].encode()

    assert sorted(((field(r, "key"), field(r, "value")) for r in got), key=repr) == sent
    assert all(r["headers"] == {"kind": "binary"} for r in got)

    # raw + base64: one line per record, decodable back to the exact bytes.
    proc = memq(
        memq_stack,
        "consume", "-t", topic, "-g", f"{topic}-b64", "--max", str(len(values)),
        "--value-format", "base64", "-K", " ", "--key-format", "base64",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.splitlines()
    assert len(out) == len(values)
    decoded = []
    for line in out:
        k, _, v = line.partition(b" ")
        decoded.append((base64.b64decode(k, validate=True) or None, base64.b64decode(v)))
    assert sorted(decoded, key=repr) == sent

    # Values only: base64 output is what `produce --value-format base64` reads back.
    proc = memq(memq_stack, "consume", "-t", topic, "-g", f"{topic}-v", "--max", str(len(values)), "--value-format", "base64")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    copy = unique_name("b64-copy")
    assert memq(memq_stack, "produce", "-t", copy, "--value-format", "base64", stdin=proc.stdout).returncode == 0  # fmt: skip
    got = consume_json(memq_stack, copy, len(values))
    assert sorted(field(r, "value") or b"" for r in got) == sorted(values)


def test_a_line_that_is_not_base64_is_one_error_and_the_others_are_sent(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("b64-bad")
    stdin = base64.b64encode(b"ok-1") + b"\nnot base64!\n" + base64.b64encode(b"ok-2") + b"\n"
    proc = memq(memq_stack, "produce", "-t", topic, "--value-format", "base64", stdin=stdin)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert "record 2 (11 bytes): MalformedError: value 'not base64!' is not base64" in err
    got = consume_json(memq_stack, topic, 2)
    assert sorted(r["value"] for r in got) == ["ok-1", "ok-2"]
