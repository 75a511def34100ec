"""Consumer statistics: stats_dict() (every key documented in docs/clients.md), stats_cb
on statistics.interval.ms, and the Prometheus collector, over the deterministic harness."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from memq.consumer import Consumer
from memq.errors import ConfigError
from tests.unit.consumer_harness import FAST, TOPIC, Harness, tp

DOC = (Path(__file__).parents[2] / "docs" / "clients.md").read_text()


def documented_keys() -> set[str]:
    table = DOC.split("### Consumer keys", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {k for row in rows for k in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def test_every_stats_key_is_documented_and_every_documented_key_exists() -> None:
    h = Harness(partitions=1)
    try:
        assert set(h.consumer.stats_dict()) == documented_keys()
    finally:
        h.close()


def test_stats_dict_counts_what_happened() -> None:
    h = Harness(partitions=2, retention_ms=60_000, config={"prefetch.objects": 2})
    try:
        objs = [h.publish(0, [h.block(records=4)]) for _ in range(3)]
        gone = h.publish(1, created_at=int(time.time() * 1000) - 120_000)
        del h.storage.objects[gone.key]
        h.republish(1, objs[0])  # a copy: dropped by dedup
        h.assign(0, 1)
        h.consume_until(6)
        s = h.consumer.stats_dict()
        assert s["records"] == 6 and s["assigned_partitions"] == 2
        assert s["bytes_fetched"] > 0 and s["fetch_seconds"] >= 0
        assert s["queued_objects"] >= 1 and s["queued_bytes"] > 0
        assert s["lag_objects"] is not None and s["lag_objects"] >= 1
        h.consumer.pause([(TOPIC, 0)])
        assert h.consumer.stats_dict()["paused_partitions"] == 1
        h.consumer.resume([(TOPIC, 0)])
        h.drain()
        s = h.consumer.stats_dict()
        assert s["records"] == 12
        assert s["objects"] == 5  # 3 + the expired one + the copy
        assert s["skipped"] == {"missing": 0, "corrupt": 0, "expired": 1}
        assert (s["duplicate_blocks_dropped"], s["duplicate_records_dropped"]) == (1, 4)
        assert s["lag_objects"] == 0 and s["lag_records_estimate"] == 0
        assert s["queued_objects"] == 0 and s["backlog_notifications"] == 0
        assert s["commit_failures"] == 0 and s["fetches_abandoned"] == 0
        assert h.member.positions[tp(1)] == 2
    finally:
        h.close()


def test_stats_cb_ticks_and_the_collector_exports_gauges() -> None:
    got: list[dict[str, Any]] = []
    seen = threading.Event()

    def cb(stats: dict[str, Any]) -> None:
        got.append(stats)
        if stats["records"] >= 3:
            seen.set()

    h = Harness(partitions=1, config={"statistics.interval.ms": 20, "stats_cb": cb})
    try:
        h.publish(0)
        h.assign(0)
        h.consume_until(3)
        assert seen.wait(10), got[-1:]
        registry = CollectorRegistry()
        registry.register(h.consumer.prometheus_collector())
        text = generate_latest(registry).decode()
        assert 'memq_consumer_records{client_id="memq-consumer"} 3.0' in text
        assert 'memq_consumer_skipped{client_id="memq-consumer",kind="expired"} 0.0' in text
        assert "memq_consumer_queued_objects" in text
    finally:
        h.close()
    n = len(got)
    time.sleep(0.1)
    assert len(got) == n  # the ticker stopped with the consumer


def test_stats_cb_without_an_interval_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"statistics\.interval\.ms"):
        Consumer({**FAST, "stats_cb": print})
