"""`memq group`: list, describe with exact lag, reset offsets (dry run, execute), delete,
against a real broker, Apache Kafka and S3."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.consumer.groups import GroupAdmin
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.errors import InvalidPositionError, InvalidRequestError
from memq.run.broker import BrokerThread
from memq.testing import broker_config

#: Consumer group settings per group protocol (the consumer protocol's session is the
#: broker's: setting one is an error).
GROUPS = {
    "classic": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    "consumer": {"group.protocol": "consumer"},
}
GROUP = {**GROUPS["classic"], "auto.offset.reset": "earliest"}


@pytest.fixture
def topic(unique_name: Any) -> str:
    return str(unique_name("g"))


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=[topic], batch_ms=100, partitions=1)
    with BrokerThread(cfg) as b:
        yield b


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_describe_reset_and_delete_a_group(
    broker: BrokerThread, topic: str, unique_name: Any, protocol: str
) -> None:
    settings = {**GROUPS[protocol], "auto.offset.reset": "earliest"}
    sizes = [30, 20, 10]  # three objects (one flush each, sealed by age)
    with Producer({"bootstrap.servers": broker.address}) as p:
        for n, size in enumerate(sizes):
            for i in range(size):
                p.produce(topic, b"%d-%d" % (n, i))
            assert p.flush(30) == 0
            time.sleep(0.3)  # the next records go into a new batch (batch.ms is 100)
    group = unique_name("grp")
    c = Consumer({"bootstrap.servers": broker.address, "group.id": group, **settings,
                  "enable.auto.commit": False})  # fmt: skip
    c.subscribe(topic)
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < sizes[0] and time.monotonic() < deadline:
        got.extend(c.consume(sizes[0] - len(got), 1.0))
    assert [m.value for m in got] == [b"0-%d" % i for i in range(sizes[0])]
    c.commit()  # the first object was handed out whole: offset 1 is committed
    admin = GroupAdmin(broker.address)
    live = admin.describe(group, topic)
    assert (live["state"], live["protocol"]) == ("stable", protocol)
    assert [(m["client_id"], m["partitions"]) for m in live["members"]] == [
        ("memq-consumer", [[topic, 0]])
    ]
    with pytest.raises(InvalidRequestError, match="active member"):
        admin.reset_offsets(group, topic, to="earliest", execute=True)
    c.close()

    d = admin.describe(group, topic)
    (p0,) = d["topics"][topic]
    assert (p0["committed"], p0["end"], p0["lag_objects"]) == (1, 3, 2)
    assert p0["lag_records"] == sizes[1] + sizes[2] and p0["lag_seconds"] is not None
    assert {
        "group": group,
        "state": "empty",
        "protocol": protocol,
        "members": 0,
        "topics": [topic],
    } in (admin.list_groups())
    # The lag exporter (memq group exporter) serves the same figures to Prometheus.
    from prometheus_client import CollectorRegistry, generate_latest

    from memq.consumer.groups import LagCollector

    registry = CollectorRegistry()
    lag = LagCollector(admin)
    registry.register(lag)
    lag.refresh()
    text = generate_latest(registry).decode()
    labels = f'group="{group}",partition="0",topic="{topic}"'
    assert f"memq_group_lag_objects{{{labels}}} 2.0" in text
    assert f"memq_group_lag_records{{{labels}}} {float(sizes[1] + sizes[2])}" in text

    plan = admin.reset_offsets(group, topic, to="earliest")  # dry run
    assert plan.moves == {0: (1, 0)} and not plan.executed
    assert admin.describe(group, topic)["lag_objects"] == 2
    # The CLI, as an operator types it: JSON plan, applied.
    out = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "group", "reset-offsets", group, "--topic",
         topic, "--shift-by", "-1", "--execute", "--json", "-b", broker.address],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["partitions"] == {"0": {"current": 1, "new": 0}}
    # Notification Kafka settings (-X, as for a SASL Kafka) reach its client: a valid one
    # works, an unknown one is a one-line error naming it.
    for setting, ok in (("client.id=memq-ops", True), ("no.such.setting=1", False)):
        out = subprocess.run(
            [sys.executable, "-m", "memq.cli.main", "group", "-X", setting, "describe", group,
             "--topic", topic, "--json", "-b", broker.address],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert (out.returncode == 0) is ok, out.stderr
        if ok:
            assert json.loads(out.stdout)["group"] == group
        else:
            assert "no.such.setting" in out.stderr and "Traceback" not in out.stderr
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert admin.describe(group, topic)["lag_records"] == sum(sizes)

    again = Consumer({"bootstrap.servers": broker.address, "group.id": group, **settings})
    again.subscribe(topic)
    reread: list[Any] = []
    deadline = time.monotonic() + 60
    while len(reread) < sum(sizes) and time.monotonic() < deadline:
        reread.extend(again.consume(100, 1.0))
    again.close()
    assert sorted(m.value for m in reread) == sorted(
        b"%d-%d" % (n, i) for n, size in enumerate(sizes) for i in range(size)
    )

    # --to-message-id: that object (checked against its notification), at that record.
    for bad, says in (("0:3:0:0", "does not exist yet (partition 0 ends at 3)"),
                      ("0:1:1:0", "has 1 block(s) and 20 record(s): there is no block 1"),
                      ("0:1:0:20", "there is no block 0 record 20")):  # fmt: skip
        with pytest.raises(InvalidPositionError, match=re.escape(says)):
            admin.reset_offsets(group, topic, to="message-id", value=bad, execute=True)
    out = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "group", "reset-offsets", group, "--topic",
         topic, "--to-message-id", "0:1:0:5", "--execute", "--json", "-b", broker.address],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["partitions"] == {"0": {"current": 3, "new": 1, "position": "0:5"}}
    # Kafka keeps the commit metadata: the group starts at that very record.
    assert not doc["positions_dropped"] and "reads those objects again" not in out.stderr
    third = Consumer({"bootstrap.servers": broker.address, "group.id": group, **settings})
    third.subscribe(topic)
    expected = [b"1-%d" % i for i in range(5, sizes[1])] + [b"2-%d" % i for i in range(sizes[2])]
    tail: list[Any] = []
    deadline = time.monotonic() + 60
    while len(tail) < len(expected) and time.monotonic() < deadline:
        tail.extend(third.consume(100, 1.0))
    tail.extend(third.consume(100, 1.0))  # and nothing more
    third.close()
    assert sorted(m.value for m in tail) == sorted(expected)

    admin.delete(group)
    assert all(g["group"] != group for g in admin.list_groups())
    # A group with no offsets on a MemQ topic (a typo; or gone, as now) is not "deleted".
    for name in (group, unique_name("never")):
        with pytest.raises(InvalidRequestError, match="no committed offsets on any MemQ topic"):
            admin.delete(name)
        # Nor does describe --topic invent the whole topic as its lag.
        with pytest.raises(InvalidRequestError, match=f"no committed offsets on topic {topic!r}"):
            admin.describe(name, topic)


def test_live_members_are_listed_and_described_before_any_commit(
    broker: BrokerThread, topic: str, unique_name: Any
) -> None:
    """On Apache Kafka a live group's members are known: `memq group list` and `describe`
    show them, their client.id and host and what each reads, before the group commits;
    once they leave, a group that never committed is nothing to describe."""
    with Producer({"bootstrap.servers": broker.address}) as p:
        for i in range(20):
            p.produce(topic, b"%d" % i)
        assert p.flush(30) == 0
    group = unique_name("live")

    def member(name: str) -> Consumer:
        c = Consumer({"bootstrap.servers": broker.address, "group.id": group, **GROUP,
                      "enable.auto.commit": False, "client.id": name})  # fmt: skip
        c.subscribe(topic)
        return c

    a = member("reader-a")
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        got.extend(a.consume(20, 1.0))
    assert len(got) == 20
    admin = GroupAdmin(broker.address)
    d = admin.describe(group)  # no commit yet: the topic comes from the member
    assert d["state"] == "stable"
    assert [(m["client_id"], m["host"], m["partitions"]) for m in d["members"]] == [
        ("reader-a", "/127.0.0.1", [[topic, 0]])
    ]
    assert [(p["partition"], p["committed"]) for p in d["topics"][topic]] == [(0, None)]
    assert {
        "group": group,
        "state": "stable",
        "protocol": "classic",
        "members": 1,
        "topics": [topic],
    } in admin.list_groups()
    assert all(g["group"] != group for g in admin.list_groups(members=False))  # (the exporter)
    out = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "group", "describe", group, "-b", broker.address],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"group {group} (stable, classic protocol): 1 member(s)" in out.stdout
    assert f"member reader-a (/127.0.0.1): {topic}[0]" in out.stdout

    b = member("reader-b")  # a second member: one partition, so one of them idles

    def both() -> dict[str, Any] | None:
        a.consume(10, 0.1)
        b.consume(10, 0.1)
        d = admin.describe(group)
        return d if d["state"] == "stable" and len(d["members"]) == 2 else None

    d = wait_for(both, timeout=60, what="two stable members")
    assert sorted(m["client_id"] for m in d["members"]) == ["reader-a", "reader-b"]
    assert sorted(tuple(p) for m in d["members"] for p in m["partitions"]) == [(topic, 0)]
    a.close()
    b.close()

    def gone() -> bool | None:
        try:
            admin.describe(group)
        except InvalidRequestError as e:  # no commit, no member: nothing to describe
            return True if "no member reading one" in str(e) else None
        return None

    wait_for(gone, timeout=30, what="the group without members")
    assert all(g["group"] != group for g in admin.list_groups())


def test_kafkas_consumer_group_command_shows_what_memq_group_describe_says(
    memq_stack: StackState, s3_bucket: str, unique_name: Any
) -> None:
    """Apache Kafka's kafka-consumer-groups (ConsumerGroupCommand, from the local stack's
    jars) lists a MemQ group's committed positions in its notification topic, its log
    end offsets and lag in objects, and its live member: the same as memq group describe."""
    from memq.devstack.kafka import kafka_java

    topic = unique_name("kcg")
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=[topic], batch_ms=100,
                        partitions=3)  # fmt: skip
    with BrokerThread(cfg) as b:
        with Producer({"bootstrap.servers": b.address}) as p:
            for n in range(6):
                for i in range(40):
                    p.produce(topic, b"%d-%d" % (n, i))
                assert p.flush(30) == 0  # an object (or more) each
        group = unique_name("kcg-group")
        c = Consumer({"bootstrap.servers": b.address, "group.id": group, **GROUP,
                      "enable.auto.commit": False, "client.id": "kcg-reader"})  # fmt: skip
        c.subscribe(topic)
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 120 and time.monotonic() < deadline:
            got.extend(c.consume(120 - len(got), 1.0))
        c.commit()  # some objects of some partitions: lag left on others
        with Producer({"bootstrap.servers": b.address}) as p:
            for i in range(40):
                p.produce(topic, b"late-%d" % i)
            assert p.flush(30) == 0
        memq_view = GroupAdmin(b.address).describe(group, topic)
        nt = cfg.topics[0].notification_topic(cfg.cluster)
        out = subprocess.run(
            kafka_java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                       "--bootstrap-server", memq_stack.kafka_bootstrap, "--describe",
                       "--group", group),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        c.close()
    assert out.returncode == 0, out.stderr[-3000:]
    header, *rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                          "LAG"] and header[-1] == "CLIENT-ID"  # fmt: skip
    kafka_view = {int(r[2]): (None if r[3] == "-" else int(r[3]), int(r[4]),
                              None if r[5] == "-" else int(r[5]), r[-1])
                  for r in rows if r[0] == group and r[1] == nt}  # fmt: skip
    assert len(kafka_view) == len(rows) == 3, out.stdout  # its output alone on stdout
    assert kafka_view == {
        p["partition"]: (p["committed"], p["end"],
                         p["lag_objects"] if p["committed"] is not None else None, "kcg-reader")
        for p in memq_view["topics"][topic]
    }, out.stdout  # fmt: skip
    assert sum(1 for v in kafka_view.values() if v[0] is not None) >= 1
    assert [(m["client_id"], len(m["partitions"])) for m in memq_view["members"]] == [
        ("kcg-reader", 3)
    ]
