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
from memq.errors import InvalidPositionError, InvalidRequestError
from memq.run.broker import BrokerThread
from memq.testing import broker_config

#: Consumer group settings per group protocol (the consumer protocol's session is the
#: broker's: setting one is an error).
GROUPS = {
    "classic": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    "consumer": {"group.protocol": "consumer"},
}


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
    assert [m["partitions"] for m in live["members"]] == [[[topic, 0]]]
    with pytest.raises(InvalidRequestError, match="active member"):
        admin.reset_offsets(group, topic, to="earliest", execute=True)
    c.close()

    d = admin.describe(group, topic)
    (p0,) = d["topics"][topic]
    assert (p0["committed"], p0["end"], p0["lag_objects"]) == (1, 3, 2)
    assert p0["lag_records"] == sizes[1] + sizes[2] and p0["lag_seconds"] is not None
    assert {"group": group, "state": "empty", "protocol": protocol, "topics": [topic]} in (
        admin.list_groups()
    )
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
