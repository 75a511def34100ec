"""Topic config: storage, notification and batching settings, and ``topic_defaults``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from memq.config.base import NAME, FrozenModel, MiB
from memq.config.loading import SECRET_KEY
from memq.config.storage import StorageConfig
from memq.formats.block import INT64_MAX
from memq.retention import DEFAULT_RETENTION_MS, notification_retention_ms, retention_tags

__all__ = ["BatchConfig", "NotificationConfig", "RetentionConfig", "TopicConfig", "TopicSettings"]


class NotificationConfig(FrozenModel):
    """The Kafka topic that receives one pointer per batch object."""

    #: Kafka bootstrap servers (host:port,...).
    bootstrap_servers: str = Field(min_length=1)
    #: Notification topic; default ``memq.<cluster>.<topic>.notifications``.
    topic: str | None = Field(default=None, pattern=NAME)
    #: Partitions when MemQ creates the topic: the topic's read parallelism.
    partitions: int = Field(default=8, ge=1, le=10_000)
    #: Replication factor when MemQ creates the topic (-1: the Kafka cluster default).
    replication_factor: int = Field(default=-1, ge=-1, le=32)
    #: Create the notification topic at start if it is missing.
    create_topic: bool = True
    #: How long Kafka may take to acknowledge one notification (acks=all) before the batch fails.
    delivery_timeout_ms: int = Field(default=30_000, ge=1_000)
    #: Extra librdkafka producer settings (security.protocol, sasl.*, ssl.*, ...).
    producer: dict[str, str | int | float | bool] = {}

    def topic_for(self, cluster: str, topic: str) -> str:
        return self.topic or f"memq.{cluster}.{topic}.notifications"


class BatchConfig(FrozenModel):
    """When a topic processor seals its open batch: size, age or block count."""

    #: Seal a batch (one object, one PUT) when it reaches this size.
    max_bytes: int = Field(default=8 * MiB, ge=1024, le=1024 * MiB, alias="bytes")
    #: Seal a batch this long after its first block, full or not (the latency bound).
    ms: int = Field(default=1000, ge=1, le=3_600_000)
    #: Seal a batch when it holds this many blocks.
    max_blocks: int = Field(default=4096, ge=1, le=65536)


#: The largest value a Kafka long (and the wire's int64) holds.


class RetentionConfig(FrozenModel):
    """How long a topic's batch objects are kept: enforced by ``memq retention run`` (and,
    on S3, by lifecycle rules on the objects' ``memq-retention-days`` tag). Its notification
    topic keeps pointers at least ``retention.ms`` plus one day."""

    #: Delete the objects of every hour partition that ended longer ago than this (ms);
    #: null or -1: keep forever. Default 7 days, like Kafka.
    ms: int | None = Field(default=DEFAULT_RETENTION_MS, ge=1, le=INT64_MAX)
    #: Then delete the oldest hour partitions until the topic's objects fit in this many
    #: bytes (never the hour being written); null or -1: no size bound.
    max_bytes: int | None = Field(default=None, ge=1, le=INT64_MAX, alias="bytes")

    @field_validator("ms", "max_bytes", mode="before")
    @classmethod
    def _minus_one_is_unbounded(cls, value: Any) -> Any:
        return None if value == -1 else value

    @property
    def notification_ms(self) -> int:
        """The Kafka retention.ms the notification topic needs (-1: forever)."""
        return notification_retention_ms(self.ms)


def _dumped(value: Any) -> Any:
    return (
        value.model_dump(by_alias=True, exclude_unset=True)
        if isinstance(value, BaseModel)
        else value
    )


class TopicSettings(FrozenModel):
    """Everything about a topic except its name (what ``topic_defaults`` provides)."""

    #: Where batch objects go.
    storage: StorageConfig
    #: Where their pointers go.
    notification: NotificationConfig
    #: When batches are sealed.
    batch: BatchConfig = BatchConfig()
    #: Batch buffers this topic may hold at once from the broker's pool (its open batch
    #: plus batches uploading): bounds its share, so a hot topic cannot starve the rest.
    ring_size: int = Field(default=4, ge=2, le=1024)
    #: Largest producer block accepted (defaults to ``batch.bytes``).
    max_block_bytes: int | None = Field(default=None, ge=1024)
    #: Expected input rate, used by the governor to size the writer set.
    expected_mbps: float = Field(default=1.0, gt=0)
    #: Fewest brokers writing the topic (clustered mode): with 2 or more, producers move to
    #: another writer at once when one fails instead of waiting for a reassignment.
    min_writers: int = Field(default=2, ge=1, le=64)
    #: How long the topic's objects are kept (``retention.ms``, ``retention.bytes``).
    retention: RetentionConfig = RetentionConfig()

    @model_validator(mode="before")
    @classmethod
    def _tag_objects_with_retention(cls, data: Any) -> Any:
        """Set ``storage.s3.object_tags[memq-retention-days]`` from ``retention.ms`` (what
        lifecycle rules match), so every object carries its topic's retention class."""
        if not isinstance(data, dict):
            return data
        storage = _dumped(data.get("storage"))
        s3 = _dumped(storage.get("s3")) if isinstance(storage, dict) else None
        if not isinstance(s3, dict):
            return data
        try:
            retention = RetentionConfig.model_validate(_dumped(data.get("retention", {})))
            tags = dict(s3.get("object_tags") or {})
        except (ValidationError, TypeError, ValueError):
            return data  # the field validators report it
        enabled = s3.get("tag_retention", False) is True
        s3 = {**s3, "object_tags": retention_tags(tags, retention.ms, enabled)}
        return {**data, "storage": {**storage, "s3": s3}}

    @model_validator(mode="after")
    def _block_fits_batch(self) -> TopicSettings:
        if self.max_block_bytes is not None and self.max_block_bytes > self.batch.max_bytes:
            raise ValueError(
                f"max_block_bytes ({self.max_block_bytes}) exceeds batch.bytes "
                f"({self.batch.max_bytes}): a block must fit in one batch"
            )
        return self

    @property
    def block_limit(self) -> int:
        return self.max_block_bytes or self.batch.max_bytes

    @property
    def memory_bytes(self) -> int:
        """The most batch memory this topic can hold at once (``ring_size`` buffers)."""
        return self.ring_size * self.batch.max_bytes


class TopicConfig(TopicSettings):
    """One topic: its name plus everything ``topic_defaults`` can provide."""

    #: Topic name: 1-249 of A-Z a-z 0-9 . _ -
    name: str = Field(pattern=NAME)

    def notification_topic(self, cluster: str) -> str:
        return self.notification.topic_for(cluster, self.name)

    def without_secrets(self) -> TopicConfig:
        """This config as it may be stored and shown (ZooKeeper, admin answers): no
        Kafka client passwords, no static S3 keys. Each broker fills them back from its
        own config (:meth:`with_secrets_from`)."""
        n = self.notification
        producer = {k: v for k, v in n.producer.items() if not SECRET_KEY.search(k)}
        update: dict[str, Any] = {}
        if producer != n.producer:
            update["notification"] = n.model_copy(update={"producer": producer})
        s3 = self.storage.s3
        if s3 is not None and (s3.secret_access_key is not None or s3.access_key_id):
            update["storage"] = self.storage.model_copy(
                update={
                    "s3": s3.model_copy(update={"access_key_id": None, "secret_access_key": None})
                }
            )
        return self.model_copy(update=update) if update else self

    def with_secrets_from(self, defaults: TopicSettings | None) -> TopicConfig:
        """This config with the secrets :meth:`without_secrets` removed, taken from this
        broker's own ``topic_defaults`` (where operators put them, e.g. through
        ``MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.PASSWORD``)."""
        if defaults is None:
            return self
        update: dict[str, Any] = {}
        secrets = {k: v for k, v in defaults.notification.producer.items() if SECRET_KEY.search(k)}
        missing = {k: v for k, v in secrets.items() if k not in self.notification.producer}
        if missing:
            producer = {**self.notification.producer, **missing}
            update["notification"] = self.notification.model_copy(update={"producer": producer})
        s3, own = self.storage.s3, defaults.storage.s3
        if (
            s3 is not None
            and own is not None
            and s3.secret_access_key is None
            and own.secret_access_key
        ):
            keys = {"access_key_id": own.access_key_id, "secret_access_key": own.secret_access_key}
            update["storage"] = self.storage.model_copy(update={"s3": s3.model_copy(update=keys)})
        return self.model_copy(update=update) if update else self
