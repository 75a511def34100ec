"""`memq dev up|status|down|logs` against real servers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from memq.devstack import DevStack, StackState
from memq.devstack.kafka import KafkaService
from memq.devstack.procs import ProcessRef, is_alive
from memq.errors import DevStackError


def memq(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"memq {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def _refs(state_dir: Path) -> list[ProcessRef]:
    """Every process the stack started: three servers, its broker(s) and the auditor."""
    state = StackState.model_validate_json((state_dir / "stack.json").read_text())
    refs = [s.process for s in state.services.values() if s.process is not None]
    comps = [*state.extra.get("brokers", [])]
    if state.extra.get("auditor"):
        comps.append(state.extra["auditor"])
    return refs + [ProcessRef(c["pid"], c["start_time"]) for c in comps]


@pytest.fixture
def stack_dir(tmp_path: Path) -> Iterator[str]:
    """A state dir whose stack is stopped after the test, passed or failed."""
    d = tmp_path / "st"
    try:
        yield str(d)
    finally:
        DevStack(d).down(timeout=5)


def test_up_status_logs_restart_down(stack_dir: str) -> None:
    d = stack_dir
    memq("dev", "up", "--state-dir", d)
    refs = _refs(Path(d))
    assert len(refs) == 5 and all(is_alive(r) for r in refs)

    doc = json.loads(memq("dev", "status", "--json", "--state-dir", d).stdout)
    assert doc["healthy"] is True
    assert doc["s3"]["endpoint"].startswith("http://127.0.0.1:")
    assert doc["s3"]["bucket"] == "memq-dev"
    assert doc["kafka"]["bootstrap"].startswith("127.0.0.1:")
    assert doc["zookeeper"]["connect"].startswith("127.0.0.1:")
    (broker,) = doc["brokers"]
    assert broker["name"] == "broker-1" and broker["healthy"] is True
    assert broker["endpoint"].startswith("127.0.0.1:") and broker["http"].startswith("http://")
    with urllib.request.urlopen(f"{broker['http']}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    # The broker process's own CPU, memory and garbage collections are exported too.
    assert "\npython_gc_collections_total{" in metrics
    assert "\nprocess_resident_memory_bytes " in metrics
    auditor = doc["auditor"]
    assert auditor["healthy"] is True and auditor["url"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(f"{auditor['url']}/api/status", timeout=10) as r:
        assert json.loads(r.read())["audit_topic"] == "memq.audit"
    with urllib.request.urlopen(f"{auditor['url']}/api/lag", timeout=10) as r:
        lag = json.loads(r.read())
    assert lag["enabled"] is True and lag["interval_s"] == 5  # the dev broker's groups
    pids = {doc[n]["pid"] for n in ("s3", "kafka", "zookeeper")} | {broker["pid"], auditor["pid"]}
    assert pids == {r.pid for r in refs}

    table = memq("dev", "status", "--state-dir", d).stdout
    assert table.count("healthy") == 5 and "broker-1" in table
    assert f"Audit dashboard: {auditor['url']}" in table

    # A second `up` finds the running stack and starts nothing.
    memq("dev", "up", "--state-dir", d)
    assert _refs(Path(d)) == refs
    # Another shape is not silently ignored: it says what to do, and changes nothing.
    other = memq("dev", "up", "--state-dir", d, "--brokers", "3", check=False)
    assert other.returncode == 1 and "Traceback" not in other.stderr
    assert "already running with 1 broker (asked for --brokers 3)" in other.stderr
    assert "memq dev down" in other.stderr and _refs(Path(d)) == refs
    # Its one broker is clustered through the stack's ZooKeeper: topic admin works.
    assert "governor broker-1" in memq("cluster", "status", "--state-dir", d).stdout
    memq("topic", "create", "orders", "--state-dir", d, "--set", "batch.ms=500")

    assert (
        "Kafka Server started"
        in memq("dev", "logs", "kafka", "-n", "5000", "--state-dir", d).stdout
    )
    assert "memq broker ready" in memq("dev", "logs", "broker-1", "--state-dir", d).stdout
    assert "memq auditor ready" in memq("dev", "logs", "auditor", "--state-dir", d).stdout
    assert (
        "binding to port" in memq("dev", "logs", "zookeeper", "-n", "400", "--state-dir", d).stdout
    )

    # Restarting ZooKeeper keeps its data and its port.
    from kazoo.client import KazooClient

    stack = DevStack(d)
    zk_connect = stack.require().zk_connect
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    zk.create("/survives-restart", b"yes")
    zk.stop()
    stack.restart("zookeeper")
    assert stack.require().zk_connect == zk_connect
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=20)
    assert zk.get("/survives-restart")[0] == b"yes"
    zk.stop()
    # Restarting Kafka keeps its topics and records, and its port.
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = stack.require().kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("survives", 1, 1)])["survives"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    p.produce("survives", b"kept")
    assert p.flush(30) == 0
    stack.restart("kafka")
    assert stack.require().kafka_bootstrap == bootstrap
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.assign([TopicPartition("survives", 0, 0)])
    m = c.poll(30)
    c.close()
    assert m is not None and m.error() is None and m.value() == b"kept"
    refs = _refs(Path(d))

    down = memq("dev", "down", "--state-dir", d)
    said = down.stdout + down.stderr
    # Every process stopped on SIGTERM (the auditor once had to be killed: issue 43).
    assert "auditor: stopped" in said and "SIGKILL" not in said, said
    assert not any(is_alive(r) for r in refs)
    assert not (Path(d) / "stack.json").exists()
    gone = memq("dev", "status", "--json", "--state-dir", d, check=False)
    assert gone.returncode == 1 and json.loads(gone.stdout)["running"] is False
    # The logs stay after `down`, where a post-mortem needs them.
    left = memq("dev", "logs", "broker-1", "-n", "5000", "--state-dir", d)
    assert "memq broker ready" in left.stdout and "last run left" in left.stderr
    assert (
        "Kafka Server started"
        in memq("dev", "logs", "kafka", "-n", "5000", "--state-dir", d).stdout
    )
    unknown = memq("dev", "logs", "nope", "--state-dir", d, check=False)
    assert unknown.returncode == 2 and "broker-1" in unknown.stderr


def test_env_overrides_use_external_servers(memq_stack: StackState, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
        "MEMQ_KAFKA_BOOTSTRAP": memq_stack.kafka_bootstrap,
        "MEMQ_ZK_CONNECT": memq_stack.zk_connect,
    }
    d = str(tmp_path / "ext")
    memq("dev", "up", "--state-dir", d, env=env)
    doc = json.loads(memq("dev", "status", "--json", "--state-dir", d, env=env).stdout)
    for name in ("s3", "kafka", "zookeeper"):
        assert doc[name]["external"] is True and doc[name]["pid"] is None
        assert doc[name]["healthy"] is True
    assert doc["kafka"]["bootstrap"] == memq_stack.kafka_bootstrap
    memq("dev", "down", "--state-dir", d, env=env)
    # The external servers were not touched.
    assert all(h.healthy for h in DevStack(memq_stack.state_dir).status())


def test_missing_java_is_one_clear_message(memq_stack: StackState, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {
        **os.environ,
        "PATH": str(empty),
        "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
        "MEMQ_KAFKA_BOOTSTRAP": memq_stack.kafka_bootstrap,
    }
    env.pop("MEMQ_ZK_CONNECT", None)
    d = tmp_path / "nojava"
    proc = memq("dev", "up", "--state-dir", str(d), env=env, check=False)
    assert proc.returncode == 1
    assert "java was not found" in proc.stderr and "openjdk-17" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (d / "stack.json").exists()


def test_old_java_is_one_clear_message(memq_stack: StackState, tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    java = fake / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
        "MEMQ_ZK_CONNECT": memq_stack.zk_connect,
    }
    env.pop("MEMQ_KAFKA_BOOTSTRAP", None)
    d = tmp_path / "oldjava"
    proc = memq("dev", "up", "--state-dir", str(d), env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "is Java 11" in proc.stderr and "need Java 17+" in proc.stderr
    assert not (d / "stack.json").exists()


def test_kafka_home_without_kafka_is_one_clear_message(
    memq_stack: StackState, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KAFKA_HOME": str(tmp_path),
        "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
        "MEMQ_ZK_CONNECT": memq_stack.zk_connect,
    }
    env.pop("MEMQ_KAFKA_BOOTSTRAP", None)
    d = tmp_path / "nokafka"
    proc = memq("dev", "up", "--state-dir", str(d), env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"KAFKA_HOME={tmp_path} holds no Kafka distribution" in proc.stderr
    assert not (d / "stack.json").exists()


def test_fixed_port_in_use_is_reported(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DevStackError, match=f"port {port} is in use"):
            KafkaService(ready_timeout=10).start(tmp_path, port)
    leftovers = [p for p in (tmp_path / "kafka").glob("*.pid")]
    assert leftovers == []


def test_relative_state_dir(tmp_path: Path) -> None:
    # `make demo` uses the default relative `.memq`: every server must cope with that.
    proc = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "dev", "up", "--state-dir", "rel-state"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    try:
        assert proc.returncode == 0, proc.stderr
        assert all(h.healthy for h in DevStack(tmp_path / "rel-state").status())
    finally:
        DevStack(tmp_path / "rel-state").down()
