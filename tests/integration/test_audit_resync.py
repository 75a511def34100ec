"""The auditor re-reads its audit topic when Kafka is a new one (issue 16, item 1).

The dev stack's Kafka keeps everything in memory: after `memq dev down` / `memq dev up`
the audit topic starts again at offset 0 while the auditor's SQLite file still holds the
old Kafka's offsets. An auditor that trusted them skipped the new stack's first records.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from memq.audit.config import AuditorConfig
from memq.devstack import StackState
from memq.devstack.kafka import KafkaService
from memq.devstack.procs import stop, wait_for
from memq.formats.audit import encode_audit
from memq.run.auditor import AuditorThread
from memq.storage_handlers.kafka_sink import ensure_topic


def write_audit(bootstrap: str, audit_topic: str, topic: str, seqs: range) -> None:
    from confluent_kafka import Producer

    ensure_topic(bootstrap, audit_topic, 1, what="audit topic")
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in seqs:
        p.produce(
            audit_topic,
            encode_audit(
                {"kind": "produced", "topic": topic, "producer_id": 42, "epoch": 0,
                 "sequence": seq, "records": 10, "content_crc": 1, "min_timestamp": now - 5,
                 "time": now, "acks": "all", "bucket": "b", "key": f"obj-{seq}"}
            ),
        )  # fmt: skip
    assert p.flush(30) == 0


def produced_blocks(url: str, topic: str) -> int:
    q = urllib.parse.urlencode({"topic": topic, "since": "1h"})
    with urllib.request.urlopen(f"{url}/api/summary?{q}", timeout=30) as r:
        doc: Any = json.loads(r.read())
    return int(doc["topics"][0]["produced_blocks"]) if doc["topics"] else 0


def config(bootstrap: str, db: Path, audit_topic: str) -> AuditorConfig:
    return AuditorConfig(
        kafka={"bootstrap_servers": bootstrap},  # type: ignore[arg-type]
        audit_topic=audit_topic,
        db_path=db,
        http_port=0,
        grace_period_s=600,
    )


def test_a_new_kafka_is_read_from_its_beginning(
    memq_stack: StackState, unique_name: Any, tmp_path: Path
) -> None:
    audit_topic, topic = unique_name("audit"), unique_name("t")
    db = tmp_path / "audit.db"
    write_audit(memq_stack.kafka_bootstrap, audit_topic, topic, range(20))
    first = AuditorThread(config(memq_stack.kafka_bootstrap, db, audit_topic))
    first.start()
    try:
        wait_for(
            lambda: produced_blocks(first.url, topic) == 20 or None,
            timeout=60,
            what="the first auditor ingests 20 blocks",
        )
    finally:
        first.stop()

    # A new, empty Kafka (as after `memq dev down` / `memq dev up`) with fewer records
    # than the stored offset: the same file must pick up every one of them.
    new_kafka = KafkaService().start(tmp_path / "new-kafka")
    assert new_kafka.process is not None
    try:
        write_audit(new_kafka.endpoint, audit_topic, topic, range(100, 105))
        second = AuditorThread(config(new_kafka.endpoint, db, audit_topic))
        auditor = second.start()
        try:
            wait_for(
                lambda: produced_blocks(second.url, topic) == 25 or None,
                timeout=60,
                what="the auditor re-reads the new Kafka's audit topic (20 + 5 blocks)",
            )
            assert auditor.ingest.resyncs == 1
            assert auditor.store.offsets(audit_topic) == {0: 5}
            # More records on the new Kafka are read as usual, and nothing twice.
            write_audit(new_kafka.endpoint, audit_topic, topic, range(200, 203))
            wait_for(
                lambda: produced_blocks(second.url, topic) == 28 or None,
                timeout=60,
                what="28 blocks",
            )
            assert auditor.ingest.resyncs == 1 and auditor.store.offsets(audit_topic) == {0: 8}
        finally:
            second.stop()
    finally:
        stop(new_kafka.process)
