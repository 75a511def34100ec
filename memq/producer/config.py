"""Producer configuration (Kafka-style keys accepted)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from pydantic import Field, field_validator

from memq.config import AuditedClientConfig
from memq.errors import ConfigError, MemqError
from memq.formats.block import BLOCK_VERSION
from memq.formats.compression import Compression, parse_compression
from memq.protocol import Ack, parse_ack

__all__ = ["KAFKA_PRODUCER_KEYS", "KafkaKey", "ProducerConfig", "translate_kafka_keys"]

MiB = 1024 * 1024
_TRUE = {"true", "1", "yes", "on"}


@dataclass(frozen=True)
class KafkaKey:
    """A Kafka producer setting (Java client or librdkafka) memq.Producer has no field
    of its own for: honoured under another name (``to``), accepted as a no-op when
    ``accepts`` holds for its value, or else refused with ``says``."""

    says: str
    #: The MemQ key it sets (the value times ``scale``).
    to: str | None = None
    scale: int = 1
    #: Values accepted and ignored (everything else is refused).
    accepts: frozenset[str] = frozenset()


#: What memq.Producer does with the Kafka producer keys it has no field for (the rest of
#: Kafka's common keys, bootstrap.servers, acks (0, 1, all, -1), linger.ms, batch.size,
#: compression.type, client.id, retries, delivery.timeout.ms, buffer.memory,
#: max.block.ms, are its own fields, with Kafka's meaning).
KAFKA_PRODUCER_KEYS: dict[str, KafkaKey] = {
    "enable.idempotence": KafkaKey(
        "MemQ's producer is always idempotent (every block carries its producer id, epoch "
        "and sequence, and a retried block is answered as a duplicate): remove the key "
        "(true is accepted and changes nothing)",
        accepts=frozenset(_TRUE),
    ),
    "max.in.flight.requests.per.connection": KafkaKey(
        "MemQ's producer keeps per-key order with any number of requests in flight; its "
        "own limit is max.in.flight (default 256: with acks=all each request waits for "
        "the broker's batch, so Kafka's 5 would stall it)"
    ),
    "max.request.size": KafkaKey(
        "the largest request (one block, so also the largest record) is batch.size "
        "(default 1 MiB, capped by the topic's max_block_bytes): set batch.size"
    ),
    "transactional.id": KafkaKey(
        "MemQ has no transactions: each block is stored whole or not at all, and its "
        "(producer id, epoch, sequence) makes retries exactly-once; remove the key"
    ),
    "key.serializer": KafkaKey(
        "memq.Producer takes bytes (str is encoded as UTF-8): serialize keys before produce()"
    ),
    "value.serializer": KafkaKey(
        "memq.Producer takes bytes (str is encoded as UTF-8): serialize values before produce()"
    ),
    "partitioner": KafkaKey(
        "a MemQ topic has no producer-side partitions: records with the same key keep "
        "their order (docs/guarantees.md); remove the key"
    ),
    "partitioner.class": KafkaKey(
        "a MemQ topic has no producer-side partitions: records with the same key keep "
        "their order (docs/guarantees.md); remove the key"
    ),
    "batch.num.messages": KafkaKey(
        "a MemQ block is bounded in bytes: set batch.size (and linger.ms)"
    ),
    "queue.buffering.max.messages": KafkaKey(
        "the producer's buffer is bounded in bytes: set buffer.memory"
    ),
    "sasl.mechanism": KafkaKey(
        "MemQ's own protocol authenticates with a token (auth.token, from `memq token "
        "create`) or a client certificate; SASL is for the brokers' Kafka port"
    ),
    "sasl.mechanisms": KafkaKey(
        "MemQ's own protocol authenticates with a token (auth.token, from `memq token "
        "create`) or a client certificate; SASL is for the brokers' Kafka port"
    ),
    "sasl.username": KafkaKey(
        "MemQ's own protocol authenticates with a token: set auth.token (`memq token "
        "create`) instead of sasl.username/sasl.password"
    ),
    "sasl.password": KafkaKey(
        "MemQ's own protocol authenticates with a token: set auth.token (`memq token "
        "create`) instead of sasl.username/sasl.password"
    ),
    "error_cb": KafkaKey(
        "errors reach each record's future and its on_delivery callback (and "
        "Producer.stats()): remove error_cb"
    ),
    # librdkafka's names of MemQ's own keys
    "queue.buffering.max.ms": KafkaKey("librdkafka's name of linger.ms", to="linger.ms"),
    "queue.buffering.max.kbytes": KafkaKey(
        "librdkafka's buffer.memory in KiB", to="buffer.memory", scale=1024
    ),
    "message.timeout.ms": KafkaKey(
        "librdkafka's name of delivery.timeout.ms", to="delivery.timeout.ms"
    ),
    "request.required.acks": KafkaKey("librdkafka's name of acks", to="acks"),
    "compression.codec": KafkaKey("librdkafka's name of compression.type", to="compression.type"),
    "message.send.max.retries": KafkaKey("librdkafka's name of retries", to="retries"),
    "metadata.broker.list": KafkaKey(
        "librdkafka's name of bootstrap.servers", to="bootstrap.servers"
    ),
}


def translate_kafka_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the keys of :data:`KAFKA_PRODUCER_KEYS` applied: renamed, dropped
    (accepted no-ops) or refused with a one-line ConfigError saying what to do. Keys are
    Kafka's dotted names or the same with underscores."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("_", ".") if key != "error_cb" else key
        spec = KAFKA_PRODUCER_KEYS.get(name)
        if spec is None:
            if key == "security.protocol" and str(value).lower().startswith("sasl"):
                raise ConfigError(
                    f"invalid ProducerConfig setting security.protocol={value!r}: MemQ's "
                    "own protocol has no SASL: use ssl (or plaintext) with auth.token "
                    "(`memq token create`); SASL is for the brokers' Kafka port"
                )
            out[key] = value
            continue
        if spec.to is not None:
            target = spec.to
            if target in data or target.replace(".", "_") in data:
                raise ConfigError(
                    f"invalid ProducerConfig settings: {key} ({spec.says}) and {target} are "
                    "the same setting: give one of them"
                )
            scaled = value
            if spec.scale != 1:
                try:
                    scaled = int(value) * spec.scale
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"invalid ProducerConfig setting {key}={value!r}: a whole number "
                        f"({spec.says})"
                    ) from None
            out[target] = scaled
        elif str(value).strip().lower() not in spec.accepts:
            raise ConfigError(f"invalid ProducerConfig setting {key}={value!r}: {spec.says}")
    return out


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

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        """Kafka's producer keys included: see :data:`KAFKA_PRODUCER_KEYS`."""
        return super().from_mapping(translate_kafka_keys({**(data or {}), **kwargs}))

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
