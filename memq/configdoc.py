"""Generate ``docs/configuration.md`` from the config models: ``python -m memq.configdoc``.

Descriptions come from each field's ``#:`` comment in the source; a test checks the
committed file equals this output.
"""

from __future__ import annotations

import inspect
import re
import sys
from enum import Enum
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from memq.acl import AclEntry
from memq.config import (
    BatchConfig,
    BrokerAuditConfig,
    BrokerConfig,
    FilesystemConfig,
    NotificationConfig,
    RetentionConfig,
    S3Config,
    StorageConfig,
    TopicConfig,
    ZooKeeperConfig,
)
from memq.security import AuthConfig, TlsConfig

__all__ = ["render"]

_FIELD = re.compile(r"^\s+(\w+):")


def _comments(model: type[BaseModel]) -> dict[str, str]:
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            lines = inspect.getsource(cls).splitlines()
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in lines:
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            m = _FIELD.match(line)
            if m and pending:
                out[m.group(1)] = " ".join(pending)
            pending = []
    return out


def _type(ann: Any) -> str:
    text = str(ann) if getattr(ann, "__args__", None) else getattr(ann, "__name__", str(ann))
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    text = re.sub(r"\b(?:memq\.[\w.]+\.|typing\.|pydantic\.)", "", text)
    return text.replace("|", "\\|")


def _default(field: Any) -> str:
    if field.default is PydanticUndefined:
        return "required" if field.default_factory is None else "(computed)"
    d = field.default
    if isinstance(d, Enum):
        return f"`{d.name.lower()}`"
    if isinstance(d, BaseModel):
        return "(defaults)"
    if d is None:
        return "null"
    if isinstance(d, PurePath):
        return f"`{d}`"
    return f"`{d!r}`".replace("'", "") if not isinstance(d, bool) else f"`{str(d).lower()}`"


def _table(title: str, model: type[BaseModel], note: str = "") -> str:
    docs = _comments(model)
    # The model's own docstring only (an inherited one would be pydantic's BaseModel's).
    own = model.__dict__.get("__doc__")
    rows = [f"\n## {title}\n", inspect.cleandoc(own) if own else "", ""]
    if note:
        rows += [note, ""]
    rows += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, f in model.model_fields.items():
        key = f.alias or name
        meaning = docs.get(name, "")
        bounds = [
            f"{k} {getattr(m, k)}"
            for m in f.metadata
            for k in ("ge", "gt", "le", "lt")
            if getattr(m, k, None) is not None
        ]
        if bounds:
            meaning += f" ({', '.join(bounds)})"
        rows.append(f"| `{key}` | {_type(f.annotation)} | {_default(f)} | {meaning.strip()} |")
    return "\n".join(rows)


def _kafka_keys_table() -> str:
    from memq.producer.config import KAFKA_PRODUCER_KEYS

    rows = [
        "\n## Kafka producer keys without a field (`memq.Producer`)\n",
        "Kafka's other producer keys, as the Java client and librdkafka name them: each is "
        "honoured under MemQ's name, accepted as a no-op, or refused with a one-line error "
        "saying what to do.",
        "",
        "| key | what memq.Producer does |",
        "|---|---|",
    ]
    for key, spec in KAFKA_PRODUCER_KEYS.items():
        if spec.to is not None:
            scale = f" x {spec.scale}" if spec.scale != 1 else ""
            what = f"sets `{spec.to}`{scale} ({spec.says})"
        elif spec.accepts:
            shown = "true" if "true" in spec.accepts else ", ".join(sorted(spec.accepts))
            what = f"`{shown}`: accepted, no effect; otherwise refused: {spec.says}"
        else:
            what = f"refused: {spec.says}"
        rows.append(f"| `{key}` | {what} |")
    return "\n".join(rows)


HEADER = """# Configuration reference

Generated from the config models by `python -m memq.configdoc > docs/configuration.md`
(a test keeps it current). A broker reads one YAML file (`memq broker --config
broker.yaml`); every key is validated at start, and an unknown or invalid key stops the
broker with a message naming the key, the bad value and the fix. Environment variables
override the file: `MEMQ__` + the key path joined by `__`, e.g. `MEMQ__PORT=9100`,
`MEMQ__TOPIC_DEFAULTS__STORAGE__S3__BUCKET=my-bucket` (values parse as YAML scalars).

Each entry of `topics` is merged over `topic_defaults`, so a topic only lists what
differs. Minimal broker file:

```yaml
broker_id: broker-1
cluster: prod
topic_defaults:
  storage: {type: s3, s3: {bucket: my-memq-bucket, region: us-east-1}}
  notification: {bootstrap_servers: "kafka-1:9092,kafka-2:9092", partitions: 16}
  batch: {bytes: 8388608, ms: 1000}
topics:
  - name: events
  - name: logs
    batch: {ms: 250}
```
"""


def render() -> str:
    from memq.audit.config import AuditKafkaConfig, AuditLagConfig, AuditorConfig
    from memq.consumer.config import ConsumerConfig
    from memq.producer.config import ProducerConfig

    parts = [
        HEADER,
        _table("Broker (top level)", BrokerConfig),
        _table(
            "Topic (`topics[]`, `topic_defaults`)",
            TopicConfig,
            "`topic_defaults` takes every key but `name`.",
        ),
        _table("Batching (`batch`)", BatchConfig),
        _table(
            "Retention (`retention`)",
            RetentionConfig,
            "Change it at run time with `memq topic update NAME --set retention.ms=...`: "
            "the notification topic's Kafka retention.ms is raised first, or nothing changes. "
            "See docs/operations.md, Retention.",
        ),
        _table("Storage (`storage`)", StorageConfig),
        _table("S3 storage (`storage.s3`)", S3Config),
        _table("Filesystem storage (`storage.filesystem`)", FilesystemConfig),
        _table("Notifications (`notification`)", NotificationConfig),
        _table("ZooKeeper (`zookeeper`)", ZooKeeperConfig),
        _table("Broker audit (`audit`)", BrokerAuditConfig),
        _table("TLS (`tls`)", TlsConfig, "See docs/security.md."),
        _table(
            "Authentication (`auth`)",
            AuthConfig,
            "Secret: `MEMQ__AUTH__TOKEN_SECRET` or `token_secret_file`, never a committed file.",
        ),
        _table("ACL entry (`auth.acls[]`, `memq acl`)", AclEntry),
        _table(
            "Producer (`memq.Producer`)",
            ProducerConfig,
            "Keys are Kafka's dotted names; the snake_case field names work too "
            "(`Producer(linger_ms=5)`).",
        ),
        _kafka_keys_table(),
        _table(
            "Consumer (`memq.Consumer`)",
            ConsumerConfig,
            "Keys are Kafka's dotted names; the snake_case field names work too.",
        ),
        _table(
            "Auditor (`memq audit serve --config auditor.yaml`)",
            AuditorConfig,
            "Environment overrides: `MEMQ_AUDITOR__<KEY>[__<SUBKEY>]=value`, e.g. "
            "`MEMQ_AUDITOR__HTTP_PORT=9000`.",
        ),
        _table("Auditor Kafka (`kafka`)", AuditKafkaConfig),
        _table(
            "Auditor consumer lag (`lag`)",
            AuditLagConfig,
            "See docs/operations.md, Consumer lag on the audit dashboard.",
        ),
    ]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
