"""Per-topic ACLs enforced by brokers: standalone (from the config) and clustered (in
ZooKeeper, edited with `memq acl` through any broker). Real brokers, S3, Kafka, ZooKeeper."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memq import Producer
from memq.client.admin import AdminClient
from memq.client.bootstrap import fetch_metadata
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.errors import AuthorizationError, InvalidRequestError
from memq.run.broker import BrokerThread
from memq.security import ClientSecurity, make_token
from memq.testing import broker_config
from tests.integration.helpers import external_stack_env

SECRET = b"acl-test-secret-0123456789"


def token(principal: str) -> str:
    return make_token(SECRET, principal, 600)


def sec(principal: str) -> ClientSecurity:
    from pydantic import SecretStr

    return ClientSecurity(token=SecretStr(token(principal)))


def produce_error(address: str, principal: str, topic: str) -> BaseException | None:
    conf = {"bootstrap.servers": address, "auth.token": token(principal), "linger.ms": 2,
            "delivery.timeout.ms": 5000, "request.timeout.ms": 3000}  # fmt: skip
    with Producer(conf) as p:
        return p.produce(topic, b"x").exception(30)


@pytest.fixture
def standalone(memq_stack: StackState, s3_bucket: str) -> Iterator[BrokerThread]:
    cfg = broker_config(
        memq_stack,
        bucket=s3_bucket,
        topics=["orders", "payroll"],
        batch_ms=50,
        cluster=f"acl-{uuid.uuid4().hex[:8]}",  # notification topics of this test only
        auth={
            "enabled": True,
            "token_secret": SECRET.decode(),
            "superusers": ["root"],
            "acls": [
                {"principal": "app", "topic": "orders", "ops": ["produce"]},
                {"principal": "bi", "topic": "order*", "ops": ["consume"]},
            ],
        },
    )
    with BrokerThread(cfg) as b:
        yield b


def test_standalone_acls_allow_and_deny_by_principal_topic_and_op(standalone: BrokerThread) -> None:
    a = standalone.address
    assert produce_error(a, "app", "orders") is None
    err = produce_error(a, "app", "payroll")
    assert isinstance(err, AuthorizationError) and "may not produce on topic 'payroll'" in str(err)
    assert "memq acl add --principal app --topic payroll --op produce" in str(err)
    assert isinstance(produce_error(a, "bi", "orders"), AuthorizationError)  # consume only
    assert produce_error(a, "root", "payroll") is None  # superuser
    # Metadata: listed topics are filtered, named ones answered with an error.
    listed = fetch_metadata([a], None, security=sec("bi"))
    assert set(listed.topics) == {"orders"}
    named = fetch_metadata([a], ["payroll"], security=sec("bi"))
    assert "not authorized" in (named.topics["payroll"].error or "")
    # A consumer denied the topic gets AuthorizationError (it was UnknownTopicError).
    from memq import Consumer

    c = Consumer({"bootstrap.servers": a, "auth.token": token("bi"), "group.id": "g"})
    try:
        with pytest.raises(AuthorizationError, match="may not read 'payroll'"):
            c.subscribe("payroll")
    finally:
        c.close()
    # Cluster-wide admin needs admin on *.
    with pytest.raises(AuthorizationError):
        AdminClient([a], security=sec("app")).list_topics()
    assert set(AdminClient([a], security=sec("root")).list_topics()) == {"orders", "payroll"}
    entries = AdminClient([a], security=sec("root")).list_acls()
    assert {"principal": "app", "topic": "orders", "ops": ["produce"]} in entries
    with pytest.raises(InvalidRequestError, match="standalone"):
        AdminClient([a], security=sec("root")).add_acl("x", "orders", ["produce"])


@pytest.fixture
def clustered(memq_stack: StackState, s3_bucket: str) -> Iterator[list[BrokerThread]]:
    chroot = f"/memq-acl/{uuid.uuid4().hex[:8]}"
    brokers = [
        BrokerThread(
            broker_config(
                memq_stack,
                bucket=s3_bucket,
                broker_id=f"a{i}",
                batch_ms=100,
                zookeeper={"connect": memq_stack.zk_connect, "chroot": chroot,
                           "session_timeout_ms": 6000},
                auth={"enabled": True, "token_secret": SECRET.decode(), "superusers": ["root"]},
            )
        )
        for i in range(2)
    ]  # fmt: skip
    for b in brokers:
        b.start()
    try:
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def test_clustered_acls_live_in_zookeeper_and_apply_on_every_broker(
    clustered: list[BrokerThread], unique_name: Any
) -> None:
    # A topic of this test only: the notification topic lives in the shared Kafka.
    events = unique_name("events")
    addrs = [b.address for b in clustered]
    root = AdminClient(addrs, security=sec("root"))
    root.create_topic(events, {"expected_mbps": 1})
    wait_for(
        lambda: True if len(root.cluster_status()["topics"].get(events, {}).get("writers", []))
        == 2 else None,
        timeout=30, what="two writers of events",
    )  # fmt: skip
    assert isinstance(produce_error(addrs[0], "app", events), AuthorizationError)
    entries = AdminClient([addrs[0]], security=sec("root")).add_acl("app", events, ["produce"])
    assert entries == [{"principal": "app", "topic": events, "ops": ["produce"]}]

    def allowed_everywhere() -> bool | None:  # every broker has seen the ZooKeeper change
        return True if all(produce_error(a, "app", events) is None for a in addrs) else None

    wait_for(allowed_everywhere, timeout=30, what="the ACL on every broker")
    # An admin granted on * may grant others; a non-admin may not.
    root.add_acl("ops", "*", ["admin"])
    wait_for(lambda: True if _can_list(addrs[1], "ops") else None, timeout=30, what="ops is admin")
    AdminClient([addrs[1]], security=sec("ops")).add_acl("bi", events, ["consume"])
    with pytest.raises(AuthorizationError):
        AdminClient(addrs, security=sec("app")).add_acl("app", "*", ["admin"])
    left = root.remove_acl("app", events, ["produce"])
    assert {"principal": "app", "topic": events, "ops": ["produce"]} not in left
    wait_for(
        lambda: (
            True
            if all(isinstance(produce_error(a, "app", events), AuthorizationError) for a in addrs)
            else None
        ),
        timeout=30,
        what="the revocation on every broker",
    )
    assert {e["principal"] for e in root.list_acls()} == {"ops", "bi"}
    # An admin of a topic prefix manages its topics, but where their data and pointers go
    # (storage, notification topic or Kafka) needs admin on *: it could read and write
    # another topic's records through its notification topic, or send the broker's Kafka
    # credentials to a host of its choosing.
    prefix = unique_name("team")
    root.add_acl("team", f"{prefix}*", ["admin"])
    team = AdminClient([addrs[0]], security=sec("team"))
    wait_for(lambda: True if _can_create(team, f"{prefix}-ok") else None, timeout=30,
             what="team is admin of its prefix")  # fmt: skip
    for setting in ({"notification.topic": f"memq.x.{events}.notifications"},
                    {"notification.bootstrap_servers": "attacker.example:9092"},
                    {"storage.type": "filesystem", "storage.filesystem.root": "/tmp/x"}):  # fmt: skip
        with pytest.raises(AuthorizationError, match=r"admin on the cluster \(topic \*\)"):
            team.create_topic(f"{prefix}-bad", setting)
        with pytest.raises(AuthorizationError):
            team.update_topic(f"{prefix}-ok", setting)
    team.update_topic(f"{prefix}-ok", {"batch.ms": 500})  # its own topic's settings: fine


def _can_create(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topic(name, {"min_writers": 1}, if_not_exists=True)
        return True
    except AuthorizationError:
        return False


def _can_list(address: str, principal: str) -> bool:
    try:
        AdminClient([address], security=sec(principal)).list_topics()
        return True
    except AuthorizationError:
        return False


def test_acl_cli_on_a_tls_dev_stack(memq_stack: StackState, tmp_path: Any) -> None:
    import subprocess
    import sys

    env = external_stack_env(memq_stack, MEMQ_STATE_DIR=str(tmp_path / "st"))

    def memq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memq.cli.main", *args], capture_output=True,
                              text=True, timeout=120, env=env, check=False)  # fmt: skip

    up = memq("dev", "up", "--tls", "--no-auditor", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    try:
        t0 = time.monotonic()
        add = memq("acl", "add", "--principal", "team-a", "--topic", "logs.*", "--op", "produce",
                   "--op", "consume", "--json")  # fmt: skip
        assert add.returncode == 0, add.stderr
        assert {"principal": "team-a", "topic": "logs.*", "ops": ["produce", "consume"]} in (
            __import__("json").loads(add.stdout)
        )
        listed = memq("acl", "list")
        assert listed.returncode == 0 and "team-a" in listed.stdout and "logs.*" in listed.stdout
        rm = memq("acl", "remove", "-p", "team-a", "-t", "logs.*", "-o", "produce", "--json")
        assert rm.returncode == 0, rm.stderr
        typo = memq("acl", "remove", "-p", "team-b", "-t", "logs.*", "-o", "produce")
        assert typo.returncode == 1 and "nothing removed" in typo.stderr, typo.stderr
        assert time.monotonic() - t0 < 60
        # topic describe on a TLS stack (it connected in plaintext), and a topic admin's
        # create/update succeed (they ended in "may not admin on the cluster", exit 1).
        assert memq("topic", "create", "logs.x", "--set", "min_writers=1").returncode == 0
        described = memq("topic", "describe", "logs.x", "--json")
        assert described.returncode == 0 and '"writers"' in described.stdout, described.stderr
        assert memq("acl", "add", "-p", "team-a", "-t", "logs.*", "-o", "admin").returncode == 0
        secret = tmp_path / "st" / "tls" / "token_secret"  # (the stack's CA is kept)
        scoped = {**env, "MEMQ_AUTH_TOKEN": make_token(secret.read_bytes().strip(), "team-a", 600)}
        for args in (["topic", "create", "logs.y", "--set", "min_writers=1"],
                     ["topic", "update", "logs.y", "--set", "batch.ms=500"]):  # fmt: skip
            done = subprocess.run([sys.executable, "-m", "memq.cli.main", *args],
                                  capture_output=True, text=True, timeout=120, env=scoped,
                                  check=False)  # fmt: skip
            assert done.returncode == 0, done.stderr
    finally:
        assert memq("dev", "down").returncode == 0
