"""Retention end to end on the real local stack (moto S3, Apache Kafka, ZooKeeper): the retention
job deletes exactly the expired objects and the orphans older than the grace, --dry-run
deletes nothing, topic update of retention.ms reaches Kafka or fails saying why,
--purge leaves nothing behind, lifecycle rules round-trip through S3."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from memq import Producer
from memq.cli.main import app
from memq.client.admin import AdminClient
from memq.config import NotificationConfig
from memq.devstack import StackState
from memq.errors import InvalidRequestError, MemqError
from memq.formats import Notification, batch_id, decode_batch_header, encode_batch, encode_block
from memq.formats.keys import hour_of, object_key
from memq.retention import DAY_MS, HOUR_MS, TAG_KEY
from memq.run.broker import BrokerThread
from memq.storage_handlers.kafka_sink import KafkaNotificationSink
from memq.storage_handlers.kafka_topics import describe_topic
from memq.storage_handlers.s3 import S3Config, S3Writer
from memq.testing import broker_config

CLUSTER = "test"


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str) -> Iterator[BrokerThread]:
    """One clustered broker (ZooKeeper in its own chroot) writing to a fresh bucket."""
    chroot = f"/memq-test/{uuid.uuid4().hex[:10]}"
    b = BrokerThread(
        broker_config(
            memq_stack,
            bucket=s3_bucket,
            broker_id="r0",
            batch_ms=100,
            zookeeper={"connect": memq_stack.zk_connect, "chroot": chroot},
        )
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=memq_stack.zk_connect)
        zk.start(timeout=10)
        try:
            zk.delete(chroot, recursive=True)
        except Exception:
            pass
        finally:
            zk.stop()
            zk.close()


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def wait(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def keys_of(stack: StackState, bucket: str, topic: str) -> set[str]:
    s3 = stack.s3_client()
    out: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out |= {o["Key"] for o in page.get("Contents", []) if f"/topics/{topic}/" in o["Key"]}
    return out


class Direct:
    """Writes batch objects of a topic straight to S3 the way a broker does (with old
    creation times), and their notifications to the topic's notification topic."""

    def __init__(self, stack: StackState, bucket: str, topic: str) -> None:
        self.stack, self.bucket, self.topic = stack, bucket, topic
        self.seq = 0
        self.sink = KafkaNotificationSink(
            NotificationConfig(bootstrap_servers=stack.kafka_bootstrap)
        )

    def write(
        self, created_ms: int, *, notify: bool = True, hashed: bool = True
    ) -> tuple[str, int]:
        cfg = S3Config(
            bucket=self.bucket,
            endpoint_url=self.stack.s3_endpoint,
            region="us-east-1",
            use_hash_prefix=hashed,
        )
        block = encode_block(
            [(created_ms, None, b"v%d" % self.seq, None)], producer_id=7, epoch=1, sequence=self.seq
        )
        data = encode_batch([block])
        bid = batch_id(created_ms, "direct", self.seq)
        self.seq += 1
        stored = S3Writer(cfg, CLUSTER).store(self.topic, bid, created_ms, data)
        if notify:
            h = decode_batch_header(data)
            note = Notification(
                topic=self.topic,
                cluster=CLUSTER,
                broker="direct",
                storage="s3",
                bucket=self.bucket,
                key=stored.key,
                size=stored.size,
                block_count=h.block_count,
                record_count=h.record_count,
                min_timestamp=h.min_timestamp,
                max_timestamp=h.max_timestamp,
                checksum=h.crc,
                batch_id=bid,
                created_at=created_ms,
            )
            self.sink.publish(f"memq.{CLUSTER}.{self.topic}.notifications", note).result(30)
        return stored.key, stored.size

    def close(self) -> None:
        self.sink.close()


def not_near_an_hour_end(margin_ms: int = 30_000) -> int:
    """Now, after waiting out the last ``margin_ms`` of an hour (so "this hour" does not
    end while a test runs)."""
    now = int(time.time() * 1000)
    left = HOUR_MS - now % HOUR_MS
    if left < margin_ms:
        time.sleep(left / 1000 + 1)
        now = int(time.time() * 1000)
    return now


def test_retention_job_deletes_expired_partitions_and_old_orphans_only(
    memq_stack: StackState, s3_bucket: str, broker: BrokerThread, unique_name: Any
) -> None:
    topic = unique_name("ret")
    admin = AdminClient([broker.address])
    admin.create_topic(
        topic, {"retention.ms": 3000, "min_writers": 1, "storage.s3.tag_retention": True}
    )
    nt = f"memq.{CLUSTER}.{topic}.notifications"
    # The notification topic was created keeping pointers retention.ms + 1 day.
    assert describe_topic(memq_stack.kafka_bootstrap, nt).retention_ms == 3000 + DAY_MS
    wait("a writer", lambda: topic in (broker.server.processors if broker.server else {}))
    now = not_near_an_hour_end()

    with Producer({"bootstrap.servers": broker.address}) as p:
        acked = {p.produce(topic, b"fresh-%d" % i).result(30).key for i in range(5)}
    s3 = memq_stack.s3_client()
    some = next(iter(acked))
    tags = s3.get_object_tagging(Bucket=s3_bucket, Key=some)["TagSet"]
    assert {"Key": TAG_KEY, "Value": "1"} in tags  # retention class for lifecycle rules

    direct = Direct(memq_stack, s3_bucket, topic)
    try:
        expired = {
            direct.write(now - 3 * HOUR_MS),
            direct.write(now - 3 * HOUR_MS + 1),
            direct.write(now - 2 * HOUR_MS, hashed=False),  # the other key layout
            direct.write(now - 2 * HOUR_MS + 1),
        }
        kept_direct = {direct.write(now)}
        old_orphan = direct.write(now, notify=False)
        # (an object's age is its S3 upload time: the old orphan ages past the 4 s grace)
        time.sleep(5.5)
    finally:
        direct.close()
    before = keys_of(memq_stack, s3_bucket, topic)
    expired_keys = {k for k, _ in expired}
    assert expired_keys | acked | {k for k, _ in kept_direct} | {old_orphan[0]} == before

    args = ["retention", "run", "-t", topic, "-b", broker.address, "--orphan-grace-ms", "4000"]
    dry = cli(*args, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    (report,) = json.loads(dry.output)["topics"]
    assert keys_of(memq_stack, s3_bucket, topic) == before  # nothing deleted
    assert report["objects_deleted"] == 4 and report["bytes_deleted"] == sum(s for _, s in expired)
    assert [o["key"] for o in report["orphans"]] == [old_orphan[0]]
    hours = sorted({"dt={}/hh={}".format(*hour_of(now - h * HOUR_MS)) for h in (2, 3)})
    assert sorted(p["partition"] for p in report["partitions"]) == hours
    assert {p["reason"] for p in report["partitions"]} == {"retention.ms"}

    # A young orphan (within the grace), written right before the real run: the dry run
    # took up to several seconds on a loaded CI machine, enough to age it past the grace.
    young_orphan = direct.write(int(time.time() * 1000), notify=False)
    done = cli(*args)
    assert done.exit_code == 0, done.output
    assert "deleted 4 objects" in done.output and f"orphan {old_orphan[0]}" in done.output
    after = keys_of(memq_stack, s3_bucket, topic)
    assert after == (before | {young_orphan[0]}) - expired_keys - {old_orphan[0]}
    assert young_orphan[0] in after and acked <= after

    # Idempotent: nothing left to delete (with a grace the young orphan is within).
    again = cli(*args[:-1], "600000", "--json")
    assert again.exit_code == 0, again.output
    (second,) = json.loads(again.output)["topics"]
    assert second["objects_deleted"] == 0 and second["orphans_deleted"] == 0
    assert second["errors"] == []


def test_retention_bytes_deletes_oldest_partitions_until_the_topic_fits(
    memq_stack: StackState, s3_bucket: str, broker: BrokerThread, unique_name: Any
) -> None:
    topic = unique_name("rb")
    admin = AdminClient([broker.address])
    admin.create_topic(topic, {"retention.ms": -1, "min_writers": 1})
    now = not_near_an_hour_end()
    direct = Direct(memq_stack, s3_bucket, topic)
    try:
        objs = [direct.write(now - h * HOUR_MS) for h in (5, 4, 3, 0)]
    finally:
        direct.close()
    size = objs[0][1]
    admin.update_topic(topic, {"retention.bytes": 2 * size})
    res = cli("retention", "run", "-t", topic, "-b", broker.address, "--no-orphans", "--json")
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.output)["topics"]
    assert report["retention_ms"] is None and report["retention_bytes"] == 2 * size
    assert {p["reason"] for p in report["partitions"]} == {"retention.bytes"}
    assert keys_of(memq_stack, s3_bucket, topic) == {objs[2][0], objs[3][0]}


def test_topic_update_of_retention_reaches_kafka_or_fails_saying_why(
    memq_stack: StackState, broker: BrokerThread, unique_name: Any
) -> None:
    admin = AdminClient([broker.address])
    topic = unique_name("ru")
    admin.create_topic(
        topic, {"retention.ms": 3000, "min_writers": 1, "storage.s3.tag_retention": True}
    )
    res = cli(
        "topic", "update", topic, "--set", f"retention.ms={10 * DAY_MS}", "-b", broker.address
    )
    assert res.exit_code == 0, res.output
    nt = f"memq.{CLUSTER}.{topic}.notifications"
    assert describe_topic(memq_stack.kafka_bootstrap, nt).retention_ms == 11 * DAY_MS
    desc = cli("topic", "describe", topic, "-b", broker.address, "--json")
    assert desc.exit_code == 0, desc.output
    d = json.loads(desc.output)
    assert d["settings"]["retention"] == {"ms": 10 * DAY_MS, "bytes": None}
    assert d["notification_kafka"]["partitions"] == 2  # the real count, as Kafka reports it
    assert d["notification_kafka"]["retention_ms"] == 11 * DAY_MS
    table = cli("topic", "describe", topic, "-b", broker.address)
    assert "notification retention.ms (Kafka)" in table.output and str(11 * DAY_MS) in table.output

    # Lowering keeps Kafka's longer retention (pointers must outlive objects, never less).
    admin.update_topic(topic, {"retention.ms": DAY_MS})
    assert describe_topic(memq_stack.kafka_bootstrap, nt).retention_ms == 11 * DAY_MS

    # A notification topic MemQ may not create and that does not exist: the update fails,
    # saying why, and nothing is stored.
    other = unique_name("rx")
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    admin.create_topic(
        other,
        {
            "min_writers": 1,
            "notification.create_topic": False,
            "notification.topic": missing,
            # The broker shares one notification sink among topics with the same Kafka
            # settings, and that sink creates missing topics with the first topic's
            # create_topic/partitions: a setting of its own keeps this topic's sink apart.
            "notification.delivery_timeout_ms": 6000,
        },
    )
    with pytest.raises(MemqError, match=rf"not changed.*{missing}.*does not exist"):
        admin.update_topic(other, {"retention.ms": 5 * DAY_MS})
    assert admin.describe_topic(other)["settings"]["retention"]["ms"] == 7 * DAY_MS
    failed = cli("topic", "update", other, "--set", "retention.ms=5000", "-b", broker.address)
    assert failed.exit_code != 0
    assert "does not exist" in str(failed.exception)
    admin.delete_topic(other)


def test_an_operators_notification_topic_shows_kafkas_default_retention_until_raised(
    memq_stack: StackState, broker: BrokerThread, unique_name: Any
) -> None:
    """A notification topic the operator made (notification.create_topic off) with
    Kafka's default retention: describe-configs reports Kafka's 7 days, which `memq topic
    describe` shows; raising retention.ms past it alters the topic (read back); a
    retention within it leaves Kafka's alone."""
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic

    nt = unique_name("ops-notes")
    kafka = KafkaAdmin({"bootstrap.servers": memq_stack.kafka_bootstrap})
    kafka.create_topics([NewTopic(nt, 3, 1)])[nt].result(30)
    try:
        admin = AdminClient([broker.address])
        topic = unique_name("ops")
        admin.create_topic(topic, {"min_writers": 1, "retention.ms": 2 * DAY_MS,
                                   "notification.create_topic": False,
                                   "notification.topic": nt,
                                   "notification.partitions": 3})  # fmt: skip
        state = describe_topic(memq_stack.kafka_bootstrap, nt)
        assert (state.partitions, state.retention_ms, state.retention_note) == (3, 7 * DAY_MS, None)
        d = json.loads(cli("topic", "describe", topic, "-b", broker.address, "--json").output)
        assert d["notification_kafka"]["retention_ms"] == 7 * DAY_MS
        admin.update_topic(topic, {"retention.ms": 5 * DAY_MS})  # + 1 day: within 7 days
        assert describe_topic(memq_stack.kafka_bootstrap, nt).retention_ms == 7 * DAY_MS
        admin.update_topic(topic, {"retention.ms": 9 * DAY_MS})
        assert describe_topic(memq_stack.kafka_bootstrap, nt).retention_ms == 10 * DAY_MS
        d = json.loads(cli("topic", "describe", topic, "-b", broker.address, "--json").output)
        assert d["notification_kafka"]["retention_ms"] == 10 * DAY_MS
        admin.delete_topic(topic)
    finally:
        kafka.delete_topics([nt])[nt].result(30)


def test_delete_with_purge_leaves_nothing_and_without_says_what_is_left(
    memq_stack: StackState, s3_bucket: str, broker: BrokerThread, unique_name: Any
) -> None:
    admin = AdminClient([broker.address])
    topic, kept = unique_name("pg"), unique_name("pk")
    for t in (topic, kept):
        admin.create_topic(t, {"min_writers": 1, "batch.ms": 200})
    wait("writers", lambda: {topic, kept} <= set(broker.server.processors if broker.server else {}))
    with Producer({"bootstrap.servers": broker.address}) as p:
        for i in range(5):
            p.produce(topic, b"x%d" % i).result(30)
            p.produce(kept, b"y%d" % i).result(30)
    with Producer({"bootstrap.servers": broker.address, "acks": "1"}) as p:
        p.produce(topic, b"maybe still in the open batch at delete").result(30)
    direct = Direct(memq_stack, s3_bucket, topic)
    try:
        direct.write(int(time.time() * 1000) - 5 * HOUR_MS, hashed=False)
    finally:
        direct.close()
    assert keys_of(memq_stack, s3_bucket, topic)

    res = cli("topic", "delete", topic, "--yes", "--purge", "-b", broker.address)
    assert res.exit_code == 0, res.output
    assert keys_of(memq_stack, s3_bucket, topic) == set()
    nt = f"memq.{CLUSTER}.{topic}.notifications"
    assert not describe_topic(memq_stack.kafka_bootstrap, nt).exists
    assert topic not in admin.list_topics()

    res = cli("topic", "delete", kept, "--yes", "-b", broker.address)
    assert res.exit_code == 0, res.output
    assert f"s3://{s3_bucket}/{CLUSTER}/topics/{kept}/" in res.output
    assert f"s3://{s3_bucket}/{{00..ff}}/{CLUSTER}/topics/{kept}/" in res.output
    assert (
        f"memq.{CLUSTER}.{kept}.notifications on Kafka {memq_stack.kafka_bootstrap}" in res.output
    )
    assert keys_of(memq_stack, s3_bucket, kept)  # left, as it says
    # Its name stays taken while its data is there: a new topic would read it back (the
    # old records came back in a re-created topic, and a purge found no topic).
    with pytest.raises(InvalidRequestError, match="deleted without --purge"):
        admin.create_topic(kept)
    assert broker.server is not None  # (a refused admin request is no bad client)
    errors = broker.server.metrics.errors
    assert errors.labels("admin")._value.get() >= 1 and errors.labels("protocol")._value.get() == 0
    with Producer({"bootstrap.servers": broker.address}) as p, pytest.raises(MemqError):
        p.produce(kept, b"new").result(30)  # nor auto-created
    res = cli("topic", "delete", kept, "--yes", "--purge", "-b", broker.address)
    assert res.exit_code == 0, res.output
    assert keys_of(memq_stack, s3_bucket, kept) == set()
    assert not describe_topic(
        memq_stack.kafka_bootstrap, f"memq.{CLUSTER}.{kept}.notifications"
    ).exists
    admin.create_topic(kept, {"min_writers": 1})  # the name is free again, and empty
    with Producer({"bootstrap.servers": broker.address}) as p:
        p.produce(kept, b"fresh").result(30)
    assert len(keys_of(memq_stack, s3_bucket, kept)) == 1
    res = cli("topic", "delete", "never-was", "--yes", "--purge", "-b", broker.address)
    assert res.exit_code == 1 and "'never-was' does not exist" in str(res.exception)


def test_apply_lifecycle_writes_one_rule_per_retention_class(
    memq_stack: StackState, s3_bucket: str, broker: BrokerThread, unique_name: Any
) -> None:
    admin = AdminClient([broker.address])
    tagged = {"min_writers": 1, "storage.s3.tag_retention": True}
    admin.create_topic(unique_name("l3"), {"retention.ms": 3 * DAY_MS - 5, **tagged})
    admin.create_topic(unique_name("l1"), {"retention.ms": 5000, **tagged})
    admin.create_topic(unique_name("lf"), {"retention.ms": -1, **tagged})  # no class
    s3 = memq_stack.s3_client()
    foreign = {
        "ID": "logs-30d",
        "Status": "Enabled",
        "Filter": {"Prefix": "logs/"},
        "Expiration": {"Days": 30},
    }
    s3.put_bucket_lifecycle_configuration(
        Bucket=s3_bucket, LifecycleConfiguration={"Rules": [foreign]}
    )
    dry = cli(
        "retention",
        "apply-lifecycle",
        "--bucket",
        s3_bucket,
        "-b",
        broker.address,
        "--dry-run",
        "--json",
    )
    assert dry.exit_code == 0, dry.output
    assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]] == [
        "logs-30d"
    ]

    res = cli(
        "retention",
        "apply-lifecycle",
        "--bucket",
        s3_bucket,
        "-b",
        broker.address,
        "--days",
        "14",
        "--json",
    )
    assert res.exit_code == 0, res.output
    written = json.loads(res.output)["rules"]
    got = s3.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert [r["ID"] for r in got] == [
        "logs-30d",
        "memq-retention-1d",
        "memq-retention-3d",
        "memq-retention-14d",
    ]
    for sent, back in zip(written, got, strict=True):  # the document round-trips
        assert back["ID"] == sent["ID"] and back["Status"] == "Enabled"
        assert back["Expiration"] == sent["Expiration"]
        assert back["Filter"] == sent["Filter"]
    assert got[2]["Filter"] == {"Tag": {"Key": TAG_KEY, "Value": "3"}}
    assert got[2]["Expiration"] == {"Days": 3}

    # Run again without --days: the 14-day class stays (objects may carry its tag) unless pruned.
    again = cli("retention", "apply-lifecycle", "--bucket", s3_bucket, "-b", broker.address)
    assert again.exit_code == 0, again.output
    assert "memq-retention-14d" in {
        r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    }
    pruned = cli(
        "retention", "apply-lifecycle", "--bucket", s3_bucket, "-b", broker.address, "--prune"
    )
    assert pruned.exit_code == 0, pruned.output
    ids = [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]]
    assert ids == ["logs-30d", "memq-retention-1d", "memq-retention-3d"]


def test_s3_and_filesystem_delete_many(
    memq_stack: StackState, s3_bucket: str, tmp_path: Any, monkeypatch: Any
) -> None:
    import memq.storage_handlers.s3 as s3mod
    from memq.storage_handlers.filesystem import FilesystemConfig, FilesystemWriter

    monkeypatch.setattr(s3mod, "DELETE_BATCH", 2)  # several DeleteObjects requests
    cfg = S3Config(bucket=s3_bucket, endpoint_url=memq_stack.s3_endpoint, region="us-east-1")
    w = S3Writer(cfg, CLUSTER)
    keys = [
        w.store("t", batch_id(1_763_776_800_000 + i, "b", i), 1_763_776_800_000, b"x" * 10).key
        for i in range(5)
    ]
    res = w.delete_many([*keys, "no/such/key"])
    assert set(res.deleted) == {*keys, "no/such/key"} and res.failed == ()
    assert keys_of(memq_stack, s3_bucket, "t") == set()

    fs = FilesystemWriter(FilesystemConfig(root=str(tmp_path), fsync=False), CLUSTER)
    fkeys = [
        fs.store("t", batch_id(1_763_776_800_000, "b", i), 1_763_776_800_000, b"y").key
        for i in range(3)
    ]
    res = fs.delete_many(fkeys[:2])
    assert set(res.deleted) == set(fkeys[:2])
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [fkeys[2].rsplit("/", 1)[1]]
    fs.delete_many(fkeys[2:])
    assert list(tmp_path.iterdir()) == []  # empty directories removed too
    assert object_key(CLUSTER, "t", batch_id(1, "b", 0), 1, use_hash_prefix=False).startswith(
        CLUSTER
    )
