"""Consumer configuration (Kafka-style keys accepted)."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from memq.config import AuditedClientConfig

__all__ = ["ConsumerConfig"]

MiB = 1024 * 1024
#: Settings of the classic group protocol that group.protocol=consumer leaves to the
#: broker (librdkafka refuses to start with them): (field, Kafka key).
BROKER_SIDE = (
    ("session_timeout_ms", "session.timeout.ms"),
    ("heartbeat_interval_ms", "heartbeat.interval.ms"),
)
#: The same, among the extra librdkafka settings (``kafka``).
KAFKA_BROKER_SIDE = ("partition.assignment.strategy",)


_RESET_ALIASES = {"smallest": "earliest", "beginning": "earliest", "earliest": "earliest",
                  "largest": "latest", "end": "latest", "latest": "latest"}  # fmt: skip


class ConsumerConfig(AuditedClientConfig):
    """Settings of ``memq.Consumer``: the names and meanings Kafka users know."""

    #: MemQ brokers (host:port,...), asked once for the topic's notification topic and storage.
    #: None: the local stack under MEMQ_STATE_DIR / .memq.
    bootstrap_servers: str | None = Field(default=None, alias="bootstrap.servers")
    #: Consumer group: a Kafka consumer group on the notification topic. subscribe() needs
    #: one; assign() reads partitions without (and commits only with) one.
    group_id: str | None = Field(default=None, alias="group.id", min_length=1)
    #: Where a partition without a committed offset (or without a group) starts: earliest
    #: or latest.
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="latest", alias="auto.offset.reset"
    )
    #: Commit, at the start of consume()/poll(), what earlier calls handed to the
    #: application (with a group.id): a crash while processing a batch hands it out again.
    enable_auto_commit: bool = Field(default=True, alias="enable.auto.commit")
    #: How often poll()/consume() commit with enable.auto.commit.
    auto_commit_interval_ms: int = Field(default=5000, ge=100, alias="auto.commit.interval.ms")
    #: Kafka's consumer group protocol: classic (every Kafka: each rebalance stops
    #: every member until all rejoined; the client sets session.timeout.ms and
    #: heartbeat.interval.ms) or consumer (KIP-848, Kafka 4.0 up: the broker assigns
    #: partitions incrementally, only those changing owner stop, and it sets the
    #: session and heartbeat, group.consumer.*). classic by default, as in Kafka's Java
    #: client and librdkafka: a Kafka 3.x (or a Kafka-protocol broker without KIP-848)
    #: cannot serve consumer.
    group_protocol: Literal["classic", "consumer"] = Field(
        default="classic", alias="group.protocol"
    )
    #: Kafka group session timeout (a dead member is noticed after this long).
    #: group.protocol=classic only (the broker's group.consumer.session.timeout.ms
    #: otherwise). Against the local dev stack 6000 unless set: a consumer killed there
    #: (or stopped without close()) holds up its group's next join for this long.
    session_timeout_ms: int = Field(default=45_000, ge=1000, alias="session.timeout.ms")
    #: Kafka group heartbeat period (below a third of session.timeout.ms; 1000 against
    #: the local dev stack unless set). group.protocol=classic only.
    heartbeat_interval_ms: int = Field(default=3000, ge=100, alias="heartbeat.interval.ms")
    #: Objects fetched ahead of the application (concurrently).
    prefetch_objects: int = Field(default=8, ge=1, le=1024, alias="prefetch.objects")
    #: Bound on the bytes of objects fetched ahead (their decoded records are held too),
    #: and on the receive buffers kept for reuse by later fetches (objects of 256 KiB up).
    prefetch_bytes: int = Field(default=256 * MiB, ge=MiB, alias="prefetch.bytes")
    #: Parallel GETs (threads) fetching objects.
    fetch_concurrency: int = Field(default=4, ge=1, le=256, alias="fetch.concurrency")
    #: How long a fetch that fails with a retriable error (an S3 error, a timeout) is retried
    #: (full-jitter backoff) before consume()/poll() raise it; the object stays next in line.
    fetch_retry_timeout_ms: int = Field(default=60_000, ge=0, alias="fetch.retry.timeout.ms")
    #: First backoff between fetch retries (they grow, jittered, up to retry.backoff.max.ms).
    retry_backoff_ms: int = Field(default=100, ge=1, alias="retry.backoff.ms")
    #: Longest backoff between fetch retries.
    retry_backoff_max_ms: int = Field(default=5000, ge=1, alias="retry.backoff.max.ms")
    #: How long close() waits for fetches in flight before it closes the storage readers
    #: (fetches still running then are abandoned and counted).
    close_timeout_ms: int = Field(default=10_000, ge=0, alias="close.timeout.ms")
    #: What to do with a missing (deleted) or corrupt object: fail (raise) or skip (log, count).
    corrupt_object_policy: Literal["fail", "skip"] = Field(
        default="fail", alias="corrupt.object.policy"
    )
    #: What to do with an object deleted past its topic's retention (its notification is
    #: older than retention.ms): skip (log, count in skipped_expired, on_skip) or fail
    #: (raise ObjectExpiredError, an ObjectNotFoundError). A missing object within
    #: retention follows corrupt.object.policy.
    missing_object_policy: Literal["skip", "fail"] = Field(
        default="skip", alias="missing.object.policy"
    )
    #: Drop copies of blocks already handed out (same producer id, epoch and sequence), e.g.
    #: a block a producer re-sent after a writer crashed (docs/guarantees.md).
    dedup_enable: bool = Field(default=True, alias="dedup.enable")
    #: Block ids remembered per producer (older ones are delivered again, and counted).
    dedup_window_blocks: int = Field(default=2_000, ge=1, alias="dedup.window.blocks")
    #: Producers remembered (least recently seen ones are forgotten first).
    dedup_window_producers: int = Field(default=5_000, ge=1, alias="dedup.window.producers")
    #: A producer not seen for this long is forgotten.
    dedup_window_ms: int = Field(default=3_600_000, ge=1, alias="dedup.window.ms")
    #: Use this Kafka for notifications instead of the one the brokers advertise.
    notification_bootstrap_servers: str | None = Field(
        default=None, alias="notification.bootstrap.servers"
    )
    #: Override storage settings the brokers advertise (e.g. endpoint_url, region, root).
    storage: dict[str, Any] = {}
    #: Extra librdkafka settings for the notification consumer (security.protocol, sasl.*;
    #: fetch.wait.max.ms is 100 and topic.metadata.refresh.interval.ms 10000 unless set
    #: here).
    kafka: dict[str, str | int | float | bool] = {}
    #: Deadline of the metadata request to the brokers at subscribe()/assign(), and of
    #: reading the group's committed offsets (with their record positions) on assignment.
    metadata_timeout_ms: int = Field(default=10_000, ge=100, alias="metadata.timeout.ms")
    #: Name of this client in audit records and logs.
    client_id: str = Field(default="memq-consumer", alias="client.id")

    def bootstrap_list(self) -> list[str]:
        return [s.strip() for s in (self.bootstrap_servers or "").split(",") if s.strip()]

    @field_validator("auto_offset_reset", mode="before")
    @classmethod
    def _reset_alias(cls, v: Any) -> Any:
        """librdkafka's other names for earliest and latest (kcat and Kafka users type
        them); Java's none / librdkafka's error (fail without a committed offset) are
        not supported and stay an error naming the two that are."""
        if isinstance(v, str):
            return _RESET_ALIASES.get(v.strip().lower(), v)
        return v

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ValueError(
                f"retry.backoff.max.ms ({self.retry_backoff_max_ms}) is below "
                f"retry.backoff.ms ({self.retry_backoff_ms})"
            )
        self._check_group_protocol()
        if self.audit_enable and self.group_id is None:
            raise ValueError(
                "audit.enable needs a group.id: the auditor counts consumption per group "
                "(a read without one is not audited)"
            )
        return self

    def _check_group_protocol(self) -> None:
        if "group.protocol" in self.kafka:  # one place says which protocol: ours
            raise ValueError(
                "set group.protocol as a consumer setting, not in kafka (it also decides "
                "which group settings are sent)"
            )
        if self.group_protocol != "consumer":
            return
        given = [alias for name, alias in BROKER_SIDE if name in self.model_fields_set]
        given += [k for k in (*(a for _, a in BROKER_SIDE), *KAFKA_BROKER_SIDE) if k in self.kafka]
        if given:
            raise ValueError(
                f"{' and '.join(given)} conflict{'s' if len(given) == 1 else ''} with "
                "group.protocol=consumer, where the broker sets the group's session, "
                "heartbeat and assignment (group.consumer.*, group.remote.assignor): remove "
                f"{'it' if len(given) == 1 else 'them'} or use group.protocol=classic"
            )

    def audit_enabled(self, uses_local_stack: bool) -> bool:
        """Audited only as a group member: group-less reads (one-off, repeated at will)
        were counted under a blank group, each re-read as duplicates."""
        return self.group_id is not None and super().audit_enabled(uses_local_stack)
