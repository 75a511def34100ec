"""ZooKeeper layout, records and client for a MemQ cluster.

Under the cluster root (the broker config's ``zookeeper.chroot``, e.g. ``/memq/prod``)::

    brokers/<broker id>   ephemeral   BrokerRecord (address, capacity, rack)
    topics/<topic>        persistent  the topic's validated TopicConfig
    assignments           persistent  AssignmentRecord (writers per topic, shortfall, load)
    governor/             kazoo Election: the first contender governs
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from memq.config import ZooKeeperConfig
from memq.errors import CoordinationError

__all__ = [
    "AssignmentRecord",
    "BrokerRecord",
    "Layout",
    "ZkClient",
    "ZkStat",
    "dumps",
    "make_client",
    "read_json",
]


class ZkStat(Protocol):
    """The parts of a ZooKeeper ``ZnodeStat`` we read."""

    @property
    def version(self) -> int: ...

    @property
    def ephemeralOwner(self) -> int: ...  # noqa: N802 - kazoo's name


class ZkClient(Protocol):
    """The kazoo ``KazooClient`` calls MemQ makes (kazoo ships no type hints)."""

    @property
    def state(self) -> str: ...

    @property
    def client_id(self) -> tuple[int, bytes]: ...

    def start(self, timeout: float = ...) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def add_listener(self, listener: Callable[[str], Any]) -> None: ...
    def remove_listener(self, listener: Callable[[str], Any]) -> None: ...
    def ensure_path(self, path: str) -> Any: ...
    def exists(self, path: str) -> ZkStat | None: ...
    def get(self, path: str) -> tuple[bytes, ZkStat]: ...
    def get_children(self, path: str) -> list[str]: ...
    def create(
        self, path: str, value: bytes = ..., *, ephemeral: bool = ..., makepath: bool = ...
    ) -> str: ...
    def set(self, path: str, value: bytes, version: int = ...) -> ZkStat: ...
    def delete(self, path: str, version: int = ..., recursive: bool = ...) -> Any: ...
    def delete_async(self, path: str, version: int = ...) -> Any: ...
    def ChildrenWatch(self, path: str, func: Callable[..., Any]) -> Any: ...  # noqa: N802
    def DataWatch(self, path: str, func: Callable[..., Any]) -> Any: ...  # noqa: N802
    def Election(self, path: str, identifier: str | None = ...) -> Any: ...  # noqa: N802


class _Rec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class BrokerRecord(_Rec):
    id: str
    host: str
    port: int
    http_port: int | None = None
    kafka_port: int | None = None
    capacity_mbps: float
    rack: str | None = None
    started_at: int = 0
    #: Measured ingest per topic (MB/s, smoothed), as of ``reported_at`` (ms).
    topic_mbps: dict[str, float] = {}
    #: The broker's batch buffer pool: its bound and what no topic holds now.
    pool_limit_bytes: int | None = None
    pool_free_bytes: int | None = None
    reported_at: int = 0


class AssignmentRecord(_Rec):
    version: int = 0
    governor: str | None = None
    updated_at: int = 0
    writers: dict[str, list[str]] = {}
    shortfall: dict[str, float] = {}
    load: dict[str, float] = {}
    #: topic -> writers it needs but could not get (no broker has the capacity or memory)
    unplaced: dict[str, int] = {}
    #: broker -> planned batch buffer bytes
    memory: dict[str, float] = {}
    #: topic -> the MB/s the plan used (measured, else declared) and where it came from
    planned_mbps: dict[str, float] = {}
    measured: list[str] = []


class Layout:
    def __init__(self, root: str) -> None:
        self.root = "/" + root.strip("/")
        self.brokers = f"{self.root}/brokers"
        self.topics = f"{self.root}/topics"
        #: Topics deleted without their data (objects, notification topic): their last
        #: config, until ``memq topic delete NAME --purge`` removes the data.
        self.deleted_topics = f"{self.root}/deleted_topics"
        self.assignments = f"{self.root}/assignments"
        self.election = f"{self.root}/governor"

    def broker(self, broker_id: str) -> str:
        return f"{self.brokers}/{broker_id}"

    def topic(self, name: str) -> str:
        return f"{self.topics}/{name}"

    def deleted_topic(self, name: str) -> str:
        return f"{self.deleted_topics}/{name}"


def dumps(obj: BaseModel | dict[str, Any]) -> bytes:
    data = obj.model_dump(mode="json", by_alias=True) if isinstance(obj, BaseModel) else obj
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def read_json(zk: ZkClient, path: str) -> tuple[dict[str, Any] | None, ZkStat | None]:
    """(data, stat) of a node, or (None, None) when it does not exist."""
    from kazoo.exceptions import NoNodeError

    try:
        raw, stat = zk.get(path)
    except NoNodeError:
        return None, None
    try:
        return (json.loads(raw) if raw else {}), stat
    except ValueError as e:
        raise CoordinationError(f"ZooKeeper node {path} holds invalid JSON: {e}") from e


def make_client(cfg: ZooKeeperConfig, *, timeout: float = 15.0) -> ZkClient:
    """A started KazooClient (retries connections forever; commands a few times)."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    zk: ZkClient = KazooClient(
        hosts=cfg.connect,
        timeout=cfg.session_timeout_ms / 1000,
        connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2),
        command_retry=KazooRetry(max_tries=5, delay=0.2, max_delay=2),
    )
    try:
        zk.start(timeout=timeout)
    except Exception as e:
        zk.close()
        raise CoordinationError(
            f"cannot connect to ZooKeeper at {cfg.connect} within {timeout:.0f} s: {e}"
        ) from e
    return zk


def now_ms() -> int:
    return int(time.time() * 1000)
