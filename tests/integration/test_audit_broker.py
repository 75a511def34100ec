"""Broker-side audit on real servers (issue 43): records written over HTTP ingest and the
Kafka port are reported produced by the broker that stored them, so the auditor and
``memq audit report`` prove them like a ``memq.Producer``'s, and every block is counted
once whichever way it came in."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.audit.config import AuditorConfig
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.run.auditor import AuditorThread
from memq.run.broker import BrokerThread
from memq.testing import broker_config

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}
#: Five HTTP requests of 200 records: three acks=all, one acks=1, one acks=0.
HTTP_ACKS = ("all", "all", "all", "1", "0")


@pytest.fixture
def audit_topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("audit")


@pytest.fixture
def auditor(memq_stack: StackState, audit_topic: str, tmp_path: Path) -> Iterator[AuditorThread]:
    a = AuditorThread(
        AuditorConfig(
            kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},  # type: ignore[arg-type]
            audit_topic=audit_topic,
            db_path=tmp_path / "audit.db",
            http_port=0,
            grace_period_s=600,
        )
    )
    a.start()
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("paths")


@pytest.fixture
def broker(
    memq_stack: StackState, s3_bucket: str, audit_topic: str, topic: str
) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_ms=200, batch_bytes=4 << 20,
        cluster=f"ab-{uuid.uuid4().hex[:8]}", kafka_listener={"port": 0},
        audit={"topic": audit_topic},
    )  # fmt: skip
    with BrokerThread(cfg) as b:
        yield b


def get(url: str, path: str, **params: Any) -> Any:
    q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
        return json.loads(r.read())


def post_lines(http: str, topic: str, lines: list[bytes], acks: str, **headers: str) -> Any:
    req = urllib.request.Request(
        f"{http}/v1/topics/{topic}/records?acks={acks}", data=b"\n".join(lines) + b"\n",
        method="POST", headers={"Content-Type": "text/plain", **headers},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status in (200, 202), r.status
        return json.loads(r.read())


def kafka_produce(address: str, topic: str, n: int) -> None:
    """confluent-kafka with its defaults (acks=all, idempotence), several requests."""
    from confluent_kafka import Producer as KafkaProducer

    p = KafkaProducer({"bootstrap.servers": address, "linger.ms": 5, "batch.size": 16384})
    failed: list[Any] = []
    for i in range(n):
        p.produce(topic, b"kafka-%06d-" % i + b"k" * 100,
                  on_delivery=lambda err, _m: failed.append(err) if err else None)  # fmt: skip
        p.poll(0)
    assert p.flush(120) == 0 and failed == []


def consume(address: str, topic: str, group: str, audit_topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": address, "group.id": group, **GROUP,
                  "audit.enable": True, "audit.topic": audit_topic})  # fmt: skip
    try:
        c.subscribe(topic)
        got: list[bytes] = []
        deadline = time.monotonic() + 120
        while len(got) < n and time.monotonic() < deadline:
            got.extend(m.value for m in c.consume(1000, 1.0))
        got.extend(m.value for m in c.consume(1000, 1.0))  # nothing more may come
        c.commit()
        return got
    finally:
        c.close()


def group_row(url: str, topic: str, group: str) -> dict[str, Any] | None:
    for t in get(url, "/api/summary", topic=topic, since="1h")["topics"]:
        for g in t["groups"]:
            if g["group"] == group:
                return {**g, "produced_records": t["produced_records"],
                        "produced_blocks": t["produced_blocks"]}  # fmt: skip
    return None


def broker_audit_metric(b: BrokerThread, outcome: str) -> float:
    assert b.server is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{b.server.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f'memq_broker_audit_records_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no memq_broker_audit_records_total{{outcome={outcome!r}}}:\n{text}")


def test_http_kafka_port_and_producer_writes_are_each_audited_once(
    broker: BrokerThread, auditor: AuditorThread, audit_topic: str, topic: str
) -> None:
    assert broker.server is not None and broker.server.kafka_port is not None
    group = "audit-paths"
    http = f"http://127.0.0.1:{broker.server.http_port}"
    sent: list[bytes] = []
    for r, acks in enumerate(HTTP_ACKS):
        lines = [b"http-%d-%03d" % (r, i) for i in range(200)]
        post_lines(http, topic, lines, acks)
        sent += lines
    # A retry with the same Idempotency-Key: answered as a duplicate, stored and reported once.
    retried = [b"order-1001-paid"]
    first = post_lines(http, topic, retried, "all", **{"Idempotency-Key": "order-1001"})
    again = post_lines(http, topic, retried, "all", **{"Idempotency-Key": "order-1001"})
    assert again["stored"]["duplicate"] is True and first["stored"]["duplicate"] is False
    sent += retried
    kafka_produce(f"127.0.0.1:{broker.server.kafka_port}", topic, 1000)
    sent += [b"kafka-%06d-" % i + b"k" * 100 for i in range(1000)]
    with Producer({"bootstrap.servers": broker.address, "linger.ms": 5, "batch.size": 16384,
                   "audit.enable": True, "audit.topic": audit_topic}) as p:  # fmt: skip
        futs = [p.produce(topic, b"memq-%06d" % i) for i in range(1000)]
        assert p.flush(60) == 0
    producer_blocks = {(f.result(0).producer_id, f.result(0).sequence) for f in futs}
    sent += [b"memq-%06d" % i for i in range(1000)]
    assert len(sent) == 3001

    got = consume(broker.address, topic, group, audit_topic, len(sent))
    assert Counter(got) == Counter(sent)  # every record once

    row = wait_for(
        lambda: r if (r := group_row(auditor.url, topic, group))
        and r["produced_records"] == 3001 and r["consumed_records"] == 3001 else None,
        timeout=60, what="the auditor sees 3001 records produced and consumed",
    )  # fmt: skip
    assert row["consumed_blocks"] == row["produced_blocks"]
    assert (row["missing_records"], row["pending_records"], row["mismatches"]) == (0, 0, 0)
    assert (row["unaudited_blocks"], row["unaudited_records"], row["duplicate_blocks"]) == (0, 0, 0)
    assert row["status"] == "ok"

    # Who reported what: the broker the HTTP and Kafka-port blocks (once each), the
    # producer its own (the broker never reports a block it did not encode).
    assert auditor.auditor is not None
    rows = (
        auditor.auditor.store._conn()
        .execute(
            "SELECT client, acks, COUNT(*), SUM(records), SUM(reports) FROM produced "
            "WHERE topic = ? GROUP BY client, acks",
            (topic,),
        )
        .fetchall()
    )
    by = {(c, a): (n, recs, reports) for c, a, n, recs, reports in rows}
    http_client = "memq-broker test-broker (http)"
    assert by[(http_client, "all")] == (4, 601, 4)
    assert by[(http_client, "1")] == (1, 200, 1)
    assert by[(http_client, "0")] == (1, 200, 1)
    kafka_blocks, kafka_records, kafka_reports = by[("memq-broker test-broker (kafka)", "all")]
    assert (kafka_records, kafka_reports) == (1000, kafka_blocks)
    assert by[("memq-producer", "all")] == (len(producer_blocks), 1000, len(producer_blocks))
    assert len(by) == 5
    assert row["produced_blocks"] == 6 + kafka_blocks + len(producer_blocks)
    ingest = get(auditor.url, "/api/status")["ingest"]
    assert ingest["produced_records"] == row["produced_blocks"]  # audit records: one per block
    # (delivery reports are served by the audit producer's thread: wait for the last)
    wait_for(
        lambda: True if broker_audit_metric(broker, "delivered") == 6 + kafka_blocks else None,
        timeout=30, what="the broker counts its audit records delivered",
    )  # fmt: skip
    assert broker_audit_metric(broker, "emitted") == 6 + kafka_blocks
    assert broker_audit_metric(broker, "dropped") == 0

    report = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "audit", "report", "--url", auditor.url,
         "--topic", topic, "--since", "1h"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
    assert "3,001 records" in report.stdout


def test_dev_stack_brokers_report_http_writes_to_its_auditor(
    memq_stack: StackState, unique_name: Callable[[str], str]
) -> None:
    """``memq dev up`` brokers audit their HTTP ingest by default, as clients do there:
    an HTTP-only topic is proven by the stack's auditor (not "no block was acked")."""
    b = memq_stack.extra["brokers"][0]
    auditor_url = memq_stack.extra["auditor"]["url"]
    topic, group = unique_name("devhttp"), "dev-http"
    lines = [b"dev-%03d" % i for i in range(300)]
    post_lines(b["http"], topic, lines, "all")
    got = consume(b["endpoint"], topic, group, "memq.audit", len(lines))
    assert sorted(got) == sorted(lines)
    row = wait_for(
        lambda: r if (r := group_row(auditor_url, topic, group))
        and r["consumed_records"] == 300 else None,
        timeout=60, what="the dev auditor sees the HTTP records consumed",
    )  # fmt: skip
    assert (row["produced_records"], row["produced_blocks"], row["consumed_blocks"]) == (300, 1, 1)
    assert (row["unaudited_records"], row["missing_records"], row["status"]) == (0, 0, "ok")
    report = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "audit", "report", "--url", auditor_url,
         "--topic", topic, "--since", "1h"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
