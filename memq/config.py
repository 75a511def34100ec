"""Typed, validated, frozen configuration (pydantic) and its loading.

One YAML file per broker, validated at start. Every error names the key, the bad
value and the fix; an unknown key is an error with a "did you mean" suggestion, never
silently ignored. Environment overrides use ``MEMQ__`` plus the key path joined by
``__``: ``MEMQ__PORT=9100``, ``MEMQ__TOPIC_DEFAULTS__STORAGE__S3__BUCKET=my-bucket``
(values are parsed as YAML scalars).
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from memq.errors import ConfigError
from memq.retry import RetryPolicy
from memq.security import AuthConfig, ClientSecurity, TlsConfig

__all__ = [
    "AuditedClientConfig",
    "BatchConfig",
    "BrokerConfig",
    "ClientConfig",
    "FilesystemConfig",
    "NotificationConfig",
    "S3Config",
    "StorageConfig",
    "TopicConfig",
    "TopicSettings",
    "ZooKeeperConfig",
    "deep_merge",
    "env_overrides",
    "format_validation_error",
    "load_broker_config",
    "read_config_layers",
    "validate_model",
]

M = TypeVar("M", bound=BaseModel)

NAME = r"^[A-Za-z0-9._-]{1,249}$"
BROKER_ID = r"^[A-Za-z0-9.-]{1,64}$"
MiB = 1024 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# --- storage -----------------------------------------------------------------------------


class S3Config(_Frozen):
    """S3 storage settings (credentials: boto3's standard chain, never in config)."""

    #: Bucket that holds the batch objects.
    bucket: str = Field(min_length=3, max_length=63)
    #: AWS region (default: boto3's chain, e.g. AWS_DEFAULT_REGION).
    region: str | None = None
    #: S3 API endpoint for non-AWS stores (MinIO, Ceph, moto); null for AWS.
    endpoint_url: str | None = None
    #: Named AWS profile; null uses the standard credential chain (env, IRSA, instance role).
    profile: str | None = None
    #: Prefix keys with 2 hex digits to spread load over S3 partitions.
    use_hash_prefix: bool = True
    #: Tries per operation (first try included) on 5xx, throttling, timeouts, resets.
    attempts: int = Field(default=5, ge=1, le=50)
    #: First retry backoff; grows x2 per try, fully jittered.
    backoff_ms: int = Field(default=100, ge=1)
    #: Largest retry backoff.
    backoff_max_ms: int = Field(default=5000, ge=1)
    #: Overall deadline of one operation, retries included.
    deadline_ms: int = Field(default=60_000, ge=100)
    #: TCP connect timeout of one try.
    connect_timeout_ms: int = Field(default=5_000, ge=100)
    #: Socket read timeout of one try.
    read_timeout_ms: int = Field(default=30_000, ge=100)
    #: Start a second upload under a new key (suffix -h1) if the first is not done by then; null: off.
    hedge_after_ms: int | None = Field(default=None, ge=10)
    #: HTTP connection pool size.
    max_connections: int = Field(default=32, ge=1, le=1024)
    #: Send a CRC-32 of each object so S3 rejects a corrupted upload.
    upload_checksum: bool = True

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.attempts,
            base=self.backoff_ms / 1000,
            cap=max(self.backoff_max_ms, self.backoff_ms) / 1000,
            deadline=self.deadline_ms / 1000,
        )


class FilesystemConfig(_Frozen):
    #: Directory that holds the batch objects (NFS or local disk).
    root: str = Field(min_length=1)
    #: Prefix keys with 2 hex digits (rarely useful on a filesystem).
    use_hash_prefix: bool = False
    #: fsync each object and its directory before acknowledging.
    fsync: bool = True


class StorageConfig(_Frozen):
    """Where a topic's batch objects go: ``type`` picks the handler, its section configures it."""

    #: Storage handler: s3, filesystem, or devnull (discards: benchmarks only).
    type: Literal["s3", "filesystem", "devnull"] = "s3"
    #: Settings of the s3 handler (required when type is s3).
    s3: S3Config | None = None
    #: Settings of the filesystem handler (required when type is filesystem).
    filesystem: FilesystemConfig | None = None

    @model_validator(mode="after")
    def _section_present(self) -> StorageConfig:
        if self.type == "s3" and self.s3 is None:
            raise ValueError("storage type s3 needs an `s3:` section with at least `bucket`")
        if self.type == "filesystem" and self.filesystem is None:
            raise ValueError("storage type filesystem needs a `filesystem:` section with `root`")
        return self

    def public(self) -> dict[str, Any]:
        """What readers need (sent to consumers in metadata): no retry or tuning knobs."""
        if self.type == "s3" and self.s3 is not None:
            return {
                "type": "s3",
                "bucket": self.s3.bucket,
                "region": self.s3.region,
                "endpoint_url": self.s3.endpoint_url,
                "use_hash_prefix": self.s3.use_hash_prefix,
            }
        if self.type == "filesystem" and self.filesystem is not None:
            return {
                "type": "filesystem",
                "root": str(Path(self.filesystem.root).absolute()),
                "use_hash_prefix": self.filesystem.use_hash_prefix,
            }
        return {"type": self.type}


# --- notifications -------------------------------------------------------------------------


class NotificationConfig(_Frozen):
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


# --- topics --------------------------------------------------------------------------------


class BatchConfig(_Frozen):
    """When a topic processor seals its open batch: size, age or block count."""

    #: Seal a batch (one object, one PUT) when it reaches this size.
    max_bytes: int = Field(default=8 * MiB, ge=1024, le=1024 * MiB, alias="bytes")
    #: Seal a batch this long after its first block, full or not (the latency bound).
    ms: int = Field(default=1000, ge=1, le=3_600_000)
    #: Seal a batch when it holds this many blocks.
    max_blocks: int = Field(default=4096, ge=1, le=65536)


class TopicSettings(_Frozen):
    """Everything about a topic except its name (what ``topic_defaults`` provides)."""

    #: Where batch objects go.
    storage: StorageConfig
    #: Where their pointers go.
    notification: NotificationConfig
    #: When batches are sealed.
    batch: BatchConfig = BatchConfig()
    #: Preallocated batch buffers per topic: ``ring_size * batch.bytes`` bounds its memory.
    ring_size: int = Field(default=4, ge=2, le=1024)
    #: Largest producer block accepted (defaults to ``batch.bytes``).
    max_block_bytes: int | None = Field(default=None, ge=1024)
    #: Expected input rate, used by the governor to size the writer set.
    expected_mbps: float = Field(default=1.0, gt=0)
    #: Fewest brokers writing the topic (clustered mode): with 2 or more, producers move to
    #: another writer at once when one fails instead of waiting for a reassignment.
    min_writers: int = Field(default=2, ge=1, le=64)

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
        return self.ring_size * self.batch.max_bytes


class TopicConfig(TopicSettings):
    """One topic: its name plus everything ``topic_defaults`` can provide."""

    #: Topic name: 1-249 of A-Z a-z 0-9 . _ -
    name: str = Field(pattern=NAME)

    def notification_topic(self, cluster: str) -> str:
        return self.notification.topic_for(cluster, self.name)


class ZooKeeperConfig(_Frozen):
    """Clustered mode: brokers register in ZooKeeper and a governor assigns topics."""

    #: ZooKeeper connect string (host:port,...).
    connect: str = Field(min_length=1)
    #: Path under which the cluster keeps its state.
    chroot: str = Field(default="/memq", pattern=r"^/[A-Za-z0-9._/-]*$")
    #: Session timeout: a lost broker is noticed after about this long.
    session_timeout_ms: int = Field(default=6000, ge=1000, le=60_000)


def _hostname() -> str:
    return socket.gethostname().split(".")[0] or "broker"


class BrokerConfig(_Frozen):
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
    max_frame_bytes: int = Field(default=16 * MiB, ge=64 * 1024, le=1024 * MiB)
    #: Broker-wide bound on batch buffer memory (sum of every topic's ring).
    memory_limit_bytes: int = Field(default=1024 * MiB, ge=MiB)
    #: Client connections accepted at once; more are refused.
    max_connections: int = Field(default=1024, ge=1)
    #: Connections with no complete request for this long are closed.
    idle_timeout_s: float = Field(default=300.0, gt=0)
    #: How long a write may wait for a free batch buffer before THROTTLED.
    throttle_timeout_ms: int = Field(default=5000, ge=0)
    #: Threads that upload batches (uploads never run on the event loop).
    upload_threads: int = Field(default=16, ge=1, le=512)
    #: On SIGTERM, how long to wait for open batches to upload before exiting.
    shutdown_timeout_s: float = Field(default=60.0, gt=0)
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

    @model_validator(mode="after")
    def _check(self) -> BrokerConfig:
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
        for t in self.topics:
            if t.block_limit + 64 * 1024 > self.max_frame_bytes:
                raise ValueError(
                    f"topic {t.name}: max_block_bytes {t.block_limit} does not fit in "
                    f"max_frame_bytes {self.max_frame_bytes}: raise max_frame_bytes or lower it"
                )
        need = sum(t.memory_bytes for t in self.topics)
        if need > self.memory_limit_bytes:
            raise ValueError(
                f"topic rings need {need} bytes (ring_size x batch.bytes summed) but "
                f"memory_limit_bytes is {self.memory_limit_bytes}: raise the limit or "
                "lower ring_size / batch.bytes"
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


# --- loading -------------------------------------------------------------------------------


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def env_overrides(env: Mapping[str, str], prefix: str = "MEMQ__") -> dict[str, Any]:
    """``MEMQ__A__B=v`` -> ``{"a": {"b": v}}`` with ``v`` parsed as a YAML scalar."""
    out: dict[str, Any] = {}
    for key, raw in env.items():
        if not key.startswith(prefix):
            continue
        path = [p.lower() for p in key[len(prefix) :].split("__") if p]
        if not path:
            continue
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment override {key} conflicts with another one")
        node[path[-1]] = value
    return out


def _model_in(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names and aliases of the model reached by walking ``loc`` (for suggestions)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = current.model_fields
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        current = None if field is None else _model_in(field.annotation)
    if current is None:
        return []
    fields = current.model_fields
    return [f.alias or n for n, f in fields.items()]


def format_validation_error(model: type[BaseModel], err: ValidationError, source: str) -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            known = _fields_at(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            lines.append(f"  {where}: unknown key{hint}")
        else:
            got = e.get("input")
            shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
            lines.append(f"  {where}: {e['msg']}{shown}")
    return "\n".join(lines)


def validate_model(model: type[M], data: Any, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(model, e, source)) from None


def read_config_layers(
    path: str | Path | None,
    data: Mapping[str, Any] | None,
    env: Mapping[str, str] | None,
    *,
    what: str,
    prefix: str,
) -> tuple[dict[str, Any], str]:
    """YAML file, then ``data``, then ``<prefix>A__B`` env overrides, deep-merged.

    Returns the raw mapping and a description of its source for error messages.
    """
    raw: dict[str, Any] = {}
    source = what
    if path is not None:
        p = Path(path)
        source = f"{what} {p}"
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"{what} {p} does not exist: pass --config PATH") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{source} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source} must be a YAML mapping, got {type(loaded).__name__}")
        raw = loaded
    if data is not None:
        raw = deep_merge(raw, data)
    raw = deep_merge(raw, env_overrides(os.environ if env is None else env, prefix))
    return raw, source


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


class ClientConfig(BaseModel):
    """Base of client configs: snake_case fields with Kafka's dotted keys as aliases.

    ``Producer({"bootstrap.servers": ..., "linger.ms": 5})`` and
    ``Producer(bootstrap_servers=..., linger_ms=5)`` are the same; an unknown key is an
    error that names it and suggests the closest known key.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        merged = {**(data or {}), **kwargs}
        return validate_model(cls, merged, f"{cls.__name__} settings")


class SecureClientConfig(ClientConfig):
    """Client settings for brokers with TLS and authentication (Kafka's key names)."""

    #: plaintext, or ssl (TLS to the brokers; implied by any ssl.* key).
    security_protocol: Literal["plaintext", "ssl"] = Field(
        default="plaintext", alias="security.protocol"
    )
    #: PEM CA bundle that signs the brokers' certificates (default: the system CAs).
    ssl_ca_location: Path | None = Field(default=None, alias="ssl.ca.location")
    #: PEM client certificate, for brokers that require mutual TLS.
    ssl_certificate_location: Path | None = Field(default=None, alias="ssl.certificate.location")
    #: PEM private key of ssl.certificate.location.
    ssl_key_location: Path | None = Field(default=None, alias="ssl.key.location")
    #: https: check the broker's certificate matches its host name; none: do not.
    ssl_endpoint_identification_algorithm: Literal["https", "none"] = Field(
        default="https", alias="ssl.endpoint.identification.algorithm"
    )
    #: Token presented to brokers with auth enabled (``memq token create``). Never logged.
    auth_token: SecretStr | None = Field(default=None, alias="auth.token", repr=False)

    @field_validator("security_protocol", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    def security(self) -> ClientSecurity:
        """The TLS context and token connections use (built once per client)."""
        from memq.security import client_context

        tls = self.security_protocol == "ssl" or any(
            (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        )
        ctx = (
            client_context(
                self.ssl_ca_location,
                self.ssl_certificate_location,
                self.ssl_key_location,
                check_hostname=self.ssl_endpoint_identification_algorithm == "https",
            )
            if tls
            else None
        )
        return ClientSecurity(ssl_context=ctx, token=self.auth_token)


class AuditedClientConfig(SecureClientConfig):
    """Client settings shared by producers and consumers: audit records (``audit.*``)."""

    #: Emit one audit record per acked (producer) or consumed (consumer) block to
    #: audit.topic. None (default): on when the client uses the local stack (no
    #: bootstrap.servers, as ``memq dev`` and the demo do), off otherwise.
    audit_enable: bool | None = Field(default=None, alias="audit.enable")
    #: Kafka topic of the audit records (what ``memq audit serve`` reads).
    audit_topic: str = Field(default="memq.audit", alias="audit.topic", pattern=NAME)
    #: Kafka of the audit topic; None: the Kafka the brokers publish notifications to.
    audit_bootstrap_servers: str | None = Field(default=None, alias="audit.bootstrap.servers")
    #: Audit records queued for Kafka at most; beyond it they are dropped and counted
    #: (the data path never waits for auditing).
    audit_queue_max: int = Field(default=100_000, ge=100, alias="audit.queue.max")
    #: Extra librdkafka settings of the audit producer (security.protocol, sasl.*).
    audit_kafka: dict[str, str | int | float | bool] = Field(default={}, alias="audit.kafka")

    def audit_enabled(self, uses_local_stack: bool) -> bool:
        return self.audit_enable if self.audit_enable is not None else uses_local_stack
