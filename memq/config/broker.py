"""Broker config: one YAML file per broker, with ZooKeeper for clustered mode.

Each entry of ``topics`` is merged over ``topic_defaults``; ``MEMQ__`` environment
variables override the file (see :mod:`memq.config.loading`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from memq.config.base import BROKER_ID, NAME, FrozenModel, MiB
from memq.config.loading import deep_merge, read_config_layers, validate_model
from memq.config.topic import TopicConfig, TopicSettings
from memq.errors import ConfigError
from memq.security import AuthConfig, TlsConfig

__all__ = [
    "BrokerAuditConfig",
    "BrokerConfig",
    "KafkaListenerConfig",
    "ZooKeeperConfig",
    "load_broker_config",
]


class ZooKeeperConfig(FrozenModel):
    """Clustered mode: brokers register in ZooKeeper and a governor assigns topics."""

    #: ZooKeeper connect string (host:port,...).
    connect: str = Field(min_length=1)
    #: Path under which the cluster keeps its state.
    chroot: str = Field(default="/memq", pattern=r"^/[A-Za-z0-9._/-]*$")
    #: Session timeout: a lost broker is noticed after about this long.
    session_timeout_ms: int = Field(default=6000, ge=1000, le=60_000)
    #: How the governor places topics: weighted-rendezvous (stable when brokers come and
    #: go) or least-loaded (evens out load). Give every broker the same value.
    assignment: Literal["weighted-rendezvous", "least-loaded"] = "weighted-rendezvous"
    #: How often a broker reports its measured per-topic ingest and free buffer memory.
    load_report_ms: int = Field(default=10_000, ge=500, le=300_000)


class KafkaListenerConfig(FrozenModel):
    """A Kafka-protocol produce endpoint (ApiVersions, Metadata, Produce, InitProducerId):
    any Kafka producer can write to MemQ with MemQ's acks (docs/ingest.md)."""

    #: TCP port of the Kafka listener (0: any free port, printed at start).
    port: int = Field(default=9094, ge=0, le=65535)
    #: Port Kafka clients are told to use (default: the bound port), e.g. behind a NAT.
    advertised_port: int | None = Field(default=None, ge=1, le=65535)
    #: Kafka partitions each topic shows (default: the topic's notification.partitions).
    #: A partition is only a routing label: every record of a topic goes to one MemQ topic.
    partitions: int | None = Field(default=None, ge=1, le=10_000)
    #: Use the broker's ``tls`` section on this port too (when the broker has one).
    tls: bool = True


class BrokerAuditConfig(FrozenModel):
    """Audit records of the blocks the broker makes itself: one ``produced`` record per
    block written over HTTP ingest or the Kafka port, once its batch is stored and
    notified (a ``memq.Producer`` reports its own blocks). Emission never blocks or fails
    a write: a full queue or an unreachable Kafka drops records and counts them
    (``memq_broker_audit_records_total{outcome="dropped"}``). See docs/audit.md."""

    #: Kafka topic of the audit records (what ``memq audit serve`` reads).
    topic: str = Field(default="memq.audit", pattern=NAME)
    #: Kafka of the audit topic; null: the Kafka of the topics' notifications (that of
    #: the first topic with an audited write), with the security.*, sasl.* and ssl.*
    #: settings of topic_defaults' notification.producer under the ``kafka`` ones.
    bootstrap_servers: str | None = Field(default=None, min_length=1)
    #: Audit records queued for Kafka at most; beyond it they are dropped and counted.
    queue_max: int = Field(default=100_000, ge=100)
    #: Extra librdkafka settings of the audit producer (security.protocol, sasl.*, ssl.*).
    kafka: dict[str, str | int | float | bool] = {}


def _hostname() -> str:
    return socket.gethostname().split(".")[0] or "broker"


class BrokerConfig(FrozenModel):
    """One broker's configuration file."""

    #: Unique broker id (default: the short hostname): 1-64 of A-Z a-z 0-9 . -
    broker_id: str = Field(default_factory=_hostname, pattern=BROKER_ID)
    #: Cluster name: part of every object key and notification topic name.
    cluster: str = Field(default="default", pattern=NAME)
    #: Interface to listen on (0.0.0.0 in containers).
    host: str = "127.0.0.1"
    #: TCP port of the broker protocol (0: any free port, printed at start).
    port: int = Field(default=9092, ge=0, le=65535)
    #: Host clients should use (default: ``host``).
    advertised_host: str | None = None
    #: Prometheus /metrics, /healthz, /readyz (0: any free port; null: disabled).
    http_port: int | None = Field(default=9093, ge=0, le=65535)
    #: Rack / availability zone, for spreading a topic's writers.
    rack: str | None = None
    #: Ingest this broker can take (MB/s), for the governor's assignment.
    capacity_mbps: float = Field(default=100.0, gt=0)
    #: Largest request accepted; larger frames are refused and the connection closed.
    #: The broker keeps up to twice this in reused buffers for requests of 128 KiB up.
    max_frame_bytes: int = Field(default=16 * MiB, ge=64 * 1024, le=1024 * MiB)
    #: Broker-wide bound on batch buffer memory: every topic's open batches and uploads
    #: take their buffers from one pool of this size (an idle topic takes none).
    memory_limit_bytes: int = Field(default=1024 * MiB, ge=MiB)
    #: Client connections accepted at once; more are refused.
    max_connections: int = Field(default=1024, ge=1)
    #: Connections with no complete request for this long are closed (on the Kafka
    #: port: no byte of the next request for this long).
    idle_timeout_s: float = Field(default=300.0, gt=0)
    #: How long a write may wait for a free batch buffer before THROTTLED.
    throttle_timeout_ms: int = Field(default=5000, ge=0)
    #: Threads that upload batches (uploads never run on the event loop).
    upload_threads: int = Field(default=16, ge=1, le=512)
    #: On SIGTERM, how long to wait for open batches to upload before exiting.
    shutdown_timeout_s: float = Field(default=60.0, gt=0)
    #: Python's cyclic garbage collector thresholds (generation 0, 1, 2), set by
    #: ``memq broker`` at start. Python's own (700, 10, 10) run a full collection every few
    #: seconds at 1,000 topics, each pausing the event loop 0.1-0.9 s (the broker makes
    #: almost no cyclic garbage: those passes free nothing); these make them rare.
    #: null keeps Python's.
    gc_thresholds: tuple[int, int, int] | None = (20_000, 20, 100)
    #: Create a topic from topic_defaults on its first write (dev only; use memq topic create).
    auto_create_topics: bool = False
    #: Settings every topic inherits (and auto-created topics use).
    topic_defaults: TopicSettings | None = None
    #: Topics this (standalone) broker writes.
    topics: list[TopicConfig] = []
    #: ZooKeeper for clustered mode; null: standalone.
    zookeeper: ZooKeeperConfig | None = None
    #: TLS for the broker protocol and the HTTP port; null: plaintext.
    tls: TlsConfig | None = None
    #: Client authentication (tokens, mutual-TLS identities); null: anyone may connect.
    auth: AuthConfig | None = None
    #: Kafka-protocol produce endpoint on its own port; null: off.
    kafka_listener: KafkaListenerConfig | None = None
    #: Audit records of the blocks written over HTTP ingest and the Kafka port (``{}``:
    #: on, to ``memq.audit`` on the notifications' Kafka); null: off. ``memq dev up``
    #: brokers have it on.
    audit: BrokerAuditConfig | None = None

    @model_validator(mode="after")
    def _check(self) -> BrokerConfig:
        if self.gc_thresholds is not None and (
            self.gc_thresholds[0] < 1 or min(self.gc_thresholds) < 0
        ):
            raise ValueError(
                "gc_thresholds: give three counts, the first >= 1 (e.g. [20000, 20, 100]); "
                "null keeps Python's defaults"
            )
        names = [t.name for t in self.topics]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"topics listed twice: {', '.join(sorted(dup))}")
        if self.auto_create_topics and self.topic_defaults is None:
            raise ValueError("auto_create_topics needs topic_defaults (storage, notification)")
        if self.auth is not None and self.auth.enabled:
            mtls = (
                self.auth.mtls_identity and self.tls is not None and self.tls.client_auth != "none"
            )
            if not mtls and self.auth.token_secret is None and self.auth.token_secret_file is None:
                raise ValueError(
                    "auth.enabled needs a way to authenticate: auth.token_secret (or "
                    "token_secret_file) for tokens, or tls.client_auth with tls.ca_file for "
                    "mutual TLS"
                )
        kl = self.kafka_listener
        if kl is not None and kl.port and kl.port in (self.port, self.http_port):
            raise ValueError(
                f"kafka_listener.port {kl.port} is already the broker's port or http_port: "
                "give the Kafka listener its own port"
            )
        for t in self.topics:
            if t.block_limit + 64 * 1024 > self.max_frame_bytes:
                raise ValueError(
                    f"topic {t.name}: max_block_bytes {t.block_limit} does not fit in "
                    f"max_frame_bytes {self.max_frame_bytes}: raise max_frame_bytes or lower it"
                )
        for t in self.topics:  # each topic needs room for at least one batch buffer
            if t.batch.max_bytes > self.memory_limit_bytes:
                raise ValueError(
                    f"topic {t.name}: batch.bytes {t.batch.max_bytes} exceeds "
                    f"memory_limit_bytes {self.memory_limit_bytes}: raise the limit or lower "
                    "batch.bytes"
                )
        return self

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    def topic_from_defaults(self, name: str, **overrides: Any) -> TopicConfig:
        if self.topic_defaults is None:
            raise ConfigError(f"cannot create topic {name!r}: the broker has no topic_defaults")
        base = self.topic_defaults.model_dump(by_alias=True, exclude_unset=True)
        return validate_model(
            TopicConfig, deep_merge(base, {**overrides, "name": name}), f"topic {name}"
        )


def load_broker_config(
    path: str | Path | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Read a broker YAML file (and/or a dict), apply env overrides, validate."""
    raw, source = read_config_layers(path, data, env, what="broker config", prefix="MEMQ__")
    defaults = raw.get("topic_defaults")
    if isinstance(defaults, dict) and isinstance(raw.get("topics"), list):
        raw["topics"] = [
            deep_merge(defaults, t) if isinstance(t, dict) else t for t in raw["topics"]
        ]
    return validate_model(BrokerConfig, raw, source)
