"""What a broker needs from a cluster, and what a cluster may ask of its broker.

The broker owns these two small interfaces; it never imports the cluster layer:

- :class:`ClusterView`: who writes which topic, the topics' configs, the brokers, topic
  creation and the admin requests. :class:`StandaloneView` (here) serves a broker with
  no ZooKeeper; :class:`memq.governor.member.ClusterMember` implements it for clustered
  brokers; the runner (:mod:`memq.run.broker`) picks one and hands it to the server.
- :class:`TopicHost`: the broker as the cluster sees it: its address, the topics it
  writes, starting and stopping topic processors, swapping the ACLs in force.

A leaf module: it imports only pure formats, config and errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from memq.acl import AclEntry
from memq.config import BrokerConfig, TopicConfig
from memq.errors import InvalidRequestError
from memq.protocol import (
    AclList,
    AclListResponse,
    AdminRequest,
    BrokerInfo,
    ClusterStatus,
    ClusterStatusRequest,
    TopicList,
    TopicListResponse,
)

__all__ = ["AdminResponse", "ClusterView", "LoadReport", "StandaloneView", "TopicHost"]

#: What an admin request is answered with (encoded as a msgpack map).
AdminResponse = Any


@dataclass(frozen=True)
class LoadReport:
    """What a broker measures for the governor's placement."""

    #: Ingest per topic, MB/s, smoothed over the last reports.
    topic_mbps: dict[str, float]
    pool_limit_bytes: int
    pool_free_bytes: int


class TopicHost(Protocol):
    """The broker, as seen by its cluster membership."""

    @property
    def info(self) -> BrokerInfo:
        """Id, advertised host, bound ports and rack."""
        ...

    @property
    def draining(self) -> bool:
        """Shutting down: assignments are no longer followed."""
        ...

    def hosted_topics(self) -> dict[str, TopicConfig]:
        """The topics this broker writes now, with the config each runs with."""
        ...

    async def start_topic(self, cfg: TopicConfig) -> None:
        """Start writing a topic (idempotent)."""
        ...

    async def stop_topic(self, name: str, trigger: str) -> None:
        """Stop writing a topic: seal and upload its open batch, answer its writers."""
        ...

    def set_acls(self, entries: list[AclEntry]) -> None:
        """Replace the ACL entries in force (superusers stay those of the config)."""
        ...

    def load_report(self) -> LoadReport:
        """Measured ingest per topic and the buffer pool's state (any thread)."""
        ...


class ClusterView(Protocol):
    """Who writes what, and the cluster's admin operations."""

    #: True when topics are created through the cluster (ZooKeeper), not config files.
    clustered: bool

    async def join(self, host: TopicHost) -> None:
        """Start following the cluster for ``host`` (register, watch assignments)."""
        ...

    async def leave(self) -> None:
        """Stop following the cluster (deregister first: writers move away at once)."""
        ...

    def brokers(self) -> list[BrokerInfo]: ...

    def writers(self, topic: str) -> list[str]:
        """Ids of the live brokers that write ``topic`` (empty if none or unknown)."""
        ...

    def governor_id(self) -> str | None: ...

    def topic_config(self, topic: str) -> TopicConfig | None: ...

    def topic_names(self) -> list[str]: ...

    async def create_topic(
        self, name: str, settings: dict[str, Any] | None = None, if_not_exists: bool = True
    ) -> TopicConfig: ...

    async def admin(self, req: AdminRequest) -> AdminResponse:
        """Answer a typed admin request (topics, cluster status, ACLs)."""
        ...


_STANDALONE_TOPICS = (
    "this broker is standalone: its topics come from its config file (add the topic "
    "there and restart), or run brokers clustered with zookeeper configured"
)
_STANDALONE_ACLS = (
    "this broker is standalone: its ACLs come from auth.acls in its config file "
    "(edit it and restart), or run brokers clustered with zookeeper configured"
)


class StandaloneView:
    """A broker without ZooKeeper: it writes every topic it hosts, and only those."""

    clustered = False

    def __init__(self, config: BrokerConfig, acls: list[AclEntry]) -> None:
        self.config = config
        self.acl_entries = acls
        self._host: TopicHost | None = None

    async def join(self, host: TopicHost) -> None:
        self._host = host

    async def leave(self) -> None:
        self._host = None

    def _topics(self) -> dict[str, TopicConfig]:
        return self._host.hosted_topics() if self._host is not None else {}

    def brokers(self) -> list[BrokerInfo]:
        return [self._host.info] if self._host is not None else []

    def writers(self, topic: str) -> list[str]:
        return [self.config.broker_id] if topic in self._topics() else []

    def governor_id(self) -> str | None:
        return None

    def topic_config(self, topic: str) -> TopicConfig | None:
        return self._topics().get(topic)

    def topic_names(self) -> list[str]:
        return sorted(self._topics())

    async def create_topic(
        self, name: str, settings: dict[str, Any] | None = None, if_not_exists: bool = True
    ) -> TopicConfig:
        raise InvalidRequestError(_STANDALONE_TOPICS)

    async def admin(self, req: AdminRequest) -> AdminResponse:
        match req:
            case AclList():
                return AclListResponse(entries=self.acl_entries)
            case TopicList():
                return TopicListResponse(topics=self.topic_names())
            case ClusterStatusRequest():
                names = self.topic_names()
                return ClusterStatus(
                    cluster=self.config.cluster,
                    standalone=True,
                    brokers=[
                        {
                            **b.model_dump(),
                            "capacity_mbps": self.config.capacity_mbps,
                            "topics": names,
                        }
                        for b in self.brokers()
                    ],
                    topics={t: {"writers": [self.config.broker_id]} for t in names},
                )
            case _ if req.type.name.startswith("ACL_"):
                raise InvalidRequestError(_STANDALONE_ACLS)
            case _:
                raise InvalidRequestError(_STANDALONE_TOPICS)
