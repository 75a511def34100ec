"""Audit end to end on real servers: clients -> Kafka audit topic -> auditor -> figures (issue 7)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.audit.config import AuditorConfig
from memq.audit.emitter import AuditEmitter
from memq.devstack import StackState
from memq.devstack.procs import free_port, wait_for
from memq.run.auditor import AuditorThread
from memq.run.broker import BrokerThread
from memq.security import AuthConfig, TlsConfig
from memq.testing import broker_config

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}


@pytest.fixture
def topic(unique_name: Any) -> str:
    return str(unique_name("aud"))


@pytest.fixture
def audit_topic(unique_name: Any) -> str:
    return str(unique_name("audit"))


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=64 * 1024, batch_ms=100
    )
    with BrokerThread(cfg) as b:
        yield b


def auditor_config(stack: StackState, db: Path, audit_topic: str, grace: float) -> AuditorConfig:
    return AuditorConfig(
        kafka={"bootstrap_servers": stack.kafka_bootstrap},  # type: ignore[arg-type]
        audit_topic=audit_topic,
        db_path=db,
        http_port=0,
        grace_period_s=grace,
        metrics_interval_s=1,
    )


def get(url: str, path: str, **params: Any) -> Any:
    q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
        return json.loads(r.read())


def produce(address: str, topic: str, audit_topic: str, n: int, start: int = 0) -> list[Any]:
    conf = {
        "bootstrap.servers": address,
        "linger.ms": 5,
        "batch.size": 16 * 1024,
        "audit.enable": True,
        "audit.topic": audit_topic,
    }
    with Producer(conf) as p:
        futs = [p.produce(topic, b"r-%06d-" % i + b"x" * 200) for i in range(start, start + n)]
        assert p.flush(60) == 0
    return [f.result(0) for f in futs]


def consume_all(address: str, topic: str, group: str, audit_topic: str, n: int, **kw: Any) -> int:
    c = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": group,
            **GROUP,
            "audit.enable": True,
            "audit.topic": audit_topic,
            **kw,
        }
    )
    try:
        c.subscribe(topic)
        got = 0
        deadline = time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            got += len(c.consume(1000, 1.0))
        # Objects skipped (deleted) produce no records: drain what is left.
        got += sum(len(c.consume(1000, 0.5)) for _ in range(3))
        c.commit()
        return got
    finally:
        c.close()


def group_row(url: str, topic: str, group: str, **params: Any) -> dict[str, Any] | None:
    doc = get(url, "/api/summary", topic=topic, **params)
    for t in doc["topics"]:
        for g in t["groups"]:
            if g["group"] == group:
                return {**g, "produced_records": t["produced_records"],
                        "produced_blocks": t["produced_blocks"]}  # fmt: skip
    return None


def test_exact_figures_and_restart_without_double_counting(
    memq_stack: StackState, broker: BrokerThread, topic: str, audit_topic: str, tmp_path: Path
) -> None:
    db = tmp_path / "audit.db"
    first = AuditorThread(auditor_config(memq_stack, db, audit_topic, grace=600))
    first.start()
    try:
        mds = produce(broker.address, topic, audit_topic, 2000)
        blocks = {(m.producer_id, m.sequence) for m in mds}
        assert len(blocks) > 5  # several blocks, several objects
        assert consume_all(broker.address, topic, "g1", audit_topic, 2000) == 2000
        row = wait_for(
            lambda: (
                r
                if (r := group_row(first.url, topic, "g1"))
                and r["consumed_records"] == 2000
                and r["produced_records"] == 2000
                else None
            ),
            timeout=60,
            what="auditor sees 2000 produced and consumed",
        )
        assert row["produced_blocks"] == len(blocks) == row["consumed_blocks"]
        assert (row["missing_records"], row["pending_records"], row["duplicate_blocks"]) == (
            0,
            0,
            0,
        )
        assert row["mismatches"] == 0 and row["unaudited_records"] == 0 and row["status"] == "ok"
        assert row["latency_p50_ms"] is not None and row["latency_p50_ms"] >= 0
        ingested = get(first.url, "/api/status")["ingest"]
        assert ingested["produced_records"] == len(blocks)
        assert ingested["consumed_records"] == len(blocks)
    finally:
        first.stop()

    # While the auditor is down: more data. A new auditor on the same file resumes.
    mds2 = produce(broker.address, topic, audit_topic, 1000, start=2000)
    assert consume_all(broker.address, topic, "g1", audit_topic, 1000) == 1000
    blocks2 = blocks | {(m.producer_id, m.sequence) for m in mds2}
    second = AuditorThread(auditor_config(memq_stack, db, audit_topic, grace=600))
    second.start()
    try:
        row = wait_for(
            lambda: (
                r
                if (r := group_row(second.url, topic, "g1")) and r["consumed_records"] == 3000
                else None
            ),
            timeout=60,
            what="auditor resumes to 3000",
        )
        assert row["produced_records"] == 3000 and row["produced_blocks"] == len(blocks2)
        assert row["duplicate_blocks"] == 0  # nothing re-applied from the audit topic
        ingested = get(second.url, "/api/status")["ingest"]
        assert ingested["produced_records"] == len(blocks2) == ingested["consumed_records"]
        metrics = urllib.request.urlopen(f"{second.url}/metrics", timeout=10).read().decode()
        assert 'memq_audit_records_total{kind="produced"}' in metrics
        assert get(second.url, "/healthz")["status"] == "ok"
    finally:
        second.stop()


def test_loss_is_reported_with_the_object_key_and_the_report_fails(
    memq_stack: StackState, broker: BrokerThread, topic: str, audit_topic: str, tmp_path: Path
) -> None:
    db = tmp_path / "audit.db"
    aud = AuditorThread(auditor_config(memq_stack, db, audit_topic, grace=1))
    aud.start()
    try:
        url = aud.url
        report = [sys.executable, "-m", "memq.cli.main", "audit", "report", "--topic", topic]
        nodata = subprocess.run(
            [*report, "--url", url], capture_output=True, text=True, check=False
        )
        assert nodata.returncode == 2, nodata.stdout + nodata.stderr
        assert "no audit records" in nodata.stdout

        # Three rounds, each acked (stored) before the next: at least three objects.
        mds = [
            md for i in range(3) for md in produce(broker.address, topic, audit_topic, 500, i * 500)
        ]
        keys = list(dict.fromkeys(m.key for m in mds))  # in ack order
        assert len(keys) >= 3
        victim = keys[len(keys) // 2]  # a loss in the middle of what the group reads
        lost = sum(1 for m in mds if m.key == victim)
        memq_stack.s3_client().delete_object(
            Bucket=broker.config.topics[0].storage.s3.bucket, Key=victim
        )  # type: ignore[union-attr]
        got = consume_all(
            broker.address, topic, "g", audit_topic, 1500 - lost,
            **{"corrupt.object.policy": "skip"},
        )  # fmt: skip
        assert got == 1500 - lost
        row = wait_for(
            lambda: (
                r if (r := group_row(url, topic, "g")) and r["missing_records"] == lost else None
            ),
            timeout=60,
            what=f"{lost} missing records",
        )
        assert row["status"] == "missing" and row["consumed_records"] == 1500 - lost
        missing = get(url, "/api/missing", topic=topic, group="g")["blocks"]
        assert {b["object_key"] for b in missing} == {victim}
        assert sum(b["records"] for b in missing) == lost

        out = subprocess.run([*report, "--url", url], capture_output=True, text=True, check=False)
        assert out.returncode == 1, out.stdout + out.stderr
        assert victim in out.stdout.replace("\n", "")
        typo = subprocess.run(  # a group that consumed nothing proves nothing: not "ok"
            [*report, "--url", url, "--group", "gg"], capture_output=True, text=True, check=False
        )
        assert typo.returncode == 2 and "has consumed nothing" in typo.stderr, typo.stderr
        after = str(int(time.time() * 1000) - 1)  # a window after every ack: nothing proven
        empty = subprocess.run(
            [*report, "--url", url, "--since", after], capture_output=True, text=True, check=False
        )
        assert empty.returncode == 2 and "was acked in this window" in empty.stdout, empty.stdout
        as_json = subprocess.run(
            [*report, "--url", url, "--json"], capture_output=True, text=True, check=False
        )
        doc = json.loads(as_json.stdout)
        assert doc["topics"][0]["groups"][0]["missing_records"] == lost
        # The same from the SQLite file, without the service (with the serving auditor's
        # grace of 1 s, as it recorded there: the default, 600 s, counted nothing missing).
        from_db = subprocess.run(
            [*report, "--db", str(db), "--json"], capture_output=True, text=True, check=False
        )
        assert from_db.returncode == 1, from_db.stderr
        db_doc = json.loads(from_db.stdout)
        assert db_doc["grace_period_s"] == 1
        assert db_doc["topics"][0]["groups"][0]["missing_records"] == lost
    finally:
        aud.stop()


def test_undecodable_audit_records_are_counted_and_skipped(
    memq_stack: StackState, audit_topic: str, tmp_path: Path
) -> None:
    from confluent_kafka import Producer as KafkaProducer

    from memq.formats.audit import encode_audit

    aud = AuditorThread(auditor_config(memq_stack, tmp_path / "a.db", audit_topic, grace=600))
    aud.start()
    try:
        kp = KafkaProducer({"bootstrap.servers": memq_stack.kafka_bootstrap})
        good = {"kind": "produced", "topic": "t", "producer_id": 1, "epoch": 0, "sequence": 0,
                "records": 5, "content_crc": 1, "min_timestamp": int(time.time() * 1000),
                "time": int(time.time() * 1000)}  # fmt: skip
        for value in (b"not json", b'{"crc": 1}', encode_audit(good)[:-3], encode_audit(good)):
            kp.produce(audit_topic, value)
        assert kp.flush(30) == 0
        status = wait_for(
            lambda: (
                s if (s := get(aud.url, "/api/status")["ingest"])["produced_records"] == 1 else None
            ),
            timeout=60,
            what="the valid record after three bad ones",
        )
        assert status["rejected_records"] == 3
        assert get(aud.url, "/healthz")["status"] == "ok"
        bad = urllib.request.Request(f"{aud.url}/api/summary?since=yesterday")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=10)
        assert e.value.code == 400 and "duration" in json.loads(e.value.read())["error"]
    finally:
        aud.stop()


def test_audit_never_blocks_or_fails_the_data_path(
    broker: BrokerThread, topic: str, audit_topic: str
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: Kafka for audit is down
    em = AuditEmitter(dead, audit_topic, queue_max=100)
    t0 = time.monotonic()
    for i in range(1000):
        em.emit({"kind": "produced", "topic": "t", "producer_id": 1, "epoch": 0, "sequence": i,
                 "records": 1, "content_crc": 0, "min_timestamp": 0, "time": 0})  # fmt: skip
    assert time.monotonic() - t0 < 5  # a blocking queue would wait 60 s per record
    assert em.stats()["audit_dropped"] >= 900  # the bounded queue overflowed, counted
    em.close(timeout=1)
    st = em.stats()
    assert st["audit_dropped"] + st["audit_delivered"] == 1000 and st["audit_delivered"] == 0

    conf = {"bootstrap.servers": broker.address, "linger.ms": 5, "batch.size": 16 * 1024,
            "audit.enable": True, "audit.topic": audit_topic,
            "audit.bootstrap.servers": dead}  # fmt: skip
    p = Producer(conf)
    futs = [p.produce(topic, b"v%d" % i) for i in range(500)]
    assert p.flush(60) == 0
    assert all(f.result(0).key for f in futs)  # every record acked with acks=all
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 30  # bounded even with the audit Kafka down
    assert p.stats["audit_dropped"] == p.stats["audit_emitted"] > 0


def test_dashboard_and_api_behind_tls_and_tokens(
    memq_stack: StackState, tmp_path: Path, audit_topic: str
) -> None:
    import http.cookiejar
    import ssl
    import urllib.error
    import urllib.request

    from memq.devstack.certs import make_dev_certs
    from memq.security import make_token

    certs = make_dev_certs(tmp_path / "certs")
    secret = "auditor-secret-0123456789"
    cfg = auditor_config(memq_stack, tmp_path / "a.db", audit_topic, grace=600).model_copy(
        update={
            "tls": TlsConfig(cert_file=certs.server_cert, key_file=certs.server_key),
            "auth": AuthConfig(enabled=True, token_secret=secret),
        }
    )
    aud = AuditorThread(cfg)
    aud.start()
    try:
        assert aud.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(certs.ca_file))
        with urllib.request.urlopen(f"{aud.url}/healthz", context=ctx, timeout=10) as r:
            assert r.status == 200  # probes need no token
        for path in ("/", "/api/status", "/static/app.js"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"{aud.url}{path}", context=ctx, timeout=10)
            assert e.value.code == 401 and "token" in e.value.read().decode()
        token = make_token(secret.encode(), "ops", 600)
        req = urllib.request.Request(
            f"{aud.url}/api/status", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["audit_topic"] == audit_topic and secret not in json.dumps(doc)
        forged = make_token(b"not-the-secret", "ops", 600)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{aud.url}/api/status", headers={"Authorization": f"Bearer {forged}"}
                ),
                context=ctx,
                timeout=10,
            )
        assert e.value.code == 401 and forged not in e.value.read().decode()
        # A browser: /?token= sets an HttpOnly cookie and redirects to a clean URL.
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=ctx), urllib.request.HTTPCookieProcessor(jar)
        )
        with opener.open(f"{aud.url}/?token={token}", timeout=10) as r:
            assert r.status == 200 and r.geturl().rstrip("/") == aud.url
            assert b"<html" in r.read().lower()
        assert [c.name for c in jar] == ["memq_token"]
        with opener.open(f"{aud.url}/api/status", timeout=10) as r:
            assert r.status == 200
        # memq audit report --url: the token and CA come from the environment.
        import os
        import subprocess
        import sys

        def report(**env: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "memq.cli.main", "audit", "report", "--url", aud.url,
                 "--topic", "nothing-here"],
                capture_output=True, text=True, timeout=60, check=False,
                env={**os.environ, "MEMQ_SSL_CA_LOCATION": str(certs.ca_file), **env},
            )  # fmt: skip

        denied = report()
        assert denied.returncode == 1 and "401" in denied.stderr, denied.stderr
        allowed = report(MEMQ_AUTH_TOKEN=token)
        assert allowed.returncode == 2, allowed.stderr  # reached it: no audit data for the topic
        assert token not in allowed.stdout + allowed.stderr
    finally:
        aud.stop()


def test_the_report_is_no_proof_while_the_auditor_cannot_read_its_topic(
    tmp_path: Path, audit_topic: str
) -> None:
    """Figures stored before the audit Kafka went away say "ok"; the report said so too,
    exit 0, with the auditor's intake failing (only --json showed it)."""
    from memq.audit.store import AuditStore, Ingest
    from memq.formats.audit import AuditRecord

    db = tmp_path / "audit.db"
    now = int(time.time() * 1000) - 120_000
    store = AuditStore(db)
    fields = {"topic": "gone", "producer_id": 1, "epoch": 0, "sequence": 0, "records": 5,
              "content_crc": 7, "min_timestamp": now, "time": now}  # fmt: skip
    unread = {**fields, "topic": "unread"}
    store.apply([
        Ingest(AuditRecord(kind="produced", acks="all", **fields), "memq.audit", 0, 0),  # type: ignore[arg-type]
        Ingest(AuditRecord(kind="consumed", group="g", **fields), "memq.audit", 0, 1),  # type: ignore[arg-type]
        Ingest(AuditRecord(kind="produced", acks="all", **unread), "memq.audit", 0, 2),  # type: ignore[arg-type]
    ])  # fmt: skip
    store.close()
    cfg = AuditorConfig(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},  # type: ignore[arg-type]
        audit_topic=audit_topic, db_path=db, http_port=0, grace_period_s=1,
    )  # fmt: skip
    aud = AuditorThread(cfg)
    aud.start()
    try:
        report = [sys.executable, "-m", "memq.cli.main", "audit", "report", "--topic", "gone",
                  "--url", aud.url]  # fmt: skip
        wait_for(lambda: get(aud.url, "/api/summary", topic="gone")["ingest"]["error"],
                 timeout=60, what="the auditor's intake error")  # fmt: skip
        out = subprocess.run(report, capture_output=True, text=True, check=False)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "not reading its audit topic" in out.stderr and "ok" in out.stdout
        # The figures themselves, from the file, are what they are (exit 0).
        aud.stop()
        from_db = subprocess.run([*report[:-2], "--db", str(db)], capture_output=True,
                                 text=True, check=False)  # fmt: skip
        assert from_db.returncode == 0, from_db.stdout + from_db.stderr
        # Acked and read by no group (a dead consumer, or one not auditing): not "ok".
        no_reader = subprocess.run(
            [sys.executable, "-m", "memq.cli.main", "audit", "report", "--topic", "unread",
             "--db", str(db), "--strict", "--grace", "0s"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert no_reader.returncode == 2, no_reader.stdout + no_reader.stderr
        assert "no consumer group has reported consuming topic 'unread'" in no_reader.stderr
    finally:
        aud.stop()
