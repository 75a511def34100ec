"""The auditor's lifecycle (issue 43): ``memq dev down`` had to SIGKILL the dev auditor,
which ignored SIGTERM for 10 s while its log showed a new Kafka client every few
seconds. SIGTERM stops ``memq audit serve`` within a few seconds even while a lag
measurement hangs on a broker that never answers, and the auditor keeps its Kafka
clients across measurements instead of making new ones for each."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from memq import Consumer, Producer
from memq.audit.config import AuditorConfig
from memq.audit.service import HTTP_STOP_S, THREADS_STOP_S
from memq.audit.store import AuditStore, Ingest
from memq.devstack import StackState
from memq.devstack.faultproxy import FaultProxy
from memq.devstack.procs import wait_for
from memq.formats.audit import AuditRecord
from memq.run.auditor import AuditorThread

GROUP_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
              "auto.offset.reset": "earliest"}  # fmt: skip


def produced(topic: str) -> Ingest:
    """One produced block of ``topic``: the topic is audited, so lag is measured on it."""
    now = int(time.time() * 1000)
    r = AuditRecord(kind="produced", topic=topic, producer_id=1, epoch=0, sequence=0,
                    records=1, content_crc=0, min_timestamp=now, time=now)  # fmt: skip
    return Ingest(r, "memq.audit.prefill", 0, 0)


def committed_group(address: str, topic: str, group: str) -> None:
    """``group`` has read ``topic`` on the stack and committed: a group to measure."""
    with Producer({"bootstrap.servers": address}) as p:
        p.produce(topic, b"x").result(60)
    with Consumer({"bootstrap.servers": address, "group.id": group, **GROUP_CONF}) as c:
        c.subscribe(topic)
        wait_for(lambda: True if c.consume(10, 1.0) else None, timeout=60, what="one record")
        c.commit()


def lag_doc(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/lag", timeout=10) as r:
        doc: dict[str, Any] = json.load(r)
        return doc


class _Counted:
    """Counts the Kafka clients this process makes (real ones, made by the real classes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import confluent_kafka
        import confluent_kafka.admin

        self.made: list[str] = []
        real_consumer = confluent_kafka.Consumer  # (a C type: wrapped by a function)
        admin_init = confluent_kafka.admin.AdminClient.__init__  # (its own code names it)

        def consumer(*a: Any, **kw: Any) -> Any:
            self.made.append("consumer")
            return real_consumer(*a, **kw)

        def admin(client: Any, *a: Any, **kw: Any) -> None:
            self.made.append("admin")
            admin_init(client, *a, **kw)

        monkeypatch.setattr(confluent_kafka, "Consumer", consumer)
        monkeypatch.setattr(confluent_kafka.admin.AdminClient, "__init__", admin)


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("life")


def test_the_auditor_keeps_its_kafka_clients_across_lag_measurements(
    memq_stack: StackState, topic: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    address = memq_stack.extra["brokers"][0]["endpoint"]
    group = unique_name("lifeg")
    committed_group(address, topic, group)
    store = AuditStore(tmp_path / "audit.db")
    store.apply([produced(topic)])
    store.close()
    counted = _Counted(monkeypatch)
    aud = AuditorThread(
        AuditorConfig(
            kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},  # type: ignore[arg-type]
            audit_topic=unique_name("audit"), db_path=tmp_path / "audit.db", http_port=0,
            lag={"bootstrap_servers": address, "interval_s": 1},  # type: ignore[arg-type]
        )
    )  # fmt: skip
    aud.start()
    try:
        seen: set[int] = set()

        def measured(n: int) -> bool | None:
            doc = lag_doc(aud.url)
            assert doc["error"] is None, doc
            if any(g["group"] == group for g in doc["groups"]):
                seen.add(doc["measured_ms"])
            return True if len(seen) >= n else None

        wait_for(lambda: measured(2), timeout=60, what="two lag measurements of the group")
        before = list(counted.made)
        wait_for(lambda: measured(8), timeout=60, what="six more lag measurements")
        # One consumer and one admin client for the audit topic, one admin client and one
        # notification reader for the lag: none more, however many measurements.
        assert counted.made == before, (before, counted.made)
        assert sorted(before) == ["admin", "admin", "consumer", "consumer"]
    finally:
        aud.stop()
    assert aud.auditor is not None and aud.auditor.lag is not None
    assert aud.auditor.lag.admin._probe_client is None  # type: ignore[attr-defined]  # closed


def test_sigterm_stops_the_auditor_within_seconds_while_a_measurement_hangs(
    memq_stack: StackState, topic: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    address = memq_stack.extra["brokers"][0]["endpoint"]
    host, port = address.rsplit(":", 1)
    store = AuditStore(tmp_path / "audit.db")
    store.apply([produced(topic)])
    store.close()
    with FaultProxy(host, int(port)) as proxy:
        proxy.set_mode("stall")  # a broker that takes requests and never answers
        cfg = {
            "kafka": {"bootstrap_servers": memq_stack.kafka_bootstrap},
            "audit_topic": unique_name("audit"),
            "db_path": str(tmp_path / "audit.db"),
            "http_port": 0,
            "lag": {"bootstrap_servers": proxy.address, "interval_s": 1, "timeout_s": 60},
        }
        (tmp_path / "auditor.yaml").write_text(yaml.safe_dump(cfg))
        ready, log = tmp_path / "ready.json", tmp_path / "auditor.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "memq.cli.main", "--log-level", "INFO", "audit", "serve",
                 "--config", str(tmp_path / "auditor.yaml"), "--ready-file", str(ready)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            wait_for(lambda: True if ready.exists() else None, timeout=60, what="auditor ready",
                     abort=lambda: None if proc.poll() is None else log.read_text())  # fmt: skip
            # The measurement is under way: its metadata request sits in the stalled proxy.
            wait_for(lambda: True if proxy.counts["stall"] else None, timeout=30,
                     what="the lag measurement reaches the stalled broker")  # fmt: skip
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"SIGTERM ignored for 30 s; log:\n{log.read_text()[-3000:]}")
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert took < HTTP_STOP_S + THREADS_STOP_S + 2.0, (took, text[-3000:])
    assert "its consumer lag thread is still in a request" in text
