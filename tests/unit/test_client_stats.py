"""Client statistics: the producer's stats dict, stats_cb, and the Prometheus collector."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from memq.errors import ConfigError
from memq.producer import Producer

REFUSED = "127.0.0.1:1"


def test_stats_cb_receives_the_counters_and_failures_are_counted_by_kind() -> None:
    got: list[dict[str, object]] = []
    seen = threading.Event()

    def cb(stats: dict[str, object]) -> None:
        got.append(stats)
        if stats["records_failed"]:
            seen.set()

    p = Producer({"bootstrap.servers": REFUSED, "audit.enable": False,
                  "delivery.timeout.ms": 1000, "statistics.interval.ms": 100, "stats_cb": cb})  # fmt: skip
    try:
        p.produce("t", b"v").exception(timeout=30)
        assert seen.wait(10), got[-1:]
        last = got[-1]
        assert last["records_failed"] == 1 and last["records_acked"] == 0
        assert last["errors"] == {"ConnectionLostError": 1}
        assert {"pending_records", "buffered_bytes", "buffer_memory", "blocks_in_flight",
                "requests", "retries"} <= set(last)  # fmt: skip
        registry = CollectorRegistry()
        registry.register(p.prometheus_collector())
        text = generate_latest(registry).decode()
        assert 'memq_producer_records_failed{client_id="memq-producer"} 1.0' in text
        assert (
            'memq_producer_errors{client_id="memq-producer",kind="ConnectionLostError"} 1.0' in text
        )
    finally:
        p.close(1)


def test_stats_cb_without_an_interval_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"statistics\.interval\.ms"):
        Producer({"bootstrap.servers": REFUSED, "stats_cb": print})
