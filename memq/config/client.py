"""Client config bases: snake_case fields with Kafka's dotted keys as aliases."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from memq.config.base import NAME
from memq.config.loading import validate_model
from memq.security import ClientSecurity

__all__ = ["AuditedClientConfig", "ClientConfig", "SecureClientConfig"]


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
    #: How often ``stats_cb`` (a constructor argument, or a ``stats_cb`` key beside the
    #: settings, as in confluent-kafka) receives the client's stats dict; 0: never.
    statistics_interval_ms: int = Field(default=0, ge=0, alias="statistics.interval.ms")

    def audit_enabled(self, uses_local_stack: bool) -> bool:
        return self.audit_enable if self.audit_enable is not None else uses_local_stack
