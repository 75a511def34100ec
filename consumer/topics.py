"""The topics a consumer reads: resolved once each from the brokers' metadata.

A MemQ topic's metadata names its notification topic (and its Kafka), its storage (a
reader is built for it) and its retention. Every topic of one consumer must notify to
the same Kafka: one Kafka consumer reads them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from memq.consumer.config import ConsumerConfig
from memq.consumer.connect import Connector
from memq.errors import AuthorizationError, MemqError, UnknownTopicError
from memq.protocol import TopicMetadata
from memq.storage_handlers.base import StorageReader

__all__ = ["Topic", "Topics"]


@dataclass
class Topic:
    name: str  # MemQ topic
    meta: TopicMetadata
    reader: StorageReader

    @property
    def partitions(self) -> int:
        return int(self.meta.notification.get("partitions") or 0)


class Topics:
    """The resolved topics, by notification topic, and the one Kafka they notify to."""

    def __init__(
        self,
        config: ConsumerConfig,
        bootstrap: list[str],
        storage: Mapping[str, Any],
        connector: Callable[[], Connector],
    ) -> None:
        self._config = config
        self._bootstrap = bootstrap
        self._storage = storage
        self._connector = connector
        self.by_note: dict[str, Topic] = {}  # notification topic -> topic
        self._notes: dict[str, str] = {}  # MemQ topic -> notification topic
        #: The Kafka every resolved topic notifies to.
        self.kafka: str | None = None

    def resolve(self, names: list[str]) -> list[str]:
        """The notification topics of ``names``, asking the brokers about new ones."""
        todo = [n for n in dict.fromkeys(names) if n not in self._notes]
        if todo:
            self._add(todo)
        return [self._notes[n] for n in names]

    def _add(self, names: list[str]) -> None:
        cfg = self._config
        connector = self._connector()
        meta = connector.metadata(
            self._bootstrap,
            names,
            timeout=cfg.metadata_timeout_ms / 1000,
            security=cfg.security(),
        )
        found: list[TopicMetadata] = []
        kafka = {self.kafka} if self.kafka is not None else set()
        for name in names:
            t = meta.topics.get(name)
            if t is not None and t.error and t.error.startswith("not authorized"):
                raise AuthorizationError(t.error)  # (the broker's answer to a denied name)
            if t is None or t.error is not None:
                raise UnknownTopicError(
                    t.error
                    if t is not None and t.error
                    else f"no metadata for topic {name!r} from cluster {meta.cluster!r}"
                )
            found.append(t)
            kafka.add(cfg.notification_bootstrap_servers or t.notification["bootstrap_servers"])
        if len(kafka) != 1:
            raise MemqError(
                f"topics {sorted({*self._notes, *names})} notify to different Kafka clusters "
                f"({sorted(kafka)}): use one consumer per cluster"
            )
        self.kafka = kafka.pop()
        for t in found:
            note_topic = t.notification["topic"]
            reader = connector.reader(t.storage, self._storage)
            self.by_note[note_topic] = Topic(t.name, t, reader)
            self._notes[t.name] = note_topic

    def note_topic(self, name: str) -> str:
        """The notification topic of a resolved topic."""
        try:
            return self._notes[name]
        except KeyError:
            raise UnknownTopicError(f"topic {name!r} is not subscribed or assigned") from None

    def refresh(self, name: str) -> int:
        """Ask the brokers for a resolved topic's metadata again (its partitions may have
        grown); returns its partition count."""
        cfg = self._config
        meta = self._connector().metadata(
            self._bootstrap, [name], timeout=cfg.metadata_timeout_ms / 1000,
            security=cfg.security(),
        )  # fmt: skip
        topic = self.by_note[self.note_topic(name)]
        t = meta.topics.get(name)
        if (
            t is not None
            and t.error is None
            and t.notification["topic"] == topic.meta.notification["topic"]
        ):
            topic.meta = t
        return topic.partitions

    def check_partition(self, name: str, partition: int) -> None:
        count = self.by_note[self.note_topic(name)].partitions
        if count and partition >= count:  # grown since it was resolved?
            count = self.refresh(name)
        if count and not 0 <= partition < count:
            raise MemqError(
                f"topic {name!r} has partitions 0-{count - 1}: there is no partition {partition}"
            )

    def close(self) -> None:
        for t in self.by_note.values():
            t.reader.close()
