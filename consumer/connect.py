"""Where a consumer's outside world comes from: metadata, storage readers, Kafka clients.

``Consumer.connector`` is a :class:`Connector`; the default, :class:`KafkaConnector`,
asks the MemQ brokers for metadata, builds storage readers by name and joins the group
on the real Kafka. Tests replace it (before ``subscribe()``) to run the consumer's state
machine over in-process fakes: scripted rebalances, failing and slow fetches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from memq.consumer.notifications import GroupMember, NotificationProbe, NotificationSource
from memq.consumer.seeking import Probe
from memq.protocol import ClusterMetadata
from memq.security import ClientSecurity
from memq.storage_handlers.base import StorageReader

__all__ = ["Connector", "KafkaConnector"]


class Connector(Protocol):
    def metadata(
        self, bootstrap: list[str], topics: list[str], *, timeout: float, security: ClientSecurity
    ) -> ClusterMetadata:
        """The topics' metadata (notification topic and Kafka, storage settings)."""
        ...

    def reader(self, storage: Mapping[str, Any], overrides: Mapping[str, Any]) -> StorageReader:
        """A reader of a topic's storage (its advertised settings, then ``overrides``)."""
        ...

    def member(self, conf: dict[str, Any]) -> GroupMember:
        """The group member reading notifications (``conf``: librdkafka settings)."""
        ...

    def probe(self, conf: dict[str, Any]) -> Probe:
        """The group-less reader of single notifications (end offsets, seek by time)."""
        ...


class KafkaConnector:
    """The real thing: MemQ brokers, storage handlers by name, confluent-kafka."""

    def metadata(
        self, bootstrap: list[str], topics: list[str], *, timeout: float, security: ClientSecurity
    ) -> ClusterMetadata:
        from memq.client.bootstrap import fetch_metadata

        return fetch_metadata(bootstrap, topics, timeout=timeout, security=security)

    def reader(self, storage: Mapping[str, Any], overrides: Mapping[str, Any]) -> StorageReader:
        from memq.storage_handlers.registry import make_reader

        return make_reader(storage, overrides)

    def member(self, conf: dict[str, Any]) -> GroupMember:
        return NotificationSource(conf)

    def probe(self, conf: dict[str, Any]) -> Probe:
        return NotificationProbe(conf)
