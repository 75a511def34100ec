"""Auditor configuration (``memq audit serve --config auditor.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memq.config import read_config_layers, validate_model
from memq.security import AuthConfig, TlsConfig

__all__ = ["AuditKafkaConfig", "AuditLagConfig", "AuditorConfig", "load_auditor_config"]

#: Environment overrides of auditor settings: ``MEMQ_AUDITOR__HTTP_PORT=9000``.
ENV_PREFIX = "MEMQ_AUDITOR__"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class AuditKafkaConfig(_Frozen):
    """Where the auditor reads audit records from."""

    #: Kafka holding the audit topic (host:port,...).
    bootstrap_servers: str = Field(min_length=1)
    #: Extra librdkafka settings for the auditor's consumer (security.protocol, sasl.*).
    consumer: dict[str, str | int | float | bool] = {}


class AuditLagConfig(_Frozen):
    """Consumer-group lag on the dashboard, `/api/lag` and `/metrics`."""

    #: MemQ brokers (host:port,...) whose topic metadata names each topic's notification
    #: topic and Kafka; null: no lag measurements.
    bootstrap_servers: str | None = Field(default=None, min_length=1)
    #: Client settings for those brokers (the clients' `security.protocol`, `ssl.*` and
    #: `auth.token` keys).
    client: dict[str, str | int | float | bool] = {}
    #: Extra librdkafka settings for the notification Kafka (security.protocol, sasl.*,
    #: ssl.*).
    kafka: dict[str, str | int | float | bool] = {}
    #: Seconds between measurements (each lists the groups and reads their pending
    #: notifications).
    interval_s: float = Field(default=30.0, ge=1)
    #: Deadline of each Kafka and broker request of a measurement.
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: Groups measured, as fnmatch patterns (`orders-*`); empty: every group that
    #: committed offsets on an audited topic.
    groups: list[str] = []
    #: Topics measured; empty: the audited ones (those with audit records in the store).
    topics: list[str] = []


class AuditorConfig(_Frozen):
    """``memq audit serve``: audit topic -> SQLite -> dashboard, JSON API, /metrics."""

    #: Kafka of the audit topic (`kafka.bootstrap_servers`, `kafka.consumer`).
    kafka: AuditKafkaConfig
    #: Topic the producers' and consumers' audit records go to.
    audit_topic: str = Field(default="memq.audit", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    #: SQLite file with the matched state and the audit topic offsets (created if missing).
    db_path: Path = Path("audit.db")
    #: Address the dashboard, JSON API, /healthz and /metrics listen on.
    http_host: str = "127.0.0.1"
    #: Port of the dashboard and API (0: any free port).
    http_port: int = Field(default=8080, ge=0, le=65535)
    #: A block acked this long ago and not consumed by a group is reported missing for it.
    grace_period_s: float = Field(default=600.0, ge=0)
    #: Blocks older than this are forgotten (pruned from the SQLite file).
    retention_hours: float = Field(default=168.0, gt=0)
    #: How often the Prometheus gauges (missing, duplicates, ... per topic and group) are
    #: recomputed.
    metrics_interval_s: float = Field(default=30.0, ge=1)
    #: The window (seconds back from now) the Prometheus gauges cover.
    metrics_window_s: float = Field(default=3600.0, ge=60)
    #: Audit records applied per SQLite transaction (at most).
    ingest_batch: int = Field(default=2000, ge=1, le=100_000)
    #: TLS for the dashboard and API (the brokers' `tls` keys); null: plain HTTP.
    tls: TlsConfig | None = None
    #: Token authentication for the dashboard and API (the brokers' `auth` keys: any
    #: valid token passes); /healthz and /metrics stay open for probes and scrapers.
    auth: AuthConfig | None = None
    #: Consumer-group lag (`lag.bootstrap_servers`, `lag.interval_s`, `lag.groups`, ...).
    lag: AuditLagConfig = AuditLagConfig()


def load_auditor_config(
    path: str | Path | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> AuditorConfig:
    """Read an auditor YAML file (and/or a dict), apply ``MEMQ_AUDITOR__`` overrides."""
    raw, source = read_config_layers(path, data, env, what="auditor config", prefix=ENV_PREFIX)
    return validate_model(AuditorConfig, raw, source)
