"""200 topics on a 2-broker dev stack with the dev memory settings: every topic writable,
each broker's memory within its pool bound plus a fixed overhead."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from memq import Producer
from memq.devstack import DevStack, StackState
from tests.integration.helpers import external_stack_env

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`

TOPICS = 200
#: Python, boto3, librdkafka and per-topic bookkeeping beside the batch buffer pool.
OVERHEAD = 350 << 20


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_200_topics_on_two_dev_brokers(memq_stack: StackState, tmp_path: Path) -> None:
    import os

    env = external_stack_env(memq_stack, MEMQ_STATE_DIR=str(tmp_path / "st"))
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        stack = DevStack(tmp_path / "st")
        state = stack.up(brokers=2, auditor=False)
        try:
            brokers = state.extra["brokers"]
            assert len(brokers) == 2
            names = [f"many-{i:03d}" for i in range(TOPICS)]
            with Producer({"linger.ms": 5, "delivery.timeout.ms": 120_000}) as p:
                futs = [p.produce(n, b"hello %s" % n.encode()) for n in names]  # auto-created
                metas = [f.result(timeout=180) for f in futs]
            assert sorted(m.topic for m in metas) == names
            assert all(m.key for m in metas)  # acks=all: each stored in S3 and notified
            limit = 512 << 20  # the dev brokers' memory_limit_bytes
            for b in brokers:
                assert rss(b["pid"]) < limit + OVERHEAD, (b["name"], rss(b["pid"]))
            # Every topic has two writers by default: both brokers write all 200.
            for b in brokers:
                with urllib.request.urlopen(f"{b['http']}/status", timeout=10) as r:
                    hosted = set(json.loads(r.read())["topics"])
                assert set(names) <= hosted, (b["name"], len(hosted))
        finally:
            stack.down()
    finally:
        os.environ.clear()
        os.environ.update(saved)
