"""Kafka habits at the command line: Ctrl-C, a caught-up group, conflicting options.

Ctrl-C (SIGINT) on `memq consume` finishes the batch in hand, commits what was printed and
prints a summary that counts it; on `memq produce` it stops reading, waits for what was
sent and says what was stored. Both exit 130. A `memq consume --group` that is caught up
commits on its schedule, so `memq group describe` shows it while it waits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from memq import Producer
from memq.devstack import StackState

from .helpers import wait_for_objects

FAST_GROUP = ("-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000")


def _env(stack: StackState) -> dict[str, str]:
    return {**os.environ, "MEMQ_STATE_DIR": stack.state_dir}


def memq(stack: StackState, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(stack),
        check=False,
    )


def popen(stack: StackState, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "memq.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(stack),
        **kw,
    )


class Lines:
    """A child's stdout lines, read on a thread, so that waits have deadlines."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[bytes] = []
        self._cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip(b"\n"))
                self._cond.notify_all()
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.lines) >= n or self.closed, timeout)
            assert len(self.lines) >= n, f"only {len(self.lines)} lines"

    def wait_closed(self, timeout: float = 60.0) -> list[bytes]:
        with self._cond:
            assert self._cond.wait_for(lambda: self.closed, timeout)
            return list(self.lines)


def _summary(stderr: str, row: str) -> str:
    m = re.search(rf"│ {row}\s+│ (.+?)\s*│", stderr)
    assert m, stderr[-3000:]
    return m.group(1)


def _produce(stack: StackState, topic: str, values: list[bytes]) -> None:
    with Producer({"bootstrap.servers": stack.extra["brokers"][0]["endpoint"]}) as p:
        p.produce_batch(topic, values).result(60)


def test_ctrl_c_on_consume_commits_exactly_what_was_printed(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic, group = unique_name("intr"), unique_name("g")
    # 1 KiB values: the pipe (64 KiB) fills, so the consumer is mid-stream at the signal
    values = [b"%06d-" % i + b"x" * 1017 for i in range(3000)]
    _produce(memq_stack, topic, values)
    proc = popen(
        memq_stack, "consume", "--topic", topic, "--group", group, "--timeout", "0", *FAST_GROUP
    )
    out = Lines(proc.stdout)
    out.wait(600)
    proc.send_signal(signal.SIGINT)
    first = out.wait_closed()
    assert proc.wait(60) == 130
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert 600 <= len(first) < len(values), "the test needs a stop in the middle"
    assert _summary(stderr, "records") == f"{len(first):,}"
    assert _summary(stderr, "committed").startswith("yes"), stderr[-2000:]
    # The group resumes right after the last record printed: nothing lost, nothing twice.
    rest = memq(
        memq_stack, "consume", "--topic", topic, "--group", group, "--timeout", "5", *FAST_GROUP
    )
    assert rest.returncode == 0, rest.stderr[-2000:]
    second = rest.stdout.encode().splitlines()
    assert sorted(first + second) == sorted(values)


def test_ctrl_c_on_produce_flushes_and_reports_what_was_stored(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("intr-p")
    proc = popen(memq_stack, "produce", "--topic", topic, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    sent = [b"line-%d" % i for i in range(2000)]
    proc.stdin.write(b"\n".join(sent) + b"\n")
    proc.stdin.flush()  # stdin stays open: the producer waits for more, as at a terminal
    stored = wait_for_objects(memq_stack.s3_client(), memq_stack.bucket, 1, topic=topic)
    assert stored, "nothing was produced before the signal"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    stderr = err.decode()
    assert proc.returncode == 130, stderr[-3000:]
    acked = int(_summary(stderr, "records").replace(",", ""))
    assert "by Ctrl-C" in _summary(stderr, "stopped")
    objs = wait_for_objects(memq_stack.s3_client(), memq_stack.bucket, acked, topic=topic)
    got = [r[2] for o in objs for r in o.records]
    assert got == sent[: len(got)] and len(got) == acked  # (acks=all: acked == stored)


def test_caught_up_group_shows_its_commits_while_it_waits(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic, group = unique_name("idle"), unique_name("g")
    _produce(memq_stack, topic, [b"v%d" % i for i in range(50)])
    proc = popen(
        memq_stack, "consume", "--topic", topic, "--group", group, "--timeout", "0",
        "-X", "auto.commit.interval.ms=500", *FAST_GROUP,
    )  # fmt: skip
    try:
        out = Lines(proc.stdout)
        out.wait(50)
        deadline = time.monotonic() + 30
        while True:  # the commit is on the consumer's schedule: poll its outcome
            d = memq(memq_stack, "group", "describe", group, "--json")
            if d.returncode == 0:
                parts = json.loads(d.stdout)["topics"][topic]
                if sum(p["committed"] or 0 for p in parts) > 0:
                    break
            assert time.monotonic() < deadline, d.stderr[-2000:]
            time.sleep(0.5)
        assert proc.poll() is None  # still running, caught up
        assert [p["lag_records"] for p in parts] == [0] * len(parts)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def test_conflicting_start_options_are_a_usage_error(memq_stack: StackState) -> None:
    proc = memq(
        memq_stack, "consume", "--topic", "t", "--from-beginning", "--from-time", "2026-01-01"
    )
    assert proc.returncode == 2 and "use one" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_topic_nobody_can_write_is_not_created(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("huge")
    proc = memq(memq_stack, "topic", "create", topic, "--expected-mbps", "100000")
    assert proc.returncode == 1 and "not created" in proc.stderr, proc.stderr
    listed = memq(memq_stack, "topic", "list", "--json")
    assert listed.returncode == 0 and topic not in listed.stdout
    # the name is free again: the same topic at a load the cluster can place
    ok = memq(memq_stack, "topic", "create", topic, "--expected-mbps", "1")
    assert ok.returncode == 0, ok.stderr


def test_topic_update_warns_only_about_what_it_changed(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("upd")
    assert memq(memq_stack, "topic", "create", topic).returncode == 0
    proc = memq(memq_stack, "topic", "update", topic, "--set", "batch.ms=500")
    assert proc.returncode == 0 and "min_writers" not in proc.stderr, proc.stderr
    proc = memq(memq_stack, "topic", "update", topic, "--set", "min_writers=3")
    assert proc.returncode == 0 and "min_writers 3 is more than" in proc.stderr, proc.stderr


def test_a_live_group_without_commits_is_described_not_unknown(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic, group = unique_name("empty"), unique_name("g")
    assert memq(memq_stack, "topic", "create", topic).returncode == 0
    proc = popen(
        memq_stack, "consume", "--topic", topic, "--group", group, "--timeout", "0", *FAST_GROUP
    )
    try:
        deadline = time.monotonic() + 45
        while True:  # joining takes a rebalance: poll the outcome
            d = memq(memq_stack, "group", "describe", group, "--json")
            if d.returncode == 0:
                doc = json.loads(d.stdout)
                if doc["members"]:
                    break
            assert "check the name" not in d.stderr or time.monotonic() < deadline, d.stderr
            assert time.monotonic() < deadline, d.stderr[-2000:]
            time.sleep(0.5)
        assert [p["committed"] for p in doc["topics"][topic]] == [None] * len(doc["topics"][topic])
        listed = memq(memq_stack, "group", "list", "--json")
        assert group in listed.stdout, listed.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
