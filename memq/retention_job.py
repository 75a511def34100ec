"""The retention job and topic purge: the I/O around :mod:`memq.retention`'s decisions.

For each topic (settings and storage from the brokers' admin and metadata API):

1. list its objects under every prefix (no hash, and each of the 256 hash prefixes) with
   the storage reader, counted into hour partitions;
2. delete the partitions :func:`memq.retention.plan_retention` picks (batched deletes);
3. read the notification topic (group-less) and delete the orphans
   :func:`memq.retention.find_orphans` picks.

:func:`purge_topic` deletes every object of a topic and its notification topic
(``memq topic delete --purge``). Nothing here decides; everything here is listed,
read or deleted, and counted in a report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from memq.client.admin import AdminClient
from memq.client.bootstrap import fetch_metadata
from memq.config import RetentionConfig
from memq.errors import MemqError, UnknownTopicError
from memq.retention import (
    DEFAULT_ORPHAN_GRACE_MS,
    DEFAULT_ORPHAN_WINDOW_MS,
    HOUR_MS,
    HourTally,
    Partition,
    find_orphans,
    in_orphan_window,
    kafka_retention_covers,
    notification_horizon,
    plan_retention,
    topic_prefixes,
)
from memq.storage_handlers.base import ObjectInfo, StorageReader, StorageWriter
from memq.storage_handlers.kafka_topics import (
    delete_topic,
    describe_topic,
    kafka_security,
    scan_notifications,
)
from memq.storage_handlers.registry import make_deleter, make_reader

__all__ = [
    "PurgeReport",
    "RetentionOptions",
    "TopicReport",
    "TopicTarget",
    "load_targets",
    "purge_topic",
    "run_retention",
]

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TopicTarget:
    """What the job needs to know of one topic."""

    name: str
    cluster: str
    #: Public storage settings (``StorageConfig.public``: type, bucket or root, ...).
    storage: dict[str, Any]
    notification_topic: str | None = None
    kafka_bootstrap: str | None = None
    #: librdkafka settings to reach that Kafka (security.*, sasl.*, ssl.*).
    kafka: dict[str, Any] = field(default_factory=dict)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    batch_ms: int = 1000
    #: The full stored settings (None: the brokers did not say).
    settings: dict[str, Any] | None = None

    @property
    def bucket(self) -> str:
        return str(self.storage.get("bucket") or self.storage.get("root") or "")

    @property
    def location(self) -> str:
        scheme = "s3" if self.storage.get("type") == "s3" else "file"
        return f"{scheme}://{self.bucket}"

    def prefixes_text(self) -> list[str]:
        """Where its objects are, for people: both key layouts."""
        plain = f"{self.cluster}/topics/{self.name}/"
        return [f"{self.location}/{plain}", f"{self.location}/{{00..ff}}/{plain}"]


def load_targets(
    admin: AdminClient, topics: list[str] | None = None, *, need_settings: bool = True
) -> tuple[list[TopicTarget], dict[str, str]]:
    """The topics (all when ``topics`` is None) as the brokers describe them, and an error
    per topic the brokers could not describe."""
    names = topics if topics is not None else admin.list_topics()
    meta = fetch_metadata(admin.bootstrap, names, timeout=admin.timeout, security=admin.security)
    targets: list[TopicTarget] = []
    errors: dict[str, str] = {}
    for name in names:
        t = meta.topics.get(name)
        if t is None or t.error:
            errors[name] = t.error if t and t.error else f"unknown topic {name!r}"
            continue
        settings: dict[str, Any] | None = None
        try:
            # The admin protocol has no read request: create-if-not-exists answers the
            # stored config of an existing topic and changes nothing.
            settings = admin.create_topic(name, {}, if_not_exists=True)
        except MemqError as e:
            if need_settings:
                errors[name] = f"cannot read the settings of topic {name!r}: {e}"
                continue
        if need_settings and (settings is None or "retention" not in settings):
            errors[name] = (
                f"topic {name!r}: the brokers' config has no retention settings (brokers "
                "older than this command?): nothing deleted"
            )
            continue
        s = settings or {}
        producer = (s.get("notification") or {}).get("producer") or {}
        targets.append(
            TopicTarget(
                name=name,
                cluster=meta.cluster,
                storage=dict(t.storage),
                notification_topic=t.notification.get("topic"),
                kafka_bootstrap=t.notification.get("bootstrap_servers"),
                kafka=kafka_security(producer),
                retention=RetentionConfig.model_validate(s.get("retention") or {}),
                batch_ms=int((s.get("batch") or {}).get("ms", 1000)),
                settings=settings,
            )
        )
    return targets, errors


def deleted_target(name: str, cluster: str, config: Mapping[str, Any]) -> TopicTarget:
    """The target of a topic deleted before, from the config its deletion recorded."""
    from memq.config import TopicConfig

    cfg = TopicConfig.model_validate(dict(config))
    producer = (config.get("notification") or {}).get("producer") or {}
    return TopicTarget(
        name=name,
        cluster=cluster,
        storage=cfg.storage.public(),
        notification_topic=cfg.notification_topic(cluster),
        kafka_bootstrap=cfg.notification.bootstrap_servers,
        kafka=kafka_security(producer),
        retention=cfg.retention,
        batch_ms=cfg.batch.ms,
        settings=dict(config),
    )


@dataclass(frozen=True)
class RetentionOptions:
    dry_run: bool = False
    orphans: bool = True
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS
    orphan_window_ms: int = DEFAULT_ORPHAN_WINDOW_MS
    #: Extra librdkafka settings for reading notification topics (override the brokers').
    kafka: dict[str, Any] = field(default_factory=dict)
    #: Storage settings that replace advertised ones (endpoint, credentials, mount root).
    storage_overrides: dict[str, Any] = field(default_factory=dict)
    list_threads: int = 16
    kafka_timeout_s: float = 120.0


@dataclass
class TopicReport:
    """What the job did to one topic (or would do, with ``dry_run``)."""

    topic: str
    location: str
    dry_run: bool
    retention_ms: int | None = None
    retention_bytes: int | None = None
    #: Deleted partitions: name, objects, bytes, reason (``retention.ms``/``retention.bytes``).
    partitions: list[dict[str, Any]] = field(default_factory=list)
    objects_deleted: int = 0
    bytes_deleted: int = 0
    orphans: list[dict[str, Any]] = field(default_factory=list)
    orphan_bytes: int = 0
    objects_kept: int = 0
    bytes_kept: int = 0
    #: Keys under the topic's prefixes that are not MemQ object keys (left alone).
    foreign_keys: int = 0
    still_over_bytes: bool = False
    notification: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def orphans_deleted(self) -> int:
        return len(self.orphans)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "orphans_deleted": self.orphans_deleted}


@dataclass
class _Listing:
    tally: HourTally = field(default_factory=HourTally)
    #: (key, size) of the objects of partitions retention may delete, by (dt, hh).
    tracked: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    #: Objects the orphan check looks at.
    window: list[ObjectInfo] = field(default_factory=list)

    def merge(self, other: _Listing) -> None:
        self.tally.merge(other.tally)
        for part, keys in other.tracked.items():
            self.tracked.setdefault(part, []).extend(keys)
        self.window.extend(other.window)


def _list(
    reader: StorageReader,
    bucket: str,
    prefixes: list[str],
    track: Callable[[Partition], bool],
    watch: Callable[[ObjectInfo], bool],
    threads: int,
) -> _Listing:
    def one(prefix: str) -> _Listing:
        out = _Listing()
        for o in reader.list_objects(bucket, prefix):
            part = out.tally.add(o.key, o.size)
            if part is None:
                continue
            if track(part):
                out.tracked.setdefault((part.dt, part.hh), []).append((o.key, o.size))
            if watch(o):
                out.window.append(o)
        return out

    total = _Listing()
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="memq-list") as pool:
        for part in pool.map(one, prefixes):
            total.merge(part)
    return total


def _delete(deleter: StorageWriter, keys: list[str], report: TopicReport) -> set[str]:
    """Delete ``keys`` (unless dry run); failures become report errors. Returns the keys
    gone."""
    if report.dry_run or not keys:
        return set(keys)
    res = deleter.delete_many(keys)
    for key, why in res.failed[:20]:
        report.errors.append(f"could not delete {key}: {why}")
    if len(res.failed) > 20:
        report.errors.append(f"... and {len(res.failed) - 20} more objects not deleted")
    return set(res.deleted)


def run_retention(
    target: TopicTarget,
    options: RetentionOptions,
    *,
    clock: Callable[[], int] = now_ms,
    reader: StorageReader | None = None,
    deleter: StorageWriter | None = None,
) -> TopicReport:
    """Apply ``target``'s retention to its objects, then remove its orphans. Never raises:
    every failure is an error in the report."""
    r = target.retention
    report = TopicReport(target.name, target.location, options.dry_run, r.ms, r.max_bytes)
    if target.storage.get("type") not in {"s3", "filesystem"}:
        report.warnings.append(f"storage {target.storage.get('type')} keeps no objects: skipped")
        return report
    try:
        _run(target, options, report, clock, reader, deleter)
    except Exception as e:  # one topic's failure never stops the others
        log.debug("retention of %s failed", target.name, exc_info=True)
        report.errors.append(f"{type(e).__name__}: {e}" if not isinstance(e, MemqError) else str(e))
    return report


def _run(
    target: TopicTarget,
    options: RetentionOptions,
    report: TopicReport,
    clock: Callable[[], int],
    reader: StorageReader | None,
    deleter: StorageWriter | None,
) -> None:
    r = target.retention
    overrides = options.storage_overrides
    reader = reader or make_reader(target.storage, overrides)
    deleter = deleter or make_deleter(target.storage, target.cluster, overrides)
    now = clock()
    cutoff = None if r.ms is None else now - r.ms
    grace, window = options.orphan_grace_ms, options.orphan_window_ms
    listing = _list(
        reader,
        target.bucket,
        topic_prefixes(target.cluster, target.name),
        track=lambda p: r.max_bytes is not None or (cutoff is not None and p.end_ms < cutoff),
        watch=lambda o: options.orphans and in_orphan_window(o, now, grace, window),
        threads=options.list_threads,
    )
    report.foreign_keys = len(listing.tally.foreign)
    plan = plan_retention(listing.tally.partitions(), now, r.ms, r.max_bytes)
    report.still_over_bytes = plan.still_over_size
    if plan.still_over_size:
        report.warnings.append(
            f"the newest hour partition alone exceeds retention.bytes ({r.max_bytes}): kept"
        )
    expired: set[tuple[str, str]] = set()
    for reason, parts in (("retention.ms", plan.expired), ("retention.bytes", plan.over_size)):
        for p in parts:
            objects = sorted(listing.tracked.get((p.dt, p.hh), []))
            gone = _delete(deleter, [k for k, _ in objects], report)
            expired.add((p.dt, p.hh))
            report.partitions.append(
                {"partition": p.name, "objects": p.objects, "bytes": p.size, "reason": reason}
            )
            report.objects_deleted += len(gone)
            report.bytes_deleted += sum(size for k, size in objects if k in gone)
    report.objects_kept = sum(p.objects for p in plan.kept)
    report.bytes_kept = plan.kept_bytes
    candidates = [o for o in listing.window if _hour(o.key) not in expired]
    if options.orphans and candidates:
        _orphans(target, options, report, candidates, now, deleter)
        report.objects_kept -= report.orphans_deleted
        report.bytes_kept -= report.orphan_bytes


def _hour(key: str) -> tuple[str, str]:
    parts = key.split("/")
    return parts[-3].removeprefix("dt="), parts[-2].removeprefix("hh=")


def _orphans(
    target: TopicTarget,
    options: RetentionOptions,
    report: TopicReport,
    candidates: list[ObjectInfo],
    now: int,
    deleter: StorageWriter,
) -> None:
    topic, bootstrap = target.notification_topic, target.kafka_bootstrap
    if not topic or not bootstrap:
        report.warnings.append("orphan check skipped: the brokers name no notification topic")
        return
    kafka = {**target.kafka, **options.kafka}
    grace, window = options.orphan_grace_ms, options.orphan_window_ms
    state = describe_topic(bootstrap, topic, kafka)
    needed = target.retention.notification_ms
    report.notification = {"topic": topic, "retention_ms": state.retention_ms}
    if (
        state.exists
        and state.retention_ms is not None
        and not kafka_retention_covers(state.retention_ms, needed)
    ):
        report.warnings.append(
            f"notification topic {topic} keeps pointers {state.retention_ms} ms, less than "
            f"retention.ms + 1 day ({needed} ms): pointers may expire before their objects "
            "(`memq topic update --set retention.ms=...` raises it)"
        )
    scan = scan_notifications(
        bootstrap,
        topic,
        since_ms=now - window - grace - HOUR_MS,
        extra=kafka,
        timeout=options.kafka_timeout_s,
    )
    report.notification.update(records=scan.records, undecodable=scan.undecodable)
    if not scan.exists:
        report.warnings.append(f"orphan check skipped: notification topic {topic} does not exist")
        return
    horizon = notification_horizon(scan.partitions, now, state.retention_ms)
    if horizon is None:
        report.warnings.append(
            f"orphan check skipped: cannot tell which pointers {topic} lost (a partition was "
            "emptied and Kafka does not report retention.ms)"
        )
        return
    orphans = find_orphans(candidates, scan.keys, now, grace, window, horizon)
    gone = _delete(deleter, [o.key for o in orphans], report)
    for o in orphans:
        if o.key in gone:
            report.orphans.append({"key": o.key, "bytes": o.size, "modified_ms": o.modified_ms})
            report.orphan_bytes += o.size


# --- purge --------------------------------------------------------------------------------


@dataclass
class PurgeReport:
    """What ``memq topic delete --purge`` removed, and what it left (with why)."""

    topic: str
    location: str
    objects_deleted: int = 0
    bytes_deleted: int = 0
    notification_topic: str | None = None
    notification_deleted: bool = False
    left: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def purge_topic(
    target: TopicTarget,
    *,
    storage_overrides: Mapping[str, Any] | None = None,
    kafka: Mapping[str, Any] | None = None,
    settle_s: float | None = None,
    timeout_s: float = 120.0,
    list_threads: int = 16,
) -> PurgeReport:
    """Delete every object of a (deleted) topic, under every prefix, then its notification
    topic. Writers seal and upload their open batch when a topic is deleted, so objects
    are deleted until a listing stays empty for ``settle_s`` (default: 2 x batch.ms, at
    least 2 s). Never raises: what could not be removed is listed in ``left``."""
    report = PurgeReport(target.name, target.location, notification_topic=target.notification_topic)
    settle = settle_s if settle_s is not None else max(2.0, 2 * target.batch_ms / 1000)
    try:
        reader = make_reader(target.storage, storage_overrides)
        deleter = make_deleter(target.storage, target.cluster, storage_overrides)
        prefixes = topic_prefixes(target.cluster, target.name)
        deadline = time.monotonic() + timeout_s
        quiet_since: float | None = None
        while True:
            keys: list[tuple[str, int]] = []
            with ThreadPoolExecutor(list_threads, thread_name_prefix="memq-purge") as pool:
                for found in pool.map(
                    lambda p: [(o.key, o.size) for o in reader.list_objects(target.bucket, p)],
                    prefixes,
                ):
                    keys.extend(found)
            if keys:
                quiet_since = None
                res = deleter.delete_many([k for k, _ in keys])
                sizes = dict(keys)
                report.objects_deleted += len(res.deleted)
                report.bytes_deleted += sum(sizes[k] for k in res.deleted)
                if res.failed:
                    key, why = res.failed[0]
                    raise MemqError(f"{len(res.failed)} objects not deleted, e.g. {key}: {why}")
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle:
                break
            if time.monotonic() > deadline:
                raise MemqError(f"objects still appear after {timeout_s:.0f}s: are writers up?")
            time.sleep(min(0.5, settle / 4))
    except Exception as e:
        report.left += [f"objects under {p} ({e})" for p in target.prefixes_text()]
    if target.notification_topic and target.kafka_bootstrap:
        try:
            report.notification_deleted = delete_topic(
                target.kafka_bootstrap,
                target.notification_topic,
                {**target.kafka, **(kafka or {})},
            )
        except Exception as e:
            report.left.append(
                f"notification topic {target.notification_topic} on Kafka "
                f"{target.kafka_bootstrap} ({e})"
            )
    return report


def wait_until_unknown(admin: AdminClient, topic: str, timeout_s: float = 30.0) -> None:
    """Wait until the brokers no longer describe ``topic`` (its writers were told to stop)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = fetch_metadata(
            admin.bootstrap, [topic], timeout=admin.timeout, security=admin.security
        )
        t = meta.topics.get(topic)
        if t is None or t.error:
            return
        time.sleep(0.2)
    raise UnknownTopicError(f"topic {topic!r} is still described {timeout_s:.0f}s after delete")
