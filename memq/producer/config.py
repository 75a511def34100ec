"""Producer configuration (Kafka-style keys accepted)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from memq.config import AuditedClientConfig
from memq.errors import MemqError
from memq.formats.block import BLOCK_VERSION
from memq.formats.compression import Compression, parse_compression
from memq.protocol import Ack, parse_ack

__all__ = ["ProducerConfig"]

MiB = 1024 * 1024


class ProducerConfig(AuditedClientConfig):
    """Settings of ``memq.Producer``: the names and meanings Kafka users know."""

    #: MemQ brokers (host:port,...). None: the local stack under MEMQ_STATE_DIR / .memq.
    bootstrap_servers: str | None = Field(default=None, alias="bootstrap.servers")
    #: 0: fire and forget; 1: the broker has the block in memory; all: stored in S3 and notified.
    acks: Ack = Field(default=Ack.ALL, alias="acks")
    #: How long to wait for more records before sending a block.
    linger_ms: float = Field(default=20, ge=0, alias="linger.ms")
    #: Block (request) size in bytes, before compression; capped by the topic's limit. A
    #: record larger than this goes in a block of its own, up to the topic's
    #: max_block_bytes, as Kafka sends a record larger than batch.size alone: the largest
    #: record is the topic's, whatever batch.size is.
    batch_size: int = Field(default=MiB, ge=1024, le=256 * MiB, alias="batch.size")
    #: Block codec: none, gzip, zstd or lz4 (the broker never recompresses); a block it
    #: would not shrink is stored uncompressed.
    compression_type: Compression = Field(default=Compression.ZSTD, alias="compression.type")
    #: Block format the producer writes: 2 (columns: readers hand values on without a
    #: copy each) or 1 (msgpack records) while some reader (consumer, Spark job, auditor)
    #: does not know format 2 yet: upgrade every reader before producers write 2.
    block_version: int = Field(default=BLOCK_VERSION, ge=1, le=2, alias="block.version")
    #: Retries of a failed request (bounded in time by delivery.timeout.ms).
    retries: int = Field(default=2_147_483_647, ge=0, alias="retries")
    #: First retry backoff; grows x2 per try, fully jittered.
    retry_backoff_ms: int = Field(default=100, ge=1, alias="retry.backoff.ms")
    #: Largest retry backoff.
    retry_backoff_max_ms: int = Field(default=2000, ge=1, alias="retry.backoff.max.ms")
    #: Upper bound on the time from produce() to success or failure, retries included.
    delivery_timeout_ms: int = Field(default=120_000, ge=1000, alias="delivery.timeout.ms")
    #: Deadline of one request (ack=all waits for the broker's batch to be stored).
    request_timeout_ms: int = Field(default=30_000, ge=100, alias="request.timeout.ms")
    #: Requests in flight per broker connection. With acks=all a request waits for its
    #: batch (up to the topic's batch.ms), so this must cover batch.bytes / batch.size
    #: blocks; memory stays bounded by buffer.memory.
    max_in_flight: int = Field(default=256, ge=1, le=100_000, alias="max.in.flight")
    #: Bytes of records accepted but not yet acknowledged; produce() blocks beyond it.
    #: An open block of a quiet topic holds 16 KiB of it and takes more as it fills (up
    #: to batch.size), so many topics with few records each take little; a busy topic's
    #: block holds batch.size.
    buffer_memory: int = Field(default=64 * MiB, ge=MiB, alias="buffer.memory")
    #: How long produce() may block on a full buffer before raising BufferFullError.
    max_block_ms: int = Field(default=60_000, ge=0, alias="max.block.ms")
    #: Refresh topic metadata (writers, limits) at least this often.
    metadata_max_age_ms: int = Field(default=30_000, ge=100, alias="metadata.max.age.ms")
    #: TCP connect timeout to a broker.
    connect_timeout_ms: int = Field(default=10_000, ge=100, alias="connect.timeout.ms")
    #: Name of this client in broker logs.
    client_id: str = Field(default="memq-producer", alias="client.id")
    #: Fixed producer id (u64); random when unset. Reuse it across restarts with a new epoch.
    producer_id: int | None = Field(default=None, ge=0, le=(1 << 64) - 1, alias="producer.id")
    #: Epoch of a fixed producer.id: bump it on each restart so old blocks stay distinct.
    epoch: int = Field(default=0, ge=0, le=0xFFFFFFFF, alias="producer.epoch")
    #: Threads that encode and compress blocks off the caller's thread (blocks of at most
    #: 16 KiB of records are encoded on the I/O loop: cheaper than the hop).
    encode_threads: int = Field(default=1, ge=1, le=64, alias="encode.threads")

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v: Any) -> Ack:
        try:
            return v if isinstance(v, Ack) else parse_ack(v)
        except MemqError as e:
            raise ValueError(str(e)) from None

    @field_validator("compression_type", mode="before")
    @classmethod
    def _codec(cls, v: Any) -> Compression:
        try:
            return parse_compression(v)
        except MemqError as e:
            raise ValueError(str(e)) from None

    def bootstrap_list(self) -> list[str]:
        return [s.strip() for s in (self.bootstrap_servers or "").split(",") if s.strip()]
