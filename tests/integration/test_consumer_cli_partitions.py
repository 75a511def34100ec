"""`memq consume` without a group, by partition, and what its summary says it committed
(against the session's local stack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

from memq import Consumer, Producer
from memq.devstack import StackState

FAST_GROUP = ("-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000")


def memq(stack: StackState, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMQ_STATE_DIR": stack.state_dir, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def produce(stack: StackState, topic: str, chunks: list[list[bytes]]) -> None:
    broker = stack.extra["brokers"][0]["endpoint"]
    with Producer({"bootstrap.servers": broker, "linger.ms": 1}) as p:
        for chunk in chunks:
            for v in chunk:
                p.produce(topic, v)
            assert p.flush(30) == 0


def watermarks(stack: StackState, topic: str, partition: int) -> tuple[int, int]:
    broker = stack.extra["brokers"][0]["endpoint"]
    c = Consumer({"bootstrap.servers": broker})
    try:
        return c.get_watermark_offsets(topic, partition)
    finally:
        c.close()


def ids(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [json.loads(x)["id"] for x in proc.stdout.splitlines()]


def test_consume_without_a_group_and_by_partition(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("nogroup")
    chunks = [[b"v%d-%03d" % (i, j) for j in range(50)] for i in range(6)]
    produce(memq_stack, topic, chunks)
    every = {v.decode() for ch in chunks for v in ch}

    # No --group: every partition, from the beginning, no join to wait for, no commits.
    t0 = time.monotonic()
    proc = memq(memq_stack, "consume", "-t", topic, "--format", "json", "--timeout", "6")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 60
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert {x["value"] for x in lines} == every and len(lines) == len(every)
    assert "no group" in proc.stderr and "nothing to commit to" in proc.stderr
    assert "joining group" not in proc.stderr

    # --from-time and --from-beginning work without a group too.
    stamps = sorted(datetime.fromisoformat(x["timestamp"].replace("Z", "+00:00")) for x in lines)
    cut = stamps[len(stamps) // 2]
    ms = int(cut.timestamp() * 1000)
    proc = memq(
        memq_stack, "consume", "-t", topic, "--from-time", str(ms), "--format", "json",
        "--timeout", "6",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    later = {
        x["value"]
        for x in lines
        if datetime.fromisoformat(x["timestamp"].replace("Z", "+00:00")) >= cut
    }
    assert {json.loads(x)["value"] for x in proc.stdout.splitlines()} == later
    proc = memq(memq_stack, "consume", "-t", topic, "--from-beginning", "--timeout", "6")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == sorted(every)

    # --partition P --offset O: that partition from that object on.
    by_part: dict[int, list[str]] = {}
    for x in lines:
        by_part.setdefault(int(x["id"].split(":")[0]), []).append(x["id"])
    part = max(by_part, key=lambda p: len({i.split(":")[1] for i in by_part[p]}))
    offsets = sorted({int(i.split(":")[1]) for i in by_part[part]})
    assert len(offsets) >= 2, by_part
    proc = memq(
        memq_stack, "consume", "-t", topic, "-p", str(part), "-o", str(offsets[1]),
        "--format", "json", "--timeout", "6",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = ids(proc)
    assert got == [i for i in by_part[part] if int(i.split(":")[1]) >= offsets[1]]
    assert f"partition {part}" in proc.stderr

    # --from-message-id: that very record (its partition only).
    target = by_part[part][7]
    proc = memq(
        memq_stack, "consume", "-t", topic, "--from-message-id", target, "--format", "json",
        "--max", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert ids(proc) == by_part[part][7:10]
    # An id that names no record is an error, not "0 records" (nor the next object on).
    p_, o_, b_, _ = target.split(":")
    proc = memq(memq_stack, "consume", "-t", topic, "--from-message-id", f"{p_}:{o_}:{b_}:99999")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"there is no record {p_}:{o_}:{b_}:99999" in proc.stderr

    # An offset past the partition's end: one line naming the end, not a silent wait.
    _, high = watermarks(memq_stack, topic, part)
    for args in (["--offset", str(high + 5)], ["--from-message-id", f"{part}:{high + 5}:0:0"]):
        proc = memq(memq_stack, "consume", "-t", topic, "-p", str(part), *args)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"past the end of '{topic}' partition {part}" in proc.stderr
        assert f"next notification offset is {high}" in proc.stderr

    # Usage errors say what to do.
    proc = memq(memq_stack, "consume", "-t", topic, "--offset", "3")
    assert proc.returncode == 2 and "--offset needs --partition" in proc.stderr
    proc = memq(memq_stack, "consume", "-t", topic, "--from-message-id", "1:2")
    assert proc.returncode == 2 and "partition:offset:block:record" in proc.stderr


def test_max_inside_an_object_says_what_was_committed(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("maxcommit")
    values = [b"m-%04d" % i for i in range(300)]
    produce(memq_stack, topic, [values])  # one object
    group = f"{topic}-g"
    proc = memq(memq_stack, "consume", "-t", topic, "-g", group, "--max", "10", *FAST_GROUP)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 10
    summary = " ".join(proc.stderr.replace("│", " ").split())
    # Kafka keeps the commit metadata: the commit is at the last record printed.
    assert "yes, to the last record printed" in summary, proc.stderr
    assert "objects 1 read from" in summary and "0.00 MB fetched" not in summary
    # ...and it is true: the same group goes on at the next record, and nothing is lost.
    proc = memq(memq_stack, "consume", "-t", topic, "-g", group, "--timeout", "3", *FAST_GROUP)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [v.decode() for v in values[10:]]
    assert "committed" in proc.stderr and "yes" in proc.stderr
