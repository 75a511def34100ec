"""Retention decisions (memq.retention): time and size plans, orphans, notification
horizon, lifecycle rules, retention tags in topic configs. Pure, property-tested."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.config import TopicConfig
from memq.errors import ConfigError
from memq.formats.keys import batch_id, object_key
from memq.retention import (
    DAY_MS,
    HOUR_MS,
    LIFECYCLE_RULE_PREFIX,
    TAG_KEY,
    HourTally,
    NotificationPartition,
    Partition,
    find_orphans,
    group_by_hour,
    kafka_retention_covers,
    lifecycle_rules,
    notification_horizon,
    notification_retention_ms,
    object_time_ms,
    plan_retention,
    retention_days,
    retention_tags,
    topic_prefixes,
)

T0 = 1_763_776_800_000  # 2025-11-22T02:00:00Z, the start of an hour


@dataclass(frozen=True)
class Obj:
    key: str
    size: int
    modified_ms: int | None = None


def key(created_ms: int, seq: int = 0, topic: str = "t", hashed: bool = True) -> str:
    return object_key(
        "c", topic, batch_id(created_ms, "b1", seq), created_ms, use_hash_prefix=hashed
    )


# --- partitions ---------------------------------------------------------------------------

partition_lists = st.lists(
    st.tuples(st.integers(0, 24 * 30), st.integers(0, 10_000)),
    max_size=40,
    unique_by=lambda t: t[0],
).map(
    lambda xs: [Partition("d", f"{h:04d}", T0 + h * HOUR_MS, 1 + size % 7, size) for h, size in xs]
)
retentions = st.none() | st.integers(1, 40 * DAY_MS)
sizes = st.none() | st.integers(0, 200_000)
nows = st.integers(T0, T0 + 60 * DAY_MS)


@given(partition_lists, nows, retentions, sizes)
def test_a_plan_splits_the_partitions_oldest_first(parts, now, ms, max_bytes):
    plan = plan_retention(parts, now, ms, max_bytes)
    ordered = sorted(parts, key=lambda p: p.start_ms)
    # Deleted and kept partition the input; what is deleted is a prefix in time order.
    assert list(plan.delete) + list(plan.kept) == ordered


@given(partition_lists, nows, retentions)
def test_time_deletes_exactly_the_partitions_that_ended_before_the_cutoff(parts, now, ms):
    plan = plan_retention(parts, now, ms, None)
    assert plan.over_size == ()
    for p in plan.expired:
        assert ms is not None and p.end_ms < now - ms
    for p in plan.kept:
        assert ms is None or p.end_ms >= now - ms


@given(partition_lists, nows, retentions, st.integers(0, 200_000))
def test_size_deletes_the_fewest_oldest_partitions_that_make_it_fit(parts, now, ms, max_bytes):
    plan = plan_retention(parts, now, ms, max_bytes)
    kept = sum(p.size for p in plan.kept)
    if plan.kept:
        assert kept <= max_bytes or (len(plan.kept) == 1 and plan.still_over_size)
    if plan.over_size:  # minimal: keeping the newest one it deleted would not fit
        assert kept + plan.over_size[-1].size > max_bytes
        assert len(plan.kept) >= 1  # never the newest partition
    # The time rule is applied first and alone decides the expired set.
    assert plan.expired == plan_retention(parts, now, ms, None).expired


def test_size_never_deletes_the_newest_partition():
    parts = [Partition("d", "00", T0, 1, 100), Partition("d", "01", T0 + HOUR_MS, 1, 500)]
    plan = plan_retention(parts, T0 + 2 * HOUR_MS, None, 200)
    assert [p.hh for p in plan.over_size] == ["00"]
    assert [p.hh for p in plan.kept] == ["01"] and plan.still_over_size


def test_an_hour_expires_once_it_ended_longer_ago_than_retention():
    p = Partition("2025-11-22", "02", T0, 3, 30)
    assert plan_retention([p], T0 + HOUR_MS + 5000, 5000, None).kept == (p,)
    assert plan_retention([p], T0 + HOUR_MS + 5001, 5000, None).expired == (p,)


@given(
    st.lists(
        st.tuples(st.integers(0, 72 * HOUR_MS), st.integers(0, 1000), st.booleans()), max_size=50
    )
)
def test_objects_group_into_hour_partitions_across_hash_prefixes(objs):
    listed = [Obj(key(T0 + t, i, hashed=h), size) for i, (t, size, h) in enumerate(objs)]
    parts, foreign = group_by_hour([*listed, Obj("c/topics/t/not-a-key", 5)])
    assert foreign == ["c/topics/t/not-a-key"]
    assert sum(p.objects for p in parts) == len(listed)
    assert sum(p.size for p in parts) == sum(o.size for o in listed)
    assert [p.start_ms for p in parts] == sorted({T0 + t // HOUR_MS * HOUR_MS for t, _, _ in objs})


def test_tallies_merge():
    a, b = HourTally(), HourTally()
    a.add(key(T0), 10)
    b.add(key(T0 + 1, 1), 5)
    b.add(key(T0 + HOUR_MS), 7)
    a.merge(b)
    assert [(p.hh, p.objects, p.size) for p in a.partitions()] == [("02", 2, 15), ("03", 1, 7)]


def test_topic_prefixes_cover_both_layouts():
    prefixes = topic_prefixes("c", "t")
    assert prefixes[0] == "c/topics/t/" and len(prefixes) == 257
    assert prefixes[1] == "00/c/topics/t/" and prefixes[-1] == "ff/c/topics/t/"
    k = key(T0)
    assert any(k.startswith(p) for p in prefixes)
    assert any(key(T0, hashed=False).startswith(p) for p in prefixes)


# --- orphans ------------------------------------------------------------------------------

GRACE = HOUR_MS
WINDOW = DAY_MS


def test_orphans_are_unnotified_objects_older_than_the_grace():
    now = T0 + 10 * HOUR_MS
    old = Obj(key(T0 + 5 * HOUR_MS), 10, T0 + 5 * HOUR_MS)
    young = Obj(key(now - 1000, 1), 10, now - 1000)
    notified = Obj(key(T0 + 5 * HOUR_MS, 2), 10, T0 + 5 * HOUR_MS)
    too_old = Obj(key(now - 2 * DAY_MS, 3), 10, now - 2 * DAY_MS)
    objs = [old, young, notified, too_old]
    assert find_orphans(objs, {notified.key}, now, GRACE, WINDOW, 0) == [old]
    assert find_orphans(objs, {notified.key}, now, GRACE, WINDOW, None) == []
    # Objects from before the oldest pointer Kafka still holds (+ grace) are not judged.
    assert find_orphans(objs, set(), now, GRACE, WINDOW, T0 + 5 * HOUR_MS) == []


@given(
    st.lists(st.tuples(st.integers(0, 3 * DAY_MS), st.booleans()), max_size=30),
    st.integers(0, 2 * DAY_MS),
    st.none() | st.integers(T0, T0 + 3 * DAY_MS),
)
def test_an_orphan_is_never_notified_young_or_before_the_horizon(objs, grace, horizon):
    now = T0 + 3 * DAY_MS
    listed = [Obj(key(T0 + t, i), 1, T0 + t) for i, (t, _) in enumerate(objs)]
    notified = {o.key for o, (_, n) in zip(listed, objs, strict=True) if n}
    found = find_orphans(listed, notified, now, grace, WINDOW, horizon)
    for o in found:
        assert o.key not in notified
        assert o.modified_ms is not None and o.modified_ms < now - grace
        assert horizon is not None and o.modified_ms >= horizon + grace
        assert o.modified_ms >= now - WINDOW


def test_object_time_falls_back_to_the_batch_id():
    assert object_time_ms(Obj(key(T0 + 5), 1)) == T0 + 5
    assert object_time_ms(Obj(key(T0 + 5), 1, 42)) == 42
    assert object_time_ms(Obj("c/topics/t/dt=2025-11-22/hh=02/x-y", 1)) is None


def test_notification_horizon():
    now = T0 + DAY_MS
    full = NotificationPartition(low=0, start=0, end=10, first_ms=T0)
    assert notification_horizon([full], now, None) == 0
    assert notification_horizon([], now, None) is None  # no topic: nothing can be judged
    lost = NotificationPartition(low=5, start=5, end=10, first_ms=T0 + 7)
    assert notification_horizon([full, lost], now, None) == T0 + 7
    emptied = NotificationPartition(low=5, start=5, end=5, first_ms=None)
    assert notification_horizon([emptied], now, 3600) == now - 3600
    assert notification_horizon([emptied], now, None) is None
    assert notification_horizon([emptied], now, -1) is None
    skipped = NotificationPartition(low=5, start=9, end=10, first_ms=T0 + 9)
    assert notification_horizon([skipped], now, None) == 0


# --- retention classes, Kafka retention, lifecycle ------------------------------------------


def test_retention_days_round_up():
    assert retention_days(None) is None
    assert retention_days(5000) == 1
    assert retention_days(DAY_MS) == 1
    assert retention_days(DAY_MS + 1) == 2
    assert retention_days(7 * DAY_MS) == 7


@given(st.integers(1, 400 * DAY_MS))
def test_a_lifecycle_class_never_expires_an_object_before_its_retention(ms):
    days = retention_days(ms)
    assert days is not None and days * DAY_MS >= ms


def test_notification_retention_and_coverage():
    assert notification_retention_ms(None) == -1
    assert notification_retention_ms(5000) == 5000 + DAY_MS
    assert kafka_retention_covers(-1, 10)
    assert kafka_retention_covers(10, 10) and not kafka_retention_covers(9, 10)
    assert not kafka_retention_covers(None, 10)
    assert not kafka_retention_covers(10**12, -1)


def test_retention_tags():
    assert retention_tags({"team": "x"}, 2 * DAY_MS, True) == {"team": "x", TAG_KEY: "2"}
    assert retention_tags({TAG_KEY: "9"}, None, True) == {}
    assert retention_tags({TAG_KEY: "9"}, DAY_MS, False) == {}


def test_lifecycle_rules_replace_only_memq_rules():
    other = {"ID": "logs-30d", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
             "Expiration": {"Days": 30}}  # fmt: skip
    stale = {"ID": f"{LIFECYCLE_RULE_PREFIX}3d", "Status": "Enabled"}
    rules = lifecycle_rules([other, stale], [7, 1, 7])
    assert rules[0] == other
    assert rules[1:] == [
        {"ID": "memq-retention-1d", "Status": "Enabled",
         "Filter": {"Tag": {"Key": TAG_KEY, "Value": "1"}}, "Expiration": {"Days": 1}},
        {"ID": "memq-retention-7d", "Status": "Enabled",
         "Filter": {"Tag": {"Key": TAG_KEY, "Value": "7"}}, "Expiration": {"Days": 7}},
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="1000"):
        lifecycle_rules([other] * 1000, [1])


# --- the topic setting ----------------------------------------------------------------------

BASE = {
    "name": "t",
    "storage": {
        "type": "s3",
        "s3": {"bucket": "bkt", "object_tags": {"team": "ml"}, "tag_retention": True},
    },
    "notification": {"bootstrap_servers": "k:9092"},
}


def test_objects_are_not_tagged_unless_asked() -> None:
    """Tagging needs s3:PutObjectTagging: off by default, so existing policies keep working."""
    plain = {**BASE, "storage": {"type": "s3", "s3": {"bucket": "bkt"}}}
    cfg = TopicConfig.model_validate(plain)
    assert cfg.storage.s3 is not None and cfg.storage.s3.object_tags == {}


def test_retention_defaults_to_seven_days_and_tags_objects():
    cfg = TopicConfig.model_validate(BASE)
    assert cfg.retention.ms == 7 * DAY_MS and cfg.retention.max_bytes is None
    assert cfg.storage.s3 is not None
    assert cfg.storage.s3.object_tags == {"team": "ml", TAG_KEY: "7"}
    assert cfg.retention.notification_ms == 8 * DAY_MS


def test_retention_updates_follow_dotted_settings_and_retag():
    from memq.config import deep_merge
    from memq.protocol import nested_settings

    cfg = TopicConfig.model_validate(BASE)
    changed = TopicConfig.model_validate(
        deep_merge(
            cfg.model_dump(by_alias=True),
            nested_settings({"retention.ms": 3 * DAY_MS, "retention.bytes": 10**9}),
        )
    )
    assert changed.retention.ms == 3 * DAY_MS and changed.retention.max_bytes == 10**9
    assert changed.storage.s3 is not None and changed.storage.s3.object_tags[TAG_KEY] == "3"
    forever = TopicConfig.model_validate({**BASE, "retention": {"ms": -1, "bytes": -1}})
    assert forever.retention.ms is None and forever.retention.max_bytes is None
    assert forever.storage.s3 is not None and TAG_KEY not in forever.storage.s3.object_tags
    assert forever.retention.notification_ms == -1


def test_retention_is_validated():
    with pytest.raises(Exception, match="retention"):
        TopicConfig.model_validate({**BASE, "retention": {"ms": 0}})
    with pytest.raises(Exception, match="retention"):
        TopicConfig.model_validate({**BASE, "retention": {"msec": 5}})


# --- the job on filesystem storage (no servers) -------------------------------------------


def test_the_job_deletes_expired_hours_on_filesystem_storage(tmp_path):
    from memq.config import FilesystemConfig, RetentionConfig
    from memq.retention_job import RetentionOptions, TopicTarget, run_retention
    from memq.storage_handlers.filesystem import FilesystemWriter

    now = T0 + 10 * HOUR_MS + 5
    hashed = FilesystemWriter(FilesystemConfig(root=str(tmp_path), use_hash_prefix=True), "c")
    plain = FilesystemWriter(FilesystemConfig(root=str(tmp_path), fsync=False), "c")
    old = [w.store("t", batch_id(T0 + i, "b", i), T0 + i, b"x" * 10).key
           for i, w in enumerate((hashed, plain))]  # fmt: skip
    recent = plain.store("t", batch_id(now - 5, "b", 9), now - 5, b"y" * 7).key
    other_topic = plain.store("u", batch_id(T0, "b", 1), T0, b"z").key
    target = TopicTarget(
        name="t",
        cluster="c",
        storage={"type": "filesystem", "root": str(tmp_path), "use_hash_prefix": False},
        retention=RetentionConfig(ms=HOUR_MS),
    )
    dry = run_retention(target, RetentionOptions(dry_run=True, orphans=False), clock=lambda: now)
    assert (dry.objects_deleted, dry.bytes_deleted, dry.errors) == (2, 20, [])
    assert all((tmp_path / k).exists() for k in old)
    report = run_retention(target, RetentionOptions(orphans=False), clock=lambda: now)
    assert report.partitions == [
        {"partition": "dt=2025-11-22/hh=02", "objects": 2, "bytes": 20, "reason": "retention.ms"}
    ]
    assert (report.objects_kept, report.bytes_kept) == (1, 7)
    assert not any((tmp_path / k).exists() for k in old)
    assert (tmp_path / recent).exists() and (tmp_path / other_topic).exists()
    assert not (tmp_path / old[0].split("/")[0]).exists()  # emptied directories removed


def test_kafkas_forever_is_unbounded_not_an_overflow() -> None:
    """retention.ms = Long.MAX_VALUE (Kafka's usual "infinite"): the notification topic got
    a retention.ms past int64 and the lifecycle rule 106,751,991,168 days."""
    forever = 2**63 - 1
    assert notification_retention_ms(forever) == -1
    assert retention_days(forever) is None
    assert TAG_KEY not in retention_tags({}, forever, enabled=True)
    year = 365 * DAY_MS
    assert retention_days(year) == 365 and notification_retention_ms(year) == year + DAY_MS
