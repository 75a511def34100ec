"""Clustered brokers on real ZooKeeper, Kafka protocol and S3 (issue 5)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Producer
from memq.client.admin import AdminClient
from memq.devstack import StackState
from memq.devstack.brokers import start_broker
from memq.devstack.procs import ProcessRef, free_port, is_alive, stop, wait_for
from memq.devstack.services import ZooKeeperService
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.helpers import read_objects


def cluster_config(
    stack: StackState, bucket: str, zk: str, chroot: str, broker_id: str, **kw: Any
) -> Any:
    return broker_config(
        stack,
        bucket=bucket,
        broker_id=broker_id,
        batch_ms=200,
        zookeeper={"connect": zk, "chroot": chroot, "session_timeout_ms": 6000},
        **kw,
    )


@pytest.fixture
def chroot(memq_stack: StackState) -> Iterator[str]:
    path = f"/memq-test/{uuid.uuid4().hex[:10]}"
    yield path
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=memq_stack.zk_connect)
    zk.start(timeout=10)
    try:
        zk.delete(path, recursive=True)
    except Exception:  # nothing was created under it
        pass
    finally:
        zk.stop()
        zk.close()


@pytest.fixture
def three(memq_stack: StackState, s3_bucket: str, chroot: str) -> Iterator[list[BrokerThread]]:
    brokers = [
        BrokerThread(cluster_config(memq_stack, s3_bucket, memq_stack.zk_connect, chroot, f"b{i}"))
        for i in range(3)
    ]
    for b in brokers:
        b.start()
    try:
        yield brokers
    finally:
        for b in brokers:
            if b.server is not None and not b.server.draining:
                b.stop()


def writing(brokers: list[BrokerThread], topic: str) -> set[str]:
    return {
        b.config.broker_id
        for b in brokers
        if b.server is not None and not b.server.draining and topic in b.server.processors
    }


def until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    wait_for(lambda: True if check() else None, timeout=timeout, what=what)


def test_topic_admin_reaches_brokers_without_restarts(
    three: list[BrokerThread], unique_name: Any
) -> None:
    admin = AdminClient([b.address for b in three])
    topic = unique_name("adm")
    cfg = admin.create_topic(topic, {"expected_mbps": 5})
    assert cfg["min_writers"] == 2
    until("two writers", lambda: len(writing(three, topic)) == 2)
    with Producer({"bootstrap.servers": three[0].address}) as p:
        assert all(p.produce(topic, b"x%d" % i).result(30).key for i in range(20))
    admin.update_topic(topic, {"min_writers": 3, "batch.ms": 333})
    until(
        "three writers with the new batch.ms",
        lambda: (
            writing(three, topic) == {"b0", "b1", "b2"}
            and all(b.server.processors[topic].config.batch.ms == 333 for b in three)
        ),
    )  # type: ignore[union-attr]
    status = admin.cluster_status()
    assert sorted(status["topics"][topic]["writers"]) == ["b0", "b1", "b2"]
    assert status["governor"] in {"b0", "b1", "b2"} and status["capacity_mbps"] == 300
    assert topic in admin.list_topics()
    assert admin.describe_topic(topic)["notification"]["topic"].endswith(f"{topic}.notifications")
    with pytest.raises(Exception, match="already exists"):
        admin.create_topic(topic, {})
    assert admin.create_topic(topic, {}, if_not_exists=True)["name"] == topic
    with pytest.raises(Exception, match=r"batch\.bytes"):
        admin.update_topic(topic, {"batch.bytes": -5})  # validated: a clear error naming the key
    admin.delete_topic(topic)
    until("no writer", lambda: writing(three, topic) == set())


def test_governor_failover_keeps_assignments_valid(
    three: list[BrokerThread], unique_name: Any
) -> None:
    admin = AdminClient([b.address for b in three])
    topics = [unique_name(f"g{i}") for i in range(4)]
    for t in topics:
        admin.create_topic(t, {"expected_mbps": 1})
    until("all topics assigned", lambda: all(len(writing(three, t)) == 2 for t in topics))
    gov = admin.cluster_status()["governor"]
    victim = next(b for b in three if b.config.broker_id == gov)
    victim.stop()
    alive = [b for b in three if b is not victim]
    admin = AdminClient([b.address for b in alive])

    def valid() -> bool:
        s = admin.cluster_status()
        return s["governor"] not in (None, gov) and all(
            set(s["topics"][t]["writers"]) <= {b.config.broker_id for b in alive}
            and len(s["topics"][t]["writers"]) == 2
            for t in topics
        )

    until("a new governor and valid assignments", valid)
    for t in topics:
        until(f"{t} written by the survivors", lambda t=t: len(writing(alive, t)) == 2)


def expire_session(zk: Any, connect: str) -> None:
    """Make ZooKeeper expire ``zk``'s session (a second client with its id closes it)."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=connect, client_id=zk.client_id)
    other.start(timeout=10)
    other.stop()
    other.close()


def test_session_expiry_reregisters_the_broker(
    three: list[BrokerThread], memq_stack: StackState, unique_name: Any
) -> None:
    b = three[1]
    member = b.server.view  # type: ignore[union-attr]
    old_session = member.zk.client_id[0]
    registrations = member.registrations
    expire_session(member.zk, memq_stack.zk_connect)
    until(
        "re-registered under a new session",
        lambda: (
            member.registrations > registrations
            and member.zk.client_id[0] != old_session
            and member.zk.exists(member.layout.broker("b1")) is not None
            and member.zk.get(member.layout.broker("b1"))[1].ephemeralOwner
            == member.zk.client_id[0]
        ),
    )
    admin = AdminClient([x.address for x in three])
    until("visible again", lambda: "b1" in {x["id"] for x in admin.cluster_status()["brokers"]})
    topic = unique_name("after-expiry")
    admin.create_topic(topic, {"min_writers": 3})
    until("writes its topics again", lambda: "b1" in writing(three, topic))


def test_zookeeper_restart_brokers_reregister_and_keep_serving(
    memq_stack: StackState, s3_bucket: str, tmp_path: Path, unique_name: Any
) -> None:
    port = free_port()
    zk = ZooKeeperService().start(tmp_path / "zk", port)
    connect = f"127.0.0.1:{port}"
    brokers = [
        BrokerThread(cluster_config(memq_stack, s3_bucket, connect, "/memq/zkr", f"z{i}"))
        for i in range(2)
    ]
    try:
        for b in brokers:
            b.start()
        admin = AdminClient([b.address for b in brokers])
        topic = unique_name("zk")
        admin.create_topic(topic, {})
        until("assigned", lambda: len(writing(brokers, topic)) == 2)
        assert zk.process is not None
        stop(zk.process)
        time.sleep(8)  # an outage longer than the 6 s session timeout (the fault, not a sync)
        zk = ZooKeeperService().start(tmp_path / "zk", port, fresh=False)
        until(
            "both brokers registered again",
            lambda: {x["id"] for x in admin.cluster_status()["brokers"]} == {"z0", "z1"},
            timeout=60,
        )
        with Producer({"bootstrap.servers": brokers[0].address}) as p:
            assert p.produce(topic, b"after zk restart").result(60).key
    finally:
        for b in brokers:
            b.stop()
        if zk.process is not None:
            stop(zk.process)


def test_sigterm_with_zookeeper_gone_exits_within_deadline(
    memq_stack: StackState, s3_bucket: str, tmp_path: Path
) -> None:
    """A draining broker must not wait forever to deregister from an unreachable ZooKeeper."""
    port = free_port()
    zk = ZooKeeperService().start(tmp_path / "zk", port)
    cfg = cluster_config(memq_stack, s3_bucket, f"127.0.0.1:{port}", "/memq/gone", "g0")
    b = start_broker(
        tmp_path,
        "g0",
        cfg.model_dump(mode="json", by_alias=True, exclude_none=True),
        memq_stack.aws_env(),
    )
    ref = ProcessRef(b["pid"], b["start_time"])
    try:
        assert zk.process is not None
        stop(zk.process)
        os.kill(b["pid"], signal.SIGTERM)
        wait_for(lambda: True if not is_alive(ref) else None, timeout=30, what="broker exit")
    finally:
        stop(ref, timeout=5)
        if zk.process is not None:
            stop(zk.process)


def test_kill9_one_broker_under_acks_all_load(
    memq_stack: StackState, s3_bucket: str, chroot: str, tmp_path: Path, unique_name: Any
) -> None:
    procs = []
    for i in range(3):
        cfg = cluster_config(memq_stack, s3_bucket, memq_stack.zk_connect, chroot, f"k{i}")
        procs.append(
            start_broker(
                tmp_path,
                f"k{i}",
                cfg.model_dump(mode="json", by_alias=True, exclude_none=True),
                memq_stack.aws_env(),
            )
        )
    admin = AdminClient([p["endpoint"] for p in procs])
    topic = unique_name("kill")
    admin.create_topic(topic, {"expected_mbps": 2})

    def writers_of(a: AdminClient) -> list[str]:
        return list(a.cluster_status()["topics"].get(topic, {}).get("writers", []))

    until("two writers", lambda: len(writers_of(admin)) == 2)
    acked: list[tuple[float, bytes]] = []
    failed: list[BaseException] = []
    stop_event = threading.Event()
    lock = threading.Lock()

    def run(n: int) -> None:
        conf = {
            "bootstrap.servers": ",".join(p["endpoint"] for p in procs),
            "linger.ms": 5,
            "delivery.timeout.ms": 30_000,
            "request.timeout.ms": 10_000,
            "metadata.max.age.ms": 1000,
            "producer.id": 1000 + n,
        }
        with Producer(conf) as p:
            i = 0
            while not stop_event.is_set():
                v = b"p%d-%07d" % (n, i)

                def cb(err: Any, md: Any, v: bytes = v) -> None:
                    with lock:
                        (failed.append(err) if err else acked.append((time.monotonic(), v)))

                p.produce(topic, v, on_delivery=cb)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.02)  # a steady rate, not a synchronisation
            p.flush(60)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: True if len(acked) > 3000 else None, timeout=60, what="load running")
        writers = writers_of(admin)
        victim = next(p for p in procs if p["name"] == writers[0])
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(
            lambda: True if not is_alive(ProcessRef(victim["pid"], victim["start_time"])) else None,
            timeout=10,
            what="victim dead",
        )
        survivors = [p for p in procs if p is not victim]
        admin = AdminClient([p["endpoint"] for p in survivors])
        until(
            "reassigned",
            lambda: victim["name"] not in writers_of(admin) and len(writers_of(admin)) == 2,
            timeout=60,
        )
        wait_for(
            lambda: True if any(t > killed_at + 3 for t, _ in acked) else None,
            timeout=60,
            what="acks after the kill",
        )
    finally:
        stop_event.set()
        for t in threads:
            t.join(90)
        for p in procs:
            stop(ProcessRef(p["pid"], p["start_time"]), timeout=30)
    times = sorted(t for t, _ in acked)
    gaps = [b - a for a, b in itertools.pairwise(times) if b > killed_at - 1]
    gap = max(gaps, default=0.0)
    print(f"\nlongest stretch without a successful ack around the kill: {gap:.2f} s")
    assert gap <= 10.0
    # Every acked record is in S3; a record stored twice is a retried block, recognisable
    # by its (producer id, epoch, sequence).
    where: dict[bytes, list[tuple[int, int, int]]] = defaultdict(list)
    for o in read_objects(memq_stack.s3_client(), s3_bucket):
        for bh, recs in o.blocks:
            for r in recs:
                where[r[2]].append((bh.producer_id, bh.epoch, bh.sequence))
    missing = [v for _, v in acked if v not in where]
    assert not missing, f"{len(missing)} acked records are not in S3, e.g. {missing[:3]}"
    for v, places in where.items():
        if len(places) > 1:
            assert len(set(places)) == 1, f"{v!r} stored twice with different block identities"
    dupes = Counter(len(p) for p in where.values())
    print(
        f"records stored once: {dupes[1]}, retried duplicates: {sum(n for k, n in dupes.items() if k > 1)}"
    )


def _memq(*args: str, env: dict[str, str] | None = None) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_topic_and_cluster_commands(three: list[BrokerThread], unique_name: Any) -> None:
    import json

    b = ",".join(x.address for x in three)
    topic = unique_name("cli")
    proc = _memq(
        "topic",
        "create",
        topic,
        "-b",
        b,
        "--expected-mbps",
        "3",
        "--partitions",
        "2",
        "--set",
        "batch.ms=250",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    created = json.loads(proc.stdout)
    assert (created["batch"]["ms"], created["notification"]["partitions"]) == (250, 2)
    until("assigned", lambda: len(writing(three, topic)) == 2)
    status = json.loads(_memq("cluster", "status", "-b", b, "--json").stdout)
    assert {x["id"] for x in status["brokers"]} == {"b0", "b1", "b2"}
    assert len(status["topics"][topic]["writers"]) == 2
    table = _memq("cluster", "status", "-b", b).stdout
    assert "governor" in table and "b0" in table
    assert topic in _memq("topic", "list", "-b", b).stdout
    described = json.loads(_memq("topic", "describe", topic, "-b", b, "--json").stdout)
    assert described["notification"]["partitions"] == 2
    proc = _memq("topic", "update", topic, "-b", b, "--set", "ring_size=1")
    assert proc.returncode == 1 and "ring_size" in proc.stderr and "Traceback" not in proc.stderr
    assert _memq("topic", "delete", topic, "-b", b, "--yes").returncode == 0
    until("gone", lambda: writing(three, topic) == set())


def test_standalone_broker_explains_topic_admin(memq_stack: StackState, s3_bucket: str) -> None:
    import json

    # The dev stack's brokers are clustered (topic admin works there): a broker without a
    # zookeeper section is standalone.
    with BrokerThread(broker_config(memq_stack, bucket=s3_bucket)) as standalone:
        b = standalone.address
        status = json.loads(_memq("cluster", "status", "-b", b, "--json").stdout)
        assert status["standalone"] is True
        proc = _memq("topic", "create", "x", "-b", b)
        assert proc.returncode == 1 and "standalone" in proc.stderr


def test_a_topic_no_broker_has_memory_for_is_reported_then_placed_on_a_bigger_broker(
    memq_stack: StackState, s3_bucket: str, chroot: str, unique_name: Any
) -> None:
    """Placement knows buffer memory: a topic planned at 10 MB/s needs ~20 MB of pool per
    writer; brokers with a 16 MiB pool cannot take it (reported, never started there);
    a broker with room joins and gets it."""
    small = [
        BrokerThread(
            cluster_config(
                memq_stack,
                s3_bucket,
                memq_stack.zk_connect,
                chroot,
                f"s{i}",
                memory_limit_bytes=16 << 20,
                batch_bytes=4 << 20,
            )
        )
        for i in range(2)
    ]
    big: BrokerThread | None = None
    try:
        for b in small:
            b.start()
        admin = AdminClient([b.address for b in small])
        topic = unique_name("roomy")
        admin.create_topic(topic, {"expected_mbps": 10, "min_writers": 1})
        until("reported unplaced", lambda: admin.cluster_status()["unplaced"].get(topic) == 1)
        status = admin.cluster_status()["topics"][topic]
        assert status["writers"] == [] and status["unplaced_writers"] == 1
        assert status["shortfall_mbps"] == 10 and not writing(small, topic)
        assert admin.describe_topic(topic)["unplaced_writers"] == 1
        big = BrokerThread(
            cluster_config(
                memq_stack,
                s3_bucket,
                memq_stack.zk_connect,
                chroot,
                "big",
                memory_limit_bytes=256 << 20,
                batch_bytes=4 << 20,
            )
        )
        big.start()
        until("placed on the bigger broker", lambda: writing([*small, big], topic) == {"big"})
        until("no longer unplaced", lambda: topic not in admin.cluster_status()["unplaced"])
        # min_writers past the broker count is capped; the status says so (it was silent).
        wide = unique_name("wide")
        admin.create_topic(wide, {"min_writers": 5})
        until("placed", lambda: admin.cluster_status()["topics"].get(wide, {}).get("writers"))
        st = admin.cluster_status()
        placed = len(st["topics"][wide]["writers"])
        assert placed <= 3 and st["topics"][wide]["below_min_writers"] == 5 - placed
        assert st["below_min_writers"][wide] == 5 - placed
        assert topic not in st["below_min_writers"]  # (min_writers 1, placed)
    finally:
        for b in [*small, *([big] if big else [])]:
            if b.server is not None and not b.server.draining:
                b.stop()


def test_growing_read_partitions_is_applied_by_kafka_then_stored(
    three: list[BrokerThread], unique_name: Any, memq_stack: StackState
) -> None:
    """notification.partitions: Kafka's create_partitions applies it, then it is stored;
    shrinking is refused up front and changes nothing."""
    from memq.errors import InvalidRequestError
    from memq.storage_handlers.kafka_topics import describe_topic

    admin = AdminClient([b.address for b in three])
    topic = unique_name("parts")
    admin.create_topic(topic, {"notification.partitions": 2})
    nt = f"memq.test.{topic}.notifications"
    with pytest.raises(InvalidRequestError, match="can only grow"):
        admin.update_topic(topic, {"notification.partitions": 1})
    assert describe_topic(memq_stack.kafka_bootstrap, nt).partitions == 2
    assert (
        admin.update_topic(topic, {"notification.partitions": 4})["notification"]["partitions"] == 4
    )
    assert describe_topic(memq_stack.kafka_bootstrap, nt).partitions == 4
    assert admin.describe_topic(topic)["notification"]["partitions"] == 4


def test_grown_read_partitions_get_notifications_and_a_running_group_reads_them(
    three: list[BrokerThread], unique_name: Any, memq_stack: StackState
) -> None:
    """A topic on 2 read partitions with a consumer group reading it; notification.partitions
    grows to 4: the brokers publish to all 4 at once, the running member is assigned the
    new ones within the consumer's metadata refresh (10 s) and hands out every record,
    exactly once, from old and new partitions alike."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    from memq import Consumer

    admin = AdminClient([b.address for b in three])
    topic = unique_name("grow")
    admin.create_topic(topic, {"notification.partitions": 2, "min_writers": 2, "batch.ms": 50})
    until("two writers", lambda: len(writing(three, topic)) == 2)
    nt = f"memq.test.{topic}.notifications"
    kafka = KafkaConsumer({"bootstrap.servers": memq_stack.kafka_bootstrap, "group.id": "x"})

    def ends() -> dict[int, int]:
        n = len(kafka.list_topics(nt, timeout=10).topics[nt].partitions)
        return {p: kafka.get_watermark_offsets(TopicPartition(nt, p), timeout=10, cached=False)[1]
                for p in range(n)}  # fmt: skip

    c = Consumer({"bootstrap.servers": three[0].address, "group.id": unique_name("g"),
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 1000})  # fmt: skip
    c.subscribe(topic)
    got: list[Any] = []
    sent: list[bytes] = []

    def send(n: int) -> None:
        with Producer({"bootstrap.servers": three[0].address, "linger.ms": 5}) as p:
            for i in range(n):
                sent.append(b"%d-%s" % (len(sent), uuid.uuid4().hex[:8].encode()))
                p.produce(topic, sent[-1])
                if i % 50 == 49:
                    assert p.flush(30) == 0  # several objects per call
            assert p.flush(30) == 0

    send(300)
    until("the first records", lambda: got.extend(c.consume(500, 0.5)) or len(got) >= 300, 60)
    t0 = time.monotonic()
    admin.update_topic(topic, {"notification.partitions": 4})
    stored = time.monotonic() - t0

    def restarted_with_4() -> bool:
        procs = [b.server.processors.get(topic) for b in three if b.server is not None]
        live = [p for p in procs if p is not None]
        return len(live) == 2 and all(p.config.notification.partitions == 4 for p in live)

    until("the writers restarted with 4 partitions", restarted_with_4)
    restarted = time.monotonic() - t0
    before = ends()
    rounds = 0
    while not all(ends().get(p, 0) > 0 for p in (2, 3)):  # published to the new ones
        assert rounds < 40, ends()
        send(100)
        got.extend(c.consume(500, 0.1))
        rounds += 1
    published = time.monotonic() - t0
    assert before.get(2, 0) == before.get(3, 0) == 0

    seen: dict[str, float] = {}

    def read_all() -> bool:
        got.extend(c.consume(1000, 0.5))
        if "assigned" not in seen and len(c.assignment()) == 4:
            seen["assigned"] = time.monotonic() - t0
        return len(got) >= len(sent)

    until("every record, from all 4 partitions", read_all, 60)
    done = time.monotonic() - t0
    got.extend(c.consume(1000, 2.0))  # nothing more may come
    assigned = sorted(p for _, p in c.assignment())
    c.close()
    kafka.close()
    assert Counter(m.value for m in got) == Counter(sent)
    assert assigned == [0, 1, 2, 3]
    assert {m.partition for m in got} == {0, 1, 2, 3}
    print(f"grown: stored {stored:.2f} s, writers restarted {restarted:.2f} s, notifications "
          f"on partitions 2 and 3 {published:.2f} s ({rounds} rounds), all 4 assigned "
          f"{seen.get('assigned', -1):.2f} s, all read {done:.2f} s")  # fmt: skip


def test_kafka_client_secrets_never_reach_zookeeper_or_admin_answers(
    memq_stack: StackState, s3_bucket: str, chroot: str, unique_name: Any
) -> None:
    """A SASL password in the brokers' topic defaults (as the chart's env override puts it)
    is used by each broker for its Kafka clients but is neither stored in ZooKeeper nor
    returned by topic create/describe; the topic works."""
    from kazoo.client import KazooClient

    secret = f"pw-{uuid.uuid4().hex}"
    cfg = cluster_config(
        memq_stack, s3_bucket, memq_stack.zk_connect, chroot, "sec1",
        topic_overrides={"notification": {"bootstrap_servers": memq_stack.kafka_bootstrap,
                                          "partitions": 1, "producer": {"sasl.password": secret}}},
    )  # fmt: skip
    with BrokerThread(cfg) as b:
        admin = AdminClient([b.address])
        topic = unique_name("sec")
        answer = admin.create_topic(topic, {"min_writers": 1})
        assert secret not in json.dumps(answer)
        assert secret not in json.dumps(admin.describe_topic(topic))
        zk = KazooClient(hosts=memq_stack.zk_connect)
        zk.start(timeout=10)
        try:
            raw, _ = zk.get(f"{chroot}/topics/{topic}")
        finally:
            zk.stop()
            zk.close()
        assert secret.encode() not in raw
        until("written", lambda: topic in (b.server.processors if b.server else {}))
        with Producer({"bootstrap.servers": b.address}) as p:
            assert p.produce(topic, b"x").result(30).key  # stored and notified


def test_keys_spread_over_writers_and_keep_their_order(
    three: list[BrokerThread], unique_name: Any
) -> None:
    """Three writers: one producer's keyed records go to all three (a key to one), each
    key's records sit on one notification partition and are read in produce order."""
    from collections import Counter, defaultdict

    from memq import Consumer

    admin = AdminClient([b.address for b in three])
    topic = unique_name("keys")
    admin.create_topic(topic, {"min_writers": 3, "batch.ms": 50, "notification.partitions": 6})
    until("three writers", lambda: writing(three, topic) == {"b0", "b1", "b2"})
    n, keys = 9_000, 30
    sent = [(b"user-%02d" % (i % keys), b"%05d" % i) for i in range(n)]
    with Producer({"bootstrap.servers": three[0].address, "linger.ms": 2}) as p:
        for i, (k, v) in enumerate(sent):
            p.produce(topic, v, key=k)
            if i % 1500 == 1499:
                p.flush(60)  # several batches per writer
        assert p.flush(60) == 0
    received = {b.config.broker_id: b.server.processors[topic].bytes_received for b in three}  # type: ignore[union-attr]
    assert all(received.values()), received  # every writer took a share of the keys
    c = Consumer({"bootstrap.servers": three[0].address, "auto.offset.reset": "earliest"})
    c.assign([(topic, p) for p in range(6)])
    got: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        got.extend((m.key or b"", m.value, m.partition) for m in c.consume(1000, 0.5))
    c.close()
    assert Counter((k, v) for k, v, _ in got) == Counter(sent)
    per_key: dict[bytes, list[bytes]] = defaultdict(list)
    parts: dict[bytes, set[int]] = defaultdict(set)
    for k, v, part in got:
        per_key[k].append(v)
        parts[k].add(part)
    for k, values in per_key.items():
        assert values == sorted(values), f"key {k!r} out of order"
        assert len(parts[k]) == 1, f"key {k!r} on partitions {parts[k]}"
