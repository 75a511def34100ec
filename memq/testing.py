"""Pytest fixtures backed by the real local stack (a shipped testing kit).

Enable in your ``conftest.py``::

    pytest_plugins = ["memq.testing"]

``memq_stack`` starts moto S3, Apache Kafka and ZooKeeper once per session, on free ports,
under a temporary state dir (or uses MEMQ_S3_ENDPOINT / MEMQ_KAFKA_BOOTSTRAP /
MEMQ_ZK_CONNECT), and stops them at the end. Per-test fixtures give each test its own
bucket, topic names and ZooKeeper chroot, so tests do not see each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memq.config import BrokerConfig, load_broker_config
from memq.devstack import DevStack, StackState, procs

__all__ = [
    "broker_config",
    "memq_leftover_servers",
    "memq_stack",
    "s3_bucket",
    "unique_name",
    "zk_chroot",
]


@pytest.fixture(scope="session", autouse=True)
def memq_leftover_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stops, at the end of the session, every server a test started and left running
    (a test that failed before its own cleanup): each one :func:`procs.spawn` starts, in
    this process or a ``memq dev up`` subprocess, is listed in a file named by
    ``MEMQ_SPAWN_LOG``. Set up before the stack, so it runs after the stack is down."""
    log = tmp_path_factory.mktemp("memq-spawned") / "spawned.txt"
    saved = os.environ.get(procs.SPAWN_LOG_ENV)
    os.environ[procs.SPAWN_LOG_ENV] = str(log)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(procs.SPAWN_LOG_ENV, None)
        else:
            os.environ[procs.SPAWN_LOG_ENV] = saved
        left = [ref for ref in procs.spawned(log) if procs.is_alive(ref)]
        for ref in left:
            procs.stop(ref, timeout=5)
        if left:
            pids = ", ".join(str(r.pid) for r in left)
            print(f"\nmemq.testing: stopped {len(left)} server(s) tests left running: {pids}")


@pytest.fixture(scope="session")
def memq_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """The running local stack for this test session."""
    stack = DevStack(tmp_path_factory.mktemp("memq-stack"))
    state = stack.up()
    # boto3's credential chain (and Spark workers) read these; moto accepts any values.
    saved = {k: os.environ.get(k) for k in state.aws_env()}
    os.environ.update({k: v for k, v in state.aws_env().items() if not os.environ.get(k)})
    try:
        yield state
    finally:
        stack.down()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def broker_config(
    stack: StackState,
    *,
    bucket: str | None = None,
    topics: list[str] | tuple[str, ...] = (),
    storage: str = "s3",
    s3_endpoint: str | None = None,
    kafka_bootstrap: str | None = None,
    root: str | None = None,
    batch_bytes: int = 8 << 20,
    batch_ms: int = 500,
    ring_size: int = 4,
    partitions: int = 2,
    topic_overrides: dict[str, Any] | None = None,
    **overrides: Any,
) -> BrokerConfig:
    """A broker config for tests against the stack: free ports, the given topics.

    ``s3_endpoint``/``kafka_bootstrap`` point the broker elsewhere (e.g. a FaultProxy).
    """
    store: dict[str, Any] = {"type": storage}
    if storage == "s3":
        store["s3"] = {
            "bucket": bucket or stack.bucket,
            "endpoint_url": s3_endpoint or stack.s3_endpoint,
            "region": "us-east-1",
            "attempts": 4,
            "backoff_ms": 50,
            "backoff_max_ms": 500,
            "deadline_ms": 10_000,
            "connect_timeout_ms": 2_000,
            "read_timeout_ms": 5_000,
        }
    elif storage == "filesystem":
        store["filesystem"] = {"root": root}
    defaults = {
        "storage": store,
        "notification": {
            "bootstrap_servers": kafka_bootstrap or stack.kafka_bootstrap,
            "partitions": partitions,
            "delivery_timeout_ms": 5_000,
        },
        "batch": {"bytes": batch_bytes, "ms": batch_ms},
        "ring_size": ring_size,
        **(topic_overrides or {}),
    }
    data: dict[str, Any] = {
        "broker_id": "test-broker",
        "cluster": "test",
        "port": 0,
        "http_port": 0,
        "topic_defaults": defaults,
        "topics": [{"name": t} for t in topics],
        "shutdown_timeout_s": 30,
        **overrides,
    }
    return load_broker_config(data=data, env={})


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("topic")`` -> a fresh, valid name that mentions the test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")

    def make(prefix: str) -> str:
        return f"{prefix}-{base}-{uuid.uuid4().hex[:8]}".lower()

    return make


@pytest.fixture
def s3_bucket(memq_stack: StackState, unique_name: Callable[[str], str]) -> str:
    """A fresh, empty bucket in the stack's S3 for this test."""
    name = unique_name("b")[:63].rstrip("-")
    memq_stack.s3_client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def zk_chroot(memq_stack: StackState, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A connect string with a fresh chroot (``host:port/memq-test-...``), removed afterwards."""
    from kazoo.client import KazooClient

    chroot = "/" + unique_name("memq-test")
    yield f"{memq_stack.zk_connect}{chroot}"
    zk: Any = KazooClient(hosts=memq_stack.zk_connect)
    zk.start(timeout=10)
    try:
        zk.delete(chroot, recursive=True)
    except Exception:
        pass
    finally:
        zk.stop()
        zk.close()
