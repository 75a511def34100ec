"""Broker-side audit records (issue 43): one ``produced`` record per block the broker
encoded, only once its batch is stored and notified, never failing the write path."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from memq.audit.client import RoutedAudit
from memq.broker.auditing import BlockAudit
from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool
from memq.broker.processor import TopicProcessor
from memq.config import TopicConfig, load_broker_config
from memq.formats import Compression
from memq.formats.audit import decode_audit, encode_audit
from memq.formats.block import INT64_MAX, decode_block_header, encode_block_with_crc
from memq.run.broker import broker_audit
from memq.storage_handlers.base import StorageWriter, StoredObject


class _Writer(StorageWriter):
    name = "test"

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    def store(self, topic: str, batch_id: str, created_ms: int, data: Any) -> StoredObject:
        if self.fail is not None:
            raise self.fail
        return StoredObject("test", "bkt", f"k/{batch_id}", len(data))


class _Sink:
    def publish(self, topic: str, notification: Any, *, key: bytes | None = None) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(None)
        return f


class _AuditSink:
    """Records what the broker emits; ``fail`` makes emit raise (a broken sink)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.records: list[tuple[dict[str, Any], str | None]] = []

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None:
        if self.fail:
            raise RuntimeError("sink broke")
        self.records.append((fields, kafka_bootstrap))

    def stats(self) -> dict[str, int]:
        return {"audit_emitted": 7, "audit_delivered": 5, "audit_dropped": 2}

    def close(self, timeout: float = 5.0) -> None:
        pass


def _processor(writer: StorageWriter, **over: Any) -> TopicProcessor:
    cfg = TopicConfig.model_validate(
        {
            "name": "events",
            "storage": {"type": "devnull"},
            "notification": {"bootstrap_servers": "kafka-n:9092"},
            "batch": {"bytes": 65536, "ms": 60_000, "max_blocks": 1},  # sealed at once
            "ring_size": 2,
            **over,
        }
    )
    return TopicProcessor(
        cfg, cluster="c", broker_id="b1", writer=writer, sink=_Sink(),
        executor=ThreadPoolExecutor(2), metrics=BrokerMetrics(), throttle_timeout=5.0,
        pool=BufferPool(64 << 20),
    )  # fmt: skip


RECORDS = [(1_763_790_000_123 + i, None, b"v%d" % i, None) for i in range(3)]


def _append_watched(
    writer: StorageWriter, sink: _AuditSink, acks: Any = "all", **over: Any
) -> tuple[Any, int]:
    """Append one broker-made block with the audit watching it; (batch, content CRC)."""

    async def go() -> tuple[Any, int]:
        proc = _processor(writer, **over)
        block, crc = encode_block_with_crc(
            RECORDS, producer_id=(1 << 64) - 5, epoch=0, sequence=9, compression=Compression.ZSTD
        )
        header = decode_block_header(block)
        batch, index, dup = await proc.append(memoryview(block), header, time.monotonic())
        assert (index, dup) == (0, False)
        BlockAudit(sink, "b1").watch(proc, batch, index, header, crc, acks, "http")
        await asyncio.wait_for(asyncio.wait({batch.done}), 10)
        await asyncio.sleep(0)  # (done callbacks run on the next loop turn)
        await proc.close()
        return batch, crc

    return asyncio.run(go())


def test_a_stored_block_is_reported_once_with_its_identity_and_object() -> None:
    sink = _AuditSink()
    batch, crc = _append_watched(_Writer(), sink, acks="1", retention={"ms": 3_600_000})
    assert len(sink.records) == 1
    fields, kafka = sink.records[0]
    assert kafka == "kafka-n:9092"  # the topic's notification Kafka, unless configured
    stored = batch.done.result()
    now = int(time.time() * 1000)
    assert now - 10_000 <= fields.pop("time") <= now
    assert fields == {
        "kind": "produced",
        "topic": "events",
        "producer_id": (1 << 64) - 5,
        "epoch": 0,
        "sequence": 9,
        "records": 3,
        "content_crc": crc,
        "min_timestamp": 1_763_790_000_123,
        "client": "memq-broker b1 (http)",
        "acks": "1",
        "bucket": "bkt",
        "key": stored.key,
        "block_index": 0,
        "retention_ms": 3_600_000,
    }
    # A valid audit record, as the auditor decodes it.
    rec = decode_audit(encode_audit({**fields, "time": now}))
    assert (rec.kind, rec.records, rec.content_crc, rec.client) == (
        "produced", 3, crc, "memq-broker b1 (http)",
    )  # fmt: skip


def test_a_topic_kept_forever_reports_long_max() -> None:
    sink = _AuditSink()
    _append_watched(_Writer(), sink, retention={"ms": -1})
    assert sink.records[0][0]["retention_ms"] == INT64_MAX


def test_a_failed_batch_reports_nothing() -> None:
    sink = _AuditSink()
    batch, _ = _append_watched(_Writer(fail=RuntimeError("S3 down")), sink)
    assert batch.done.exception() is not None
    assert sink.records == []


def test_a_broken_sink_never_fails_the_write(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="memq.broker.auditing")
    batch, _ = _append_watched(_Writer(), _AuditSink(fail=True))
    assert batch.done.result().key.startswith("k/")
    assert "audit sink failed for a block of events" in caplog.text


def test_the_broker_exports_the_sinks_counts() -> None:
    (family,) = BlockAudit(_AuditSink(), "b1").collect()
    assert family.name == "memq_broker_audit_records"
    assert {s.labels["outcome"]: s.value for s in family.samples if s.name.endswith("_total")} == {
        "emitted": 7, "delivered": 5, "dropped": 2,
    }  # fmt: skip


def test_records_with_nowhere_to_go_are_dropped_and_counted() -> None:
    audit = RoutedAudit(client="x")
    audit.emit({"kind": "produced"}, None)
    audit.emit({"kind": "produced"}, None)
    assert audit.stats() == {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 2}


def test_a_bad_audit_kafka_setting_drops_instead_of_raising() -> None:
    audit = RoutedAudit(client="x", bootstrap="127.0.0.1:1", kafka={"no.such.setting": 1})
    audit.emit({"kind": "produced"}, None)
    assert audit.stats()["audit_dropped"] == 1
    audit.close(0)


def _broker(audit: dict[str, Any] | None, producer: dict[str, Any] | None = None) -> Any:
    return load_broker_config(
        data={
            "broker_id": "b1",
            "topic_defaults": {
                "storage": {"type": "devnull"},
                "notification": {"bootstrap_servers": "kafka-n:9092", "producer": producer or {}},
            },
            "audit": audit,
        },
        env={},
    )


def test_broker_audit_is_off_unless_configured_and_follows_the_notifications_kafka() -> None:
    assert _broker(None).audit is None and broker_audit(_broker(None)) is None
    secure = {"security.protocol": "sasl_ssl", "sasl.password": "s", "linger.ms": 5}
    on = broker_audit(_broker({}, secure))
    assert on is not None
    assert (on.bootstrap, on.topic, on.client) == (None, "memq.audit", "memq-broker b1")
    # The notification producer's way in (security, SASL), not its tuning.
    assert on.kafka == {"security.protocol": "sasl_ssl", "sasl.password": "s"}
    own = broker_audit(
        _broker({"bootstrap_servers": "audit-k:9092", "topic": "a.t", "kafka": {"acks": "1"}},
                secure)
    )  # fmt: skip
    assert own is not None
    assert (own.bootstrap, own.topic, own.kafka) == ("audit-k:9092", "a.t", {"acks": "1"})
    # An environment override turns it on too (how a deployment without the key does).
    env = load_broker_config(
        data={"broker_id": "b1", "topic_defaults": {"storage": {"type": "devnull"},
              "notification": {"bootstrap_servers": "kafka-n:9092"}}},
        env={"MEMQ__AUDIT__TOPIC": "x.audit"},
    )  # fmt: skip
    assert env.audit is not None and env.audit.topic == "x.audit"


def test_the_audit_pages_broker_example_is_a_valid_broker_config() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "audit.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if b.startswith("audit:")]
    cfg = load_broker_config(
        data={"broker_id": "b1", **yaml.safe_load(block),
              "topic_defaults": {"storage": {"type": "devnull"},
                                 "notification": {"bootstrap_servers": "kafka-n:9092"}}},
        env={},
    )  # fmt: skip
    assert cfg.audit is not None
    assert (cfg.audit.topic, cfg.audit.bootstrap_servers, cfg.audit.kafka) == (
        "memq.audit",
        None,
        {},
    )
