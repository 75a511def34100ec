"""Consumer-group lag in the auditor (issue 17): ``/api/lag``, ``/metrics`` and the
dashboard's "Consumer lag" table in Chromium, against a real broker, Apache Kafka and S3.

Records go to a one-partition topic in three acked bursts (several objects, hence
notifications); a fresh group reads exactly the first object and commits, and the
auditor must report the rest, exactly, in objects and records; after the group reads
the rest, lag 0. A lag source pointed at a dead address shows a one-line typed error.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.audit.config import AuditorConfig
from memq.devstack import StackState
from memq.devstack.procs import free_port, wait_for
from memq.run.auditor import AuditorThread
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.test_audit_dashboard import PageWatch, browser

__all__ = ["browser"]  # the module's Chromium fixture, shared with the dashboard tests

WAIT_S = 60.0
GROUP_CONF = {
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "enable.auto.commit": False,
}


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        doc: dict[str, Any] = json.load(r)
        return doc


def lag_of(auditor: AuditorThread, group: str, topic: str) -> dict[str, Any] | None:
    doc = get_json(f"{auditor.url}/api/lag")
    assert doc["enabled"] is True and doc["error"] is None, doc
    rows = [g for g in doc["groups"] if (g["group"], g["topic"]) == (group, topic)]
    return rows[0] if rows else None


def wait_lag(auditor: AuditorThread, group: str, topic: str, objects: int) -> dict[str, Any]:
    """The group's entry in /api/lag once it shows ``objects`` objects behind."""

    def probe() -> dict[str, Any] | None:
        row = lag_of(auditor, group, topic)
        return row if row is not None and row["lag_objects"] == objects else None

    return wait_for(probe, timeout=WAIT_S, what=f"/api/lag: {group} {objects} objects behind")


def consume(c: Consumer, n: int) -> list[bytes]:
    got: list[bytes] = []

    def probe() -> bool | None:
        got.extend(m.value for m in c.consume(n - len(got), 1.0))
        return True if len(got) >= n else None

    wait_for(probe, timeout=WAIT_S, what=f"consuming {n} records", interval=0)
    return got


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("lag")


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=[topic], batch_ms=100, partitions=1)
    with BrokerThread(cfg) as b:
        yield b


def test_lag_of_a_group_on_api_metrics_and_dashboard(
    memq_stack: StackState,
    broker: BrokerThread,
    topic: str,
    browser: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    prefix = unique_name("lagg")
    group = f"{prefix}-reader"
    audit_topic = unique_name("audit")
    cfg = AuditorConfig(
        kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},
        audit_topic=audit_topic,
        db_path=tmp_path / "audit.db",
        http_port=0,
        # The audited topics (from the audit records) by default; the groups of this test.
        lag={"bootstrap_servers": broker.address, "interval_s": 1, "groups": [f"{prefix}-*"]},
    )
    auditor = AuditorThread(cfg)
    auditor.start()
    producer = Producer(
        {"bootstrap.servers": broker.address, "acks": "all", "linger.ms": 5,
         "audit.enable": True, "audit.topic": audit_topic}
    )  # fmt: skip
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": group, **GROUP_CONF})
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    step = "setup"
    try:
        step = "produce three acked bursts (one object or more each)"
        futures = []
        values = [b"%d-%d" % (n, i) for n, size in enumerate((30, 20, 10)) for i in range(size)]
        for n, size in enumerate((30, 20, 10)):
            burst = [producer.produce(topic, b"%d-%d" % (n, i)) for i in range(size)]
            for f in burst:  # acks=all: stored and notified; the next burst is a new batch
                f.result(60)
            futures += burst
        keys = [f.result(0).key for f in futures]
        objects = list(dict.fromkeys(keys))  # in notification order (one partition)
        per_object = Counter(keys)
        assert len(objects) >= 3, objects
        total, first = len(futures), per_object[objects[0]]

        step = "the audited topic is known, no group has committed: the empty state"
        page.goto(f"{auditor.url}/?refresh=1")
        expect(page.get_by_test_id("lag-status")).to_have_attribute(
            "data-state", "ok", timeout=WAIT_S * 1000
        )
        wait_for(
            lambda: topic in auditor.auditor.store.topics() if auditor.auditor else None,
            timeout=WAIT_S, what="the auditor has the topic's audit records",
        )  # fmt: skip
        empty = page.get_by_test_id("lag-table").get_by_test_id("lag-empty")
        expect(empty).to_have_text(
            "No consumer group has committed offsets on these topics.", timeout=WAIT_S * 1000
        )

        step = f"the group reads the first object ({first} records) and commits"
        consumer.subscribe(topic)
        assert consume(consumer, first) == values[:first]
        consumer.commit()
        row = wait_lag(auditor, group, topic, len(objects) - 1)
        assert (row["lag_records"], row["committed"], row["end"]) == (
            total - first,
            1,
            len(objects),
        ), row
        assert row["lag_seconds"] is not None and row["lag_seconds"] >= 0, row
        assert row["state"] != "unknown", row
        assert not row["records_estimated"]
        assert [(p["partition"], p["committed"], p["end"]) for p in row["partitions"]] == [
            (0, 1, len(objects))
        ]
        metrics = urllib.request.urlopen(f"{auditor.url}/metrics", timeout=10).read().decode()
        labels = f'group="{group}",partition="0",topic="{topic}"'
        assert f"memq_group_lag_objects{{{labels}}} {float(len(objects) - 1)}" in metrics
        assert f"memq_group_lag_records{{{labels}}} {float(total - first)}" in metrics

        step = "the dashboard shows the group's lag"
        lag_row = page.locator(
            f'tr[data-testid="lag-row"][data-group="{group}"][data-topic="{topic}"]'
        )
        expect(lag_row).to_have_count(1, timeout=WAIT_S * 1000)
        cells = {
            "lag_objects": len(objects) - 1,
            "lag_records": total - first,
            "committed": 1,
            "end": len(objects),
        }
        for col, value in cells.items():
            expect(lag_row.locator(f'td[data-col="{col}"]'), col).to_have_attribute(
                "data-value", str(value), timeout=WAIT_S * 1000
            )
        expect(lag_row.locator('td[data-col="lag_records"]')).to_have_text(f"{total - first}")
        expect(lag_row.locator('td[data-col="lag_seconds"]')).to_have_text(
            re.compile(r"^\d+\.\d (s|min)$")
        )
        assert lag_row.locator("td").count() == page.locator("#lag-table thead th").count()
        expect(page.get_by_test_id("lag-empty")).to_have_count(0)

        step = "the group reads the rest: lag 0"
        assert consume(consumer, total - first) == values[first:]
        consumer.commit()
        row = wait_lag(auditor, group, topic, 0)
        assert (row["lag_records"], row["lag_seconds"], row["committed"], row["end"]) == (
            0,
            None,
            len(objects),
            len(objects),
        ), row
        for col, value in {"lag_objects": 0, "lag_records": 0, "committed": len(objects)}.items():
            expect(lag_row.locator(f'td[data-col="{col}"]'), col).to_have_attribute(
                "data-value", str(value), timeout=WAIT_S * 1000
            )
        expect(lag_row.locator('td[data-col="lag_seconds"]')).to_have_text("\u2014")
        metrics = urllib.request.urlopen(f"{auditor.url}/metrics", timeout=10).read().decode()
        assert f"memq_group_lag_objects{{{labels}}} 0.0" in metrics
        assert "memq_group_lag_errors_total 0.0" in metrics
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "lag-failure", step) from e
    finally:
        context.close()
        consumer.close()
        producer.close()
        auditor.stop()


def test_lag_shows_a_typed_one_line_error_when_the_brokers_are_unreachable(
    memq_stack: StackState, browser: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    cfg = AuditorConfig(
        kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},
        audit_topic=unique_name("audit"),
        db_path=tmp_path / "audit.db",
        http_port=0,
        lag={"bootstrap_servers": dead, "interval_s": 1, "timeout_s": 2, "topics": ["events"]},
    )
    auditor = AuditorThread(cfg)
    auditor.start()
    context = browser.new_context()
    watch = PageWatch(context.new_page(), tmp_path)
    try:
        doc = wait_for(
            lambda: (d := get_json(f"{auditor.url}/api/lag"))["error"] and d,
            timeout=WAIT_S, what="/api/lag reports the failure",
        )  # fmt: skip
        error = doc["error"]
        assert doc["enabled"] is True and doc["groups"] == [] and doc["measured_ms"] is None
        assert "\n" not in error and "Traceback" not in error, error
        assert error.split(":")[0].endswith("Error"), error  # typed: "SomeError: what"
        assert dead in error, error
        assert "lag.bootstrap_servers" in doc["hint"], doc
        page = watch.page
        page.goto(f"{auditor.url}/?refresh=1")
        status = page.get_by_test_id("lag-status")
        expect(status).to_have_attribute("data-state", "error", timeout=WAIT_S * 1000)
        expect(status).to_contain_text("Measuring lag failed: " + error.split(":")[0])
        expect(page.get_by_test_id("lag-table").get_by_test_id("lag-none")).to_have_count(1)
        metrics = urllib.request.urlopen(f"{auditor.url}/metrics", timeout=10).read().decode()
        assert "memq_group_lag_errors_total" in metrics and "memq_group_lag_objects{" not in metrics
        # The rest of the dashboard is unaffected.
        expect(page.get_by_test_id("status-line")).to_have_attribute("data-state", "ok")
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "lag-error-failure") from e
    finally:
        context.close()
        auditor.stop()
