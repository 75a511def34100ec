"""What a cluster member's admin requests do in ZooKeeper: create, update and delete a
topic's config (its notification topic in Kafka first), and the cluster status report.

The topic functions block (kazoo calls, Kafka admin calls): a
:class:`memq.governor.member.ClusterMember` runs them on an executor thread and keeps
what they return as its own view of the topic (read your writes). ``cluster_status`` is
pure: it formats a snapshot the member took under its lock.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from memq.config import BrokerConfig, TopicConfig, deep_merge, validate_model
from memq.errors import (
    ConfigError,
    CoordinationError,
    InvalidRequestError,
    TopicExistsError,
    UnknownTopicError,
)
from memq.formats.keys import validate_name
from memq.governor.zk import AssignmentRecord, BrokerRecord, Layout, ZkClient, dumps, read_json
from memq.storage_handlers.kafka_topics import grow_partitions, sync_notification_retention

__all__ = [
    "cluster_status",
    "create_topic",
    "delete_topic",
    "forget_topic",
    "update_topic",
    "validated_topic",
]

log = logging.getLogger(__name__)


def _no_name(settings: dict[str, Any]) -> None:
    if "name" in settings:  # (it was silently replaced by the topic's own name)
        raise InvalidRequestError(
            f"name={settings['name']!r} is not a setting: a topic's name is given apart "
            "from its settings and a topic cannot be renamed"
        )


def validated_topic(config: BrokerConfig, name: str, settings: dict[str, Any]) -> TopicConfig:
    """The config of a new topic ``name``: the broker's topic defaults, then ``settings``."""
    try:
        validate_name("topic", name)
    except Exception as e:
        raise InvalidRequestError(str(e)) from None
    _no_name(settings)
    defaults = config.topic_defaults
    base = defaults.model_dump(by_alias=True, exclude_unset=True) if defaults else {}
    try:
        cfg = validate_model(
            TopicConfig, deep_merge(base, {**settings, "name": name}), f"topic {name}"
        )
    except ConfigError as e:
        raise InvalidRequestError(str(e)) from None
    notes = cfg.notification_topic(config.cluster)
    if len(notes) > 249:  # (a Kafka-protocol broker took it; Apache Kafka refuses it)
        raise InvalidRequestError(
            f"topic {name!r}: its notification topic name would be {len(notes)} characters, "
            "over Kafka's 249: use a shorter topic name (or set notification.topic)"
        )
    return cfg


def create_topic(
    zk: ZkClient,
    layout: Layout,
    config: BrokerConfig,
    name: str,
    settings: dict[str, Any],
    if_not_exists: bool,
) -> tuple[TopicConfig, bool]:
    """Create topic ``name`` (its notification topic first); returns its config (without
    secrets) and whether this call created it (False: it existed and ``if_not_exists``)."""
    from kazoo.exceptions import NodeExistsError

    cfg = validated_topic(config, name, settings)
    if zk.exists(layout.topic(name)) is None and zk.exists(layout.deleted_topic(name)):
        # A new topic of that name would read the old one's data back (its notification
        # topic still points at its objects): not what Kafka users expect.
        raise InvalidRequestError(
            f"topic {name!r} was deleted without --purge and its data is still there (a "
            f"new topic of that name would read it back): remove it with `memq topic "
            f"delete {name} --purge`, or use another name"
        )
    if zk.exists(layout.topic(name)) is None:  # its notification topic first
        sync_notification_retention(cfg, config.cluster)
    try:
        zk.create(layout.topic(name), dumps(cfg.without_secrets()), makepath=True)
    except NodeExistsError:
        if not if_not_exists:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        data, _ = read_json(zk, layout.topic(name))
        return TopicConfig.model_validate(data), False
    log.info("topic %s created", name)
    return cfg.without_secrets(), True


def update_topic(
    zk: ZkClient, layout: Layout, config: BrokerConfig, name: str, settings: dict[str, Any]
) -> TopicConfig:
    """Merge ``settings`` into topic ``name``'s config (Kafka first: partitions, retention);
    returns the new config without secrets."""
    from kazoo.exceptions import BadVersionError

    _no_name(settings)
    data, stat = read_json(zk, layout.topic(name))
    if data is None or stat is None:
        raise UnknownTopicError(f"topic {name!r} does not exist: create it first")
    before = TopicConfig.model_validate(data)
    current = before.model_dump(by_alias=True)
    try:
        cfg = validate_model(
            TopicConfig, deep_merge(current, {**settings, "name": name}), f"topic {name}"
        )
    except ConfigError as e:
        raise InvalidRequestError(str(e)) from None
    # Kafka first (raises if it refuses): never store what Kafka does not apply. The
    # Kafka client secrets are this broker's own (ZooKeeper holds none).
    live = cfg.with_secrets_from(config.topic_defaults)
    grow_partitions(live, config.cluster, before)
    sync_notification_retention(live, config.cluster, before)
    try:
        zk.set(layout.topic(name), dumps(cfg.without_secrets()), version=stat.version)
    except BadVersionError:
        raise CoordinationError(f"topic {name!r} changed concurrently: retry") from None
    return cfg.without_secrets()


def delete_topic(zk: ZkClient, layout: Layout, name: str) -> dict[str, Any]:
    """Delete topic ``name``, keeping its config as a record of the data it leaves
    (:meth:`Layout.deleted_topic`) until :func:`forget_topic`; returns that config. A
    topic deleted before answers its record again (a purge after the delete)."""
    from kazoo.exceptions import NodeExistsError, NoNodeError

    data, _ = read_json(zk, layout.topic(name))
    if data is None:
        left, _ = read_json(zk, layout.deleted_topic(name))
        if left is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return left
    try:
        zk.create(layout.deleted_topic(name), dumps(data), makepath=True)
    except NodeExistsError:
        zk.set(layout.deleted_topic(name), dumps(data))
    try:
        zk.delete(layout.topic(name))
    except NoNodeError:
        raise UnknownTopicError(f"topic {name!r} does not exist") from None
    return data


def forget_topic(zk: ZkClient, layout: Layout, name: str) -> None:
    """Drop the record of deleted topic ``name`` (its data was purged): the name is free."""
    from kazoo.exceptions import NoNodeError

    with contextlib.suppress(NoNodeError):
        zk.delete(layout.deleted_topic(name))


def cluster_status(
    cluster: str,
    algorithm: str,
    governor: str | None,
    brokers: dict[str, BrokerRecord],
    a: AssignmentRecord,
    topics: dict[str, TopicConfig],
) -> dict[str, Any]:
    """The ``memq cluster status`` report: brokers with their load and topics, each topic's
    writers and planning figures, and the cluster's capacity."""
    cap = sum(b.capacity_mbps for b in brokers.values())
    used = sum(a.load.get(b, 0.0) for b in brokers)
    return {
        "cluster": cluster,
        "governor": governor,
        "assignment_version": a.version,
        "brokers": [
            {
                **b.model_dump(),
                "load_mbps": a.load.get(b.id, 0.0),
                "planned_memory_bytes": a.memory.get(b.id, 0),
                "topics": sorted(t for t, ws in a.writers.items() if b.id in ws),
            }
            for b in sorted(brokers.values(), key=lambda b: b.id)
        ],
        "topics": {
            t: {
                "writers": a.writers.get(t, []),
                "expected_mbps": c.expected_mbps,
                "min_writers": c.min_writers,
                "shortfall_mbps": a.shortfall.get(t, 0.0),
                "unplaced_writers": a.unplaced.get(t, 0),
                # Writers short of min_writers (a cluster of fewer brokers, or placed
                # short): the failover it asks for is not there.
                "below_min_writers": max(0, c.min_writers - len(a.writers.get(t, []))),
                "planned_mbps": a.planned_mbps.get(t),
                "load_source": "measured" if t in a.measured else "declared",
            }
            for t, c in sorted(topics.items())
        },
        "capacity_mbps": cap,
        "used_mbps": round(used, 3),
        "free_mbps": round(cap - used, 3),
        "shortfall": a.shortfall,
        "unplaced": a.unplaced,
        "below_min_writers": {
            t: c.min_writers - len(ws)
            for t, c in sorted(topics.items())
            if (ws := a.writers.get(t, [])) and len(ws) < c.min_writers
        },
        "assignment": algorithm,
    }
