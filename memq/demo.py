"""The end-to-end demo behind ``make demo`` / ``memq demo``.

On the local stack (started here if it is not running), it walks the whole pipeline:

1. produce records with ``memq.Producer`` (acks=all) through the MemQ brokers;
2. consume them with ``memq.Consumer`` in a group and check they are exactly those
   produced;
3. read every notification back from Kafka and every batch object from S3 (header
   range-read, checksum against the notification, each block by range, CRCs), and
   check the same;
4. backfill the topic with Spark straight from S3 to Parquet and check the same;
5. ask the auditor (producer and consumer emitted audit records all along) for its
   figures: every acked record consumed, nothing missing, duplicated or mismatched;

and prints a summary. Any mismatch raises, so ``make demo`` fails loudly.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memq.devstack import DevStack, StackState
from memq.errors import MemqError

__all__ = ["DemoResult", "demo_with_stack", "run_demo"]

CLUSTER = "dev"
DEMO_GROUP = "demo-readers"
Say = Callable[[str], None]


@dataclass
class DemoResult:
    topic: str = ""
    records: int = 0
    objects: int = 0
    bytes_stored: int = 0
    checks: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    backfill_records: int | None = None
    consumed: int = 0
    #: The auditor's summary and missing blocks for the demo topic, and its dashboard URL.
    audit: dict[str, Any] = field(default_factory=dict)
    dashboard: str | None = None


def _records(n: int, seed: int) -> list[tuple[bytes, bytes, dict[str, bytes] | None]]:
    rng = random.Random(seed)
    events = ["click", "view", "purchase", "search"]
    out = []
    for i in range(n):
        value = (
            f'{{"seq":{i},"event":"{rng.choice(events)}","user":{rng.randrange(10_000)},'
            f'"pad":"{rng.randbytes(rng.randrange(20, 300)).hex()}"}}'
        ).encode()
        out.append(
            (
                f"user-{rng.randrange(1000)}".encode(),
                value,
                {"source": b"demo"} if i % 10 == 0 else None,
            )
        )
    return out


def _produce(state: StackState, topic: str, records: list[Any], res: DemoResult, say: Say) -> None:
    from memq import Producer

    broker = ",".join(b["endpoint"] for b in state.extra.get("brokers", []) if b.get("endpoint"))
    if not broker:
        raise MemqError(
            "the local stack has no broker: restart it with `memq dev down && memq dev up`"
        )
    t0 = time.perf_counter()
    conf = {"bootstrap.servers": broker, "acks": "all", "linger.ms": 20, "audit.enable": True}
    with Producer(conf) as p:
        futures = [p.produce(topic, v, key=k, headers=h) for k, v, h in records]
        left = p.flush(120)
        if left:
            raise MemqError(f"{left} records were not acknowledged within 120 s")
        failed = [e for f in futures if (e := f.exception(0)) is not None]
        if failed:
            raise MemqError(f"{len(failed)} records failed, first: {failed[0]}")
    res.timings["produce (acks=all)"] = time.perf_counter() - t0
    say(
        f"produced {len(records):,} records to {topic!r} with acks=all: every one is in S3 and notified"
    )
    res.checks.append(
        f"{len(records):,} records acknowledged with acks=all (stored in S3 and notified)"
    )


def _consume(
    state: StackState, topic: str, expected: Counter[Any], res: DemoResult, say: Say
) -> None:
    """A ``memq.Consumer`` group reads the topic (and reports each block to the auditor)."""
    from memq import Consumer

    broker = ",".join(b["endpoint"] for b in state.extra.get("brokers", []) if b.get("endpoint"))
    t0 = time.perf_counter()
    c = Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": DEMO_GROUP,
            "auto.offset.reset": "earliest",
            "audit.enable": True,
        }
    )
    got: Counter[Any] = Counter()
    total = sum(expected.values())
    try:
        c.subscribe(topic)
        deadline = time.monotonic() + 120
        while sum(got.values()) < total and time.monotonic() < deadline:
            for m in c.consume(5000, 1.0):
                h = None if m.headers is None else tuple(sorted(m.headers))
                got[(m.key, m.value, h)] += 1
        c.commit()
    finally:
        c.close()
    if got != expected:
        raise MemqError(
            f"the consumer group read {sum(got.values())} records, differing from the "
            f"{total} produced"
        )
    res.consumed = total
    res.timings["consume (memq.Consumer group)"] = time.perf_counter() - t0
    say(f"consumer group {DEMO_GROUP!r} read all {total:,} records, byte-exact")
    res.checks.append(
        f"memq.Consumer group {DEMO_GROUP!r} read {total:,} records straight from S3, equal "
        "to those produced"
    )


def _audit(state: StackState, topic: str, res: DemoResult, say: Say) -> None:
    """Wait until the auditor has matched every produced block, then keep its figures."""
    import json
    import urllib.parse
    import urllib.request

    from memq.devstack.procs import wait_for

    auditor = state.extra.get("auditor")
    if not auditor:
        raise MemqError(
            "the local stack runs without its auditor: restart it with `memq dev down && "
            "memq dev up` (the auditor is on by default)"
        )
    url = str(auditor["url"])
    t0 = time.perf_counter()

    def get(path: str, **params: Any) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
            return json.loads(r.read())

    def matched() -> dict[str, Any] | None:
        doc = get("/api/summary", topic=topic, since="1h", group=DEMO_GROUP)
        t = doc["topics"][0] if doc["topics"] else None
        g = t["groups"][0] if t and t["groups"] else None
        if t and g and t["produced_records"] == res.records == g["consumed_records"]:
            return dict(doc)
        return None

    say("waiting for the auditor to match every produced block with its consumption...")
    doc = wait_for(matched, timeout=90, what="the auditor's figures for the demo topic")
    g = doc["topics"][0]["groups"][0]
    if g["missing_blocks"] or g["mismatches"] or g["duplicate_blocks"] or g["pending_blocks"]:
        raise MemqError(f"the audit found problems: {g}")
    res.audit = {"summary": doc, "missing": {}}
    res.dashboard = url
    res.timings["audit (auditor matched everything)"] = time.perf_counter() - t0
    res.checks.append(
        f"auditor: {res.records:,} records acked in {doc['topics'][0]['produced_blocks']} blocks, "
        f"all consumed by {DEMO_GROUP!r}: 0 missing, 0 duplicated, 0 mismatched"
    )


def _read_back(
    state: StackState, topic: str, expected: Counter[Any], res: DemoResult, say: Say
) -> None:
    """Notifications from Kafka, then each object from S3 by range reads, verified."""
    from confluent_kafka import Consumer, TopicPartition

    from memq.formats import (
        BATCH_PREFIX_SIZE,
        batch_header_length,
        decode_batch_header,
        decode_notification,
        decode_records,
        verify_batch_block,
    )
    from memq.storage_handlers.registry import make_reader

    t0 = time.perf_counter()
    note_topic = f"memq.{CLUSTER}.{topic}.notifications"
    c = Consumer(
        {
            "bootstrap.servers": state.kafka_bootstrap,
            "group.id": f"demo-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        parts = list(c.list_topics(note_topic, timeout=10).topics[note_topic].partitions)
        c.assign([TopicPartition(note_topic, p, 0) for p in parts])
        reader = make_reader(
            {
                "type": "s3",
                "bucket": state.bucket,
                "endpoint_url": state.s3_endpoint,
                "region": "us-east-1",
            }
        )
        got: Counter[Any] = Counter()
        deadline = time.monotonic() + 60
        total = sum(expected.values())
        while sum(got.values()) < total and time.monotonic() < deadline:
            m = c.poll(0.5)
            payload = None if m is None or m.error() is not None else m.value()
            if payload is None:
                continue
            n = decode_notification(payload)
            prefix = reader.read(n.bucket, n.key, 0, BATCH_PREFIX_SIZE)
            header = decode_batch_header(
                reader.read(n.bucket, n.key, 0, batch_header_length(prefix))
            )
            if header.crc != n.checksum or header.object_size != n.size:
                raise MemqError(f"{n.key}: object does not match its notification")
            for i, e in enumerate(header.entries):
                block = reader.read(n.bucket, n.key, e.offset, e.offset + e.length)
                for _ts, k, v, h in decode_records(block, verify_batch_block(block, e, index=i)):
                    got[(k, v, h)] += 1
            res.objects += 1
            res.bytes_stored += n.size
    finally:
        c.close()
    if got != expected:
        missing = sum((expected - got).values())
        extra = sum((got - expected).values())
        raise MemqError(
            f"read back differs from what was produced: {missing} missing, {extra} unexpected"
        )
    res.timings["read back (Kafka + S3)"] = time.perf_counter() - t0
    say(
        f"read {res.objects} notifications from Kafka and their objects from S3: all records, byte-exact"
    )
    res.checks.append(
        f"{res.objects} objects ({res.bytes_stored:,} bytes) range-read and CRC-verified against their "
        "notifications; records equal to those produced"
    )


def _backfill(
    state: StackState, topic: str, expected: Counter[Any], res: DemoResult, say: Say
) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyarrow.dataset as ds
    from pyspark.sql import SparkSession

    from memq.spark.backfill import run_backfill

    t0 = time.perf_counter()
    say("starting Spark (local[*]) for the backfill...")
    session = (
        SparkSession.builder.master("local[*]")
        .appName("memq-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    tmp = tempfile.mkdtemp(prefix="memq-demo-backfill-")
    try:
        out = tmp + "/parquet"
        options = {
            "bucket": state.bucket,
            "cluster": CLUSTER,
            "topic": topic,
            "endpoint_url": state.s3_endpoint,
            "region": "us-east-1",
        }
        result = run_backfill(session, options, out)
        table = ds.dataset(out, format="parquet", partitioning="hive").to_table(
            columns=["key", "value", "headers"]
        )
        got = Counter(
            (r["key"], r["value"], None if r["headers"] is None else tuple(sorted(r["headers"])))
            for r in table.to_pylist()
        )
    finally:
        session.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if got != expected:
        raise MemqError(f"backfill differs from what was produced ({sum(got.values())} rows)")
    res.backfill_records = result.records
    res.timings["Spark backfill to Parquet"] = time.perf_counter() - t0
    say(
        f"Spark backfilled {result.records:,} records from {result.objects} objects to "
        "Parquet (checked, then removed)"
    )
    res.checks.append(
        f"Spark backfill read {result.objects} objects straight from S3: "
        f"{result.records:,} records, equal to those produced"
    )


def run_demo(
    state: StackState, *, records: int = 20_000, say: Say = print, backfill: bool = True
) -> DemoResult:
    # The stack's throwaway S3 credentials, for boto3 here and in Spark's workers.
    os.environ.update({k: v for k, v in state.aws_env().items() if not os.environ.get(k)})
    topic = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    res = DemoResult(topic=topic, records=records)
    recs = _records(records, seed=7)
    expected: Counter[Any] = Counter(
        (k, v, None if h is None else tuple(sorted(h.items()))) for k, v, h in recs
    )
    _produce(state, topic, recs, res, say)
    _consume(state, topic, expected, res, say)
    _read_back(state, topic, expected, res, say)
    if backfill:
        _backfill(state, topic, expected, res, say)
    _audit(state, topic, res, say)
    return res


def demo_with_stack(
    stack: DevStack,
    *,
    keep: bool,
    say: Say,
    report: Callable[[DemoResult, bool], None] | None = None,
    **kw: Any,
) -> DemoResult:
    """Run the demo on the running stack, or on one started (and stopped) for it.

    ``report(result, stack_stops)`` runs while the stack is still up (its dashboard
    URL still answers), before a stack started here is stopped.
    """
    state = stack.load()
    started = state is None
    if state is None:
        say(
            "starting the local stack (moto S3, Apache Kafka, ZooKeeper, 3 MemQ brokers, auditor)..."
        )
        state = stack.up(progress=say, brokers=3)
    try:
        res = run_demo(state, say=say, **kw)
        if report is not None:
            report(res, started and not keep)
        return res
    finally:
        if started and not keep:
            say("stopping the local stack...")
            stack.down(progress=say)
