"""Typed, validated, frozen configuration (pydantic) and its loading.

One YAML file per broker, validated at start. Every error names the key, the bad
value and the fix; an unknown key is an error with a "did you mean" suggestion, never
silently ignored. Environment overrides use ``MEMQ__`` plus the key path joined by
``__``: ``MEMQ__PORT=9100``, ``MEMQ__TOPIC_DEFAULTS__STORAGE__S3__BUCKET=my-bucket``
(values are parsed as YAML scalars).

One module per subsystem: :mod:`~memq.config.storage`, :mod:`~memq.config.topic`,
:mod:`~memq.config.broker`, :mod:`~memq.config.client`, and :mod:`~memq.config.loading`
(layers, env overrides, error messages). Config depends only on the pure layers
(:mod:`memq.errors`, :mod:`memq.retry`, :mod:`memq.security`), never on handlers,
the broker or clients.
"""

from memq.config.broker import (
    BrokerAuditConfig,
    BrokerConfig,
    KafkaListenerConfig,
    ZooKeeperConfig,
    load_broker_config,
)
from memq.config.client import AuditedClientConfig, ClientConfig, SecureClientConfig
from memq.config.loading import (
    deep_merge,
    env_overrides,
    format_validation_error,
    read_config_layers,
    validate_model,
)
from memq.config.storage import FilesystemConfig, S3Config, StorageConfig
from memq.config.topic import (
    BatchConfig,
    NotificationConfig,
    RetentionConfig,
    TopicConfig,
    TopicSettings,
)

__all__ = [
    "AuditedClientConfig",
    "BatchConfig",
    "BrokerAuditConfig",
    "BrokerConfig",
    "ClientConfig",
    "FilesystemConfig",
    "KafkaListenerConfig",
    "NotificationConfig",
    "RetentionConfig",
    "S3Config",
    "SecureClientConfig",
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
