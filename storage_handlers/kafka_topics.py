"""Notification topics on Kafka: their partitions and retention, and every pointer in them.

- :func:`describe_topic`: partition count and ``retention.ms`` as Kafka reports them
  (describe-configs); when Kafka cannot say, the answer says why instead of guessing.
- :func:`ensure_retention`: create the topic with a ``retention.ms``, or raise an existing
  topic's (incremental alter-configs), then read it back; an error says why it failed.
- :func:`sync_notification_retention`: what topic create and update do on the governor.
- :func:`scan_notifications`: read every pointer with a group-less consumer (no commits,
  no rebalances), for the retention job's orphan check.
- :func:`delete_topic`: for ``memq topic delete --purge``.

confluent-kafka is imported inside the functions (importing this module stays cheap).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memq.errors import InvalidRequestError, MemqFormatError, NotificationError
from memq.formats.keys import parse_object_key
from memq.formats.notification import decode_notification
from memq.retention import HOUR_MS, NotificationPartition, kafka_retention_covers
from memq.storage_handlers.kafka_sink import ensure_topic

if TYPE_CHECKING:
    from memq.config import TopicConfig

__all__ = [
    "KafkaTopicState",
    "NotificationScan",
    "delete_topic",
    "describe_topic",
    "ensure_retention",
    "grow_partitions",
    "kafka_security",
    "scan_notifications",
    "sync_notification_retention",
]

log = logging.getLogger(__name__)

#: Kafka errors that no retry fixes (the request is refused for good).
_REFUSED = {"UNSUPPORTED_FEATURE", "_UNSUPPORTED_FEATURE", "POLICY_VIOLATION",
            "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "INVALID_CONFIG",
            "INVALID_REQUEST", "UNKNOWN_TOPIC_OR_PART"}  # fmt: skip


def kafka_security(settings: dict[str, Any]) -> dict[str, Any]:
    """The librdkafka settings about reaching Kafka (security.*, sasl.*, ssl.*) of a
    notification producer config: what an admin or reader of the same Kafka needs."""
    return {k: v for k, v in settings.items() if k.startswith(("security.", "sasl.", "ssl."))}


def _admin(bootstrap: str, extra: dict[str, Any] | None) -> Any:
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log, **(extra or {})}
    return AdminClient(conf)


def _error(what: str, e: BaseException) -> NotificationError | InvalidRequestError:
    """A typed error for a failed Kafka admin call: refused for good, or retriable."""
    err: Any = e.args[0] if e.args else None
    name = str(err.name()) if hasattr(err, "name") else ""
    text = str(err.str()) if hasattr(err, "str") else str(e)
    if name in _REFUSED:
        return InvalidRequestError(f"{what}: Kafka refused it: {name}: {text}")
    return NotificationError(f"{what}: {text}")


@dataclass(frozen=True)
class KafkaTopicState:
    """A Kafka topic as Kafka reports it."""

    topic: str
    bootstrap: str
    exists: bool
    partitions: int | None = None
    #: ``retention.ms`` as Kafka reports it (-1: forever); None when it did not say.
    retention_ms: int | None = None
    #: Why ``retention_ms`` is None (not reported, describe-configs failed).
    retention_note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _partitions(admin: Any, topic: str, timeout: float) -> int | None:
    from confluent_kafka import KafkaException

    try:
        # Listing every topic (not just this one) never triggers broker-side auto-creation.
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise NotificationError(f"cannot reach Kafka: {e}") from e
    t = meta.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return len(t.partitions)


def _retention(admin: Any, topic: str, timeout: float) -> tuple[int | None, str | None]:
    """(retention.ms, None) or (None, why Kafka did not say)."""
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        configs = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
    except Exception as e:
        return None, f"describe-configs failed: {_error('describe-configs', e)}"
    entry = configs.get("retention.ms")
    if entry is None or entry.value is None:
        return None, (
            "Kafka's describe-configs answer has no retention.ms (a Kafka-protocol broker "
            "that reports only values set on the topic: its default applies)"
        )
    try:
        return int(entry.value), None
    except ValueError:
        return None, f"Kafka reported retention.ms={entry.value!r}, not a number"


def describe_topic(
    bootstrap: str, topic: str, extra: dict[str, Any] | None = None, timeout: float = 10.0
) -> KafkaTopicState:
    """Partition count and ``retention.ms`` of ``topic`` as Kafka reports them."""
    admin = _admin(bootstrap, extra)
    partitions = _partitions(admin, topic, timeout)
    if partitions is None:
        return KafkaTopicState(topic, bootstrap, False, retention_note="the topic does not exist")
    retention, note = _retention(admin, topic, timeout)
    return KafkaTopicState(topic, bootstrap, True, partitions, retention, note)


def _set_retention(admin: Any, topic: str, retention_ms: int, timeout: float) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    entry = ConfigEntry(
        "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    what = f"cannot set retention.ms={retention_ms} on Kafka topic {topic!r}"
    try:
        admin.incremental_alter_configs([res], request_timeout=timeout)[res].result(timeout)
    except Exception as e:
        raise _error(what, e) from e


def ensure_retention(
    bootstrap: str,
    topic: str,
    retention_ms: int,
    *,
    partitions: int,
    replication_factor: int = -1,
    create: bool = True,
    extra: dict[str, Any] | None = None,
    timeout: float = 15.0,
) -> str:
    """Make Kafka keep ``topic``'s records at least ``retention_ms`` (-1: forever).

    Creates the topic with it (when ``create``), or raises an existing topic's
    ``retention.ms`` (never lowers it) and reads the value back. Returns what it did;
    raises :class:`NotificationError` (retriable) or :class:`InvalidRequestError` (Kafka
    refuses: unsupported, not authorised, invalid) saying why.
    """
    admin = _admin(bootstrap, extra)
    if _partitions(admin, topic, timeout) is None:
        if not create:
            raise InvalidRequestError(
                f"notification topic {topic!r} does not exist on Kafka {bootstrap} and "
                "notification.create_topic is off: create it with retention.ms >= "
                f"{retention_ms} first"
            )
        configs = {"retention.ms": str(retention_ms)}
        if ensure_topic(
            bootstrap, topic, partitions, replication_factor, extra, timeout,
            configs=configs, admin=admin,
        ):  # fmt: skip
            return f"created {topic} with retention.ms={retention_ms}"
    current, note = _retention(admin, topic, timeout)
    if kafka_retention_covers(current, retention_ms):
        return f"kept {topic} retention.ms={current} (>= {retention_ms})"
    _set_retention(admin, topic, retention_ms, timeout)
    deadline = time.monotonic() + timeout
    while True:  # read it back: the value Kafka now reports
        after, after_note = _retention(admin, topic, timeout)
        if kafka_retention_covers(after, retention_ms):
            was = current if current is not None else f"unknown: {note}"
            return f"raised {topic} retention.ms from {was} to {after}"
        if after is None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    raise NotificationError(
        f"set retention.ms={retention_ms} on Kafka topic {topic!r}, but Kafka reports "
        f"{after if after is not None else after_note}: not applied"
    )


def sync_notification_retention(
    cfg: TopicConfig, cluster: str, previous: TopicConfig | None = None
) -> str | None:
    """Make the notification topic of ``cfg`` keep pointers at least ``retention.ms`` plus
    a day. On create (``previous`` None) the topic is created with that retention if
    ``notification.create_topic``; on update only a changed retention touches Kafka.
    Raises (saying why) when Kafka does not apply it: the caller then stores nothing."""
    n = cfg.notification
    if previous is None and not n.create_topic:
        return None  # the operator manages this Kafka topic
    if previous is not None and previous.retention == cfg.retention:
        return None
    topic = cfg.notification_topic(cluster)
    needed = cfg.retention.notification_ms
    try:
        done = ensure_retention(
            n.bootstrap_servers,
            topic,
            needed,
            partitions=n.partitions,
            replication_factor=n.replication_factor,
            create=n.create_topic,
            extra=kafka_security(n.producer),
        )
    except (NotificationError, InvalidRequestError) as e:
        action = "created" if previous is None else "changed"
        raise type(e)(
            f"topic {cfg.name!r} not {action}: its notification topic must keep pointers at "
            f"least retention.ms + 1 day ({needed} ms): {e}"
        ) from e
    log.info("topic %s: %s", cfg.name, done)
    return done


def grow_partitions(
    cfg: TopicConfig, cluster: str, previous: TopicConfig, timeout: float = 15.0
) -> str | None:
    """Give the notification topic ``cfg.notification.partitions`` partitions when they
    changed (Kafka's create_partitions: partitions only grow). Raises, saying why, when
    Kafka does not apply it: the caller then stores nothing."""
    new, old = cfg.notification.partitions, previous.notification.partitions
    if new == old:
        return None
    topic = cfg.notification_topic(cluster)
    if new < old:
        raise InvalidRequestError(
            f"topic {cfg.name!r}: notification.partitions can only grow ({old} -> {new}); "
            "fewer read partitions would need a new notification topic"
        )
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    n = cfg.notification
    admin = _admin(n.bootstrap_servers, kafka_security(n.producer))
    try:
        fut = admin.create_partitions(
            [NewPartitions(topic, new)], operation_timeout=timeout, request_timeout=timeout
        )[topic]
        fut.result(timeout)
    except Exception as e:
        raise _error(
            f"topic {cfg.name!r} not changed: Kafka at {n.bootstrap_servers} did not grow "
            f"{topic} from {old} to {new} partitions",
            e,
        ) from e
    have = _partitions(admin, topic, timeout)
    if have != new:
        raise InvalidRequestError(
            f"topic {cfg.name!r} not changed: Kafka reports {have} partitions for {topic} "
            f"after asking for {new}"
        )
    return f"{topic} grown from {old} to {new} partitions"


def delete_topic(
    bootstrap: str, topic: str, extra: dict[str, Any] | None = None, timeout: float = 15.0
) -> bool:
    """Delete a Kafka topic; False when it did not exist. Waits until it is gone."""
    admin = _admin(bootstrap, extra)
    if _partitions(admin, topic, timeout) is None:
        return False
    fut = admin.delete_topics([topic], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        fut.result(timeout)
    except Exception as e:
        raise _error(f"cannot delete Kafka topic {topic!r}", e) from e
    deadline = time.monotonic() + timeout
    while _partitions(admin, topic, timeout) is not None:
        if time.monotonic() > deadline:
            raise NotificationError(
                f"Kafka topic {topic!r} still listed {timeout:.0f}s after delete"
            )
        time.sleep(0.2)
    return True


@dataclass
class NotificationScan:
    """What a notification topic points at."""

    topic: str
    exists: bool
    #: Object keys the notifications read point at.
    keys: set[str] = field(default_factory=set)
    partitions: list[NotificationPartition] = field(default_factory=list)
    #: Records that did not decode as notifications (ignored).
    undecodable: int = 0
    records: int = 0


def scan_notifications(
    bootstrap: str,
    topic: str,
    *,
    since_ms: int | None = None,
    extra: dict[str, Any] | None = None,
    timeout: float = 120.0,
) -> NotificationScan:
    """Read ``topic`` to its end, outside any consumer group, collecting object keys.

    With ``since_ms``, each partition starts at its first record at or after that time
    (when Kafka answers offsets-for-times; else at its beginning), and only keys whose
    hour partition ends after it are kept.
    """
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

    admin = _admin(bootstrap, extra)
    n = _partitions(admin, topic, min(timeout, 15.0))
    if n is None:
        return NotificationScan(topic, exists=False)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"memq-retention-{uuid.uuid4().hex[:12]}",  # never joined: assign()
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **(extra or {}),
        },
        logger=log,
    )
    scan = NotificationScan(topic, exists=True)
    try:
        lows: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in range(n):
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout, cached=False
            )
            lows[p] = int(low)
            starts[p] = int(low)
        if since_ms is not None:
            try:
                found = consumer.offsets_for_times(
                    [TopicPartition(topic, p, since_ms) for p in range(n)], timeout=15.0
                )
                for tp in found:
                    if tp.error is None and tp.offset >= 0:
                        starts[tp.partition] = max(starts[tp.partition], int(tp.offset))
            except Exception as e:  # not answered: read from the beginning
                log.info("offsets-for-times on %s not answered (%s): reading it all", topic, e)
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in range(n)])
        first: dict[int, tuple[int, int | None]] = {}
        ends: dict[int, int] = dict(starts)
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < n:
            if time.monotonic() > deadline:
                raise NotificationError(
                    f"reading notification topic {topic!r} did not reach its end within "
                    f"{timeout:.0f}s ({len(done)} of {n} partitions read)"
                )
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                part = int(m.partition() or 0)
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF: read to the end
                        done.add(part)
                        continue
                    raise NotificationError(f"reading notification topic {topic!r}: {err.str()}")
                done.discard(part)  # more arrived after an EOF
                offset = int(m.offset() or 0)
                ts_type, ts = m.timestamp()
                first.setdefault(part, (offset, None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts))
                ends[part] = offset + 1
                scan.records += 1
                try:
                    key = decode_notification(m.value() or b"").key
                except MemqFormatError:
                    scan.undecodable += 1
                    continue
                if since_ms is None or _ends_after(key, since_ms):
                    scan.keys.add(key)
        for p in range(n):
            read = first.get(p)
            low = lows[p] if read is None or starts[p] > lows[p] else max(lows[p], read[0])
            first_ms = read[1] if read is not None else None
            scan.partitions.append(NotificationPartition(low, starts[p], ends[p], first_ms))
    finally:
        consumer.close()
    return scan


def _ends_after(key: str, since_ms: int) -> bool:
    try:
        k = parse_object_key(key)
    except MemqFormatError:
        return True
    return k.hour_start_ms + HOUR_MS > since_ms
