"""``Consumer.consume_batch`` against real servers: the records ``consume`` hands out, as
columns, with the same commits and dedup."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.consumer.message import RecordBatch
from memq.devstack import StackState
from memq.errors import ConfigError
from memq.formats.notification import encode_notification
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.helpers import read_notifications

N = 4000


@pytest.fixture
def setup(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> Iterator[tuple[BrokerThread, str, list[tuple[Any, ...]]]]:
    """A one-partition topic holding N records (keys, headers, timestamps) in several
    objects, each object announced twice (as a notification retry can do)."""
    from confluent_kafka import Producer as KafkaProducer

    topic = unique_name("cb")
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=64 * 1024, batch_ms=50,
        partitions=1,
    )  # fmt: skip
    records = [
        (
            1_700_000_000_000 + i,
            None if i % 3 else b"k%d" % i,
            b"cb-%05d-" % i + b"x" * (i % 300),
            (("h", b"%d" % i), ("n", None)) if i % 7 == 0 else None,
        )
        for i in range(N)
    ]
    with BrokerThread(cfg) as b:
        with Producer({"bootstrap.servers": b.address, "linger.ms": 5}) as p:
            for part in range(4):  # an object per part at least (flushed in between)
                for ts, k, v, h in records[part * N // 4 : (part + 1) * N // 4]:
                    p.produce(topic, v, key=k, headers=h, timestamp=ts)
                assert p.flush(60) == 0
        notify_topic = cfg.topics[0].notification_topic(cfg.cluster)
        notes = read_notifications(memq_stack.kafka_bootstrap, notify_topic, expected=4)
        kp = KafkaProducer({"bootstrap.servers": memq_stack.kafka_bootstrap})
        for n in notes:
            kp.produce(notify_topic, encode_notification(n), partition=0)
        assert kp.flush(30) == 0
        yield b, topic, records


def rows(batch: RecordBatch) -> list[tuple[Any, ...]]:
    return list(zip(batch.timestamps, batch.keys, batch.values, batch.headers, strict=True))


def drain_batches(c: Consumer, n: int, size: int, settle: float = 2.0) -> list[RecordBatch]:
    out: list[RecordBatch] = []
    deadline = time.monotonic() + 60
    while sum(map(len, out)) < n and time.monotonic() < deadline:
        out.append(c.consume_batch(size, 1.0))
    out.append(c.consume_batch(size, settle))  # nothing more: "once" can be asserted
    return [b for b in out if b]


def test_consume_batch_hands_out_what_consume_does_with_commits_and_dedup(
    setup: tuple[BrokerThread, str, list[tuple[Any, ...]]], unique_name: Any
) -> None:
    b, topic, records = setup
    conf = {"bootstrap.servers": b.address, "auto.offset.reset": "earliest"}
    # The reference: consume(), every record once (the second copies dropped).
    with Consumer(conf) as c:
        c.assign([(topic, 0, 0)])
        want: list[Any] = []
        deadline = time.monotonic() + 60
        while len(want) < N and time.monotonic() < deadline:
            want.extend(c.consume(1000, 1.0))
        want.extend(c.consume(1000, 2.0))
    assert Counter((m.timestamp, m.key, m.value, m.headers) for m in want) == Counter(records)

    with Consumer(conf) as c:
        c.assign([(topic, 0, 0)])
        with pytest.raises(ConfigError, match="max_records"):
            c.consume_batch(0)
        batches = drain_batches(c, N, 333)
        stats = c.stats
    assert all(len(x) <= 333 for x in batches)
    got = [r for x in batches for r in rows(x)]
    assert Counter(got) == Counter(records)  # exactly once, the copies dropped
    assert [m for x in batches for m in x.messages()] == want  # same records, same order
    assert [i for x in batches for i in x.ids()] == [m.id for m in want]
    assert stats.records == N and stats.duplicate_records_dropped == N

    # Commits: a group member reads 1500 records (consume_batch, or consume), commits,
    # and a new member carries on with consume(): the same records either way.
    def split(batched: bool) -> tuple[list[Any], list[Any]]:
        group = {**conf, "group.id": unique_name("cbg"), "enable.auto.commit": False}
        with Consumer(group) as c:
            c.assign([(topic, 0, None)])
            first: list[Any] = []
            deadline = time.monotonic() + 60
            while len(first) < 1500 and time.monotonic() < deadline:
                n = min(500, 1500 - len(first))
                first.extend(c.consume_batch(n, 1.0).messages() if batched else c.consume(n, 1.0))
            c.commit()
        with Consumer(group) as c:
            c.assign([(topic, 0, None)])
            rest: list[Any] = []
            deadline = time.monotonic() + 60
            # To the end: every record seen, then an empty poll (a slow first fetch on a
            # busy machine is not the end).
            wanted = set(records)
            seen = {(m.timestamp, m.key, m.value, m.headers) for m in first}
            while time.monotonic() < deadline:
                more = c.consume(1000, 2.0)
                if not more and wanted <= seen:
                    break
                rest.extend(more)
                seen.update((m.timestamp, m.key, m.value, m.headers) for m in more)
        return first, rest

    first, rest = split(batched=True)
    assert len(first) == 1500 and first == want[:1500]
    # At least once: nothing is lost across the commit.
    assert set(records) <= {(m.timestamp, m.key, m.value, m.headers) for m in first + rest}
    assert (first, rest) == split(batched=False)


def test_blocks_of_both_formats_read_the_same_and_to_arrow_shares_version_2_values(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    """Producers writing block format 1 and 2 to one topic: the consumer hands out every
    record once, the same either way; ``to_arrow()`` holds them all, and the values of
    format 2 blocks are the fetched bytes themselves (Arrow allocates none for them)."""
    import pyarrow as pa

    topic = unique_name("cb2")
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=256 * 1024, batch_ms=50,
        partitions=1,
    )  # fmt: skip
    sent: dict[int, list[tuple[Any, ...]]] = {1: [], 2: []}
    with BrokerThread(cfg) as b:
        for version in (1, 2):
            conf = {"bootstrap.servers": b.address, "linger.ms": 5, "block.version": version}
            with Producer(conf) as p:
                for i in range(1500):
                    rec = (
                        1_700_000_000_000 + i,
                        None if i % 4 else b"k%d" % i,
                        b"v%d-%d-" % (version, i) + bytes([i % 256]) * (i % 900),
                        (("h", b"%d" % i),) if i % 5 == 0 else None,
                    )
                    sent[version].append(rec)
                    p.produce(topic, rec[2], key=rec[1], headers=rec[3], timestamp=rec[0])
                assert p.flush(60) == 0
        conf = {"bootstrap.servers": b.address, "auto.offset.reset": "earliest"}
        with Consumer(conf) as c:
            c.assign([(topic, 0, 0)])
            batches = drain_batches(c, 3000, 700)
    got = [r for batch in batches for r in rows(batch)]
    want = sent[1] + sent[2]
    assert Counter(got) == Counter(want) and len(got) == len(want)
    # Both formats really were read: the chunks' value columns say which.
    kinds = {type(ch.values).__name__ for batch in batches for ch in batch.chunks}
    assert kinds == {"tuple", "BinaryColumn"}
    before = pa.total_allocated_bytes()
    tables = [batch.to_arrow() for batch in batches]
    grown = pa.total_allocated_bytes() - before
    chunks = [ch for batch in batches for ch in batch.chunks]
    v1_bytes, v2_bytes = (sum(len(v) for _, _, v, _ in sent[k]) for k in (1, 2))
    viewed = sum(ch.values.nbytes() for ch in chunks if type(ch.values).__name__ == "BinaryColumn")
    assert viewed == v2_bytes  # (format 2 values stayed views: only consume_batch() ran)
    assert grown < v1_bytes + v2_bytes // 4  # (format 1's values are copied in, not 2's)
    table = pa.concat_tables(tables)
    assert table.num_rows == len(want)
    arrow_rows = [
        (
            round(r["timestamp"].timestamp() * 1000),
            r["key"],
            r["value"],
            None if r["headers"] is None else tuple((h["name"], h["value"]) for h in r["headers"]),
        )
        for r in table.to_pylist()
    ]
    assert Counter(arrow_rows) == Counter(want)
    assert set(table.column("partition").to_pylist()) == {0}
    assert sum(b.value_bytes() for b in batches) == v1_bytes + v2_bytes
