"""Consumer groups as operators see them (``memq group``): list, describe with lag, reset
offsets, delete.

A MemQ consumer group is a Kafka consumer group on a topic's notification topic; its
committed offsets are notification offsets (objects). Lag is given three ways: in
objects (end offset minus committed), in records (the record counts the pending
notifications carry) and in seconds (now minus the oldest record timestamp of the first
pending object). End offsets are Kafka's high watermarks; time lookups are
:func:`~memq.consumer.seeking.first_offset_at`'s.

Offsets are reset only while the group has no active member, as Kafka's
``kafka-consumer-groups`` does: a live member would overwrite them with its own commits.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memq.client.bootstrap import fetch_metadata, resolve_client, split_servers
from memq.config import SecureClientConfig
from memq.consumer.message import MessageId
from memq.consumer.notifications import NotificationProbe
from memq.consumer.offsets import encode_position
from memq.consumer.seeking import first_offset_at
from memq.errors import (
    ConfigError,
    InvalidPositionError,
    InvalidRequestError,
    MemqError,
    NotificationError,
    UnknownTopicError,
)

__all__ = ["GroupAdmin", "GroupLag", "LagCollector", "PartitionLag", "ResetPlan"]

log = logging.getLogger(__name__)

#: Group states in which members are active (offsets must not be changed then), as
#: confluent-kafka names them (a consumer-protocol group's assigning and reconciling
#: states come as "unknown", with their members).
_LIVE = {"stable", "preparing_rebalancing", "completing_rebalancing"}
#: Notifications read at most per partition to count records behind (beyond: estimated).
MAX_LAG_READS = 1000


@dataclass
class PartitionLag:
    partition: int
    committed: int | None
    start: int
    end: int
    lag_objects: int
    lag_records: int
    lag_seconds: float | None
    records_estimated: bool = False


@dataclass
class GroupLag:
    """One group's lag on one topic: its partitions and their totals."""

    group: str
    state: str
    topic: str
    partitions: list[PartitionLag]

    @property
    def lag_objects(self) -> int:
        return sum(p.lag_objects for p in self.partitions)

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    @property
    def lag_seconds(self) -> float | None:
        """The oldest pending record's age over the partitions (None: nothing pending)."""
        ages = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(ages) if ages else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "topic": self.topic,
            "lag_objects": self.lag_objects,
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "records_estimated": any(p.records_estimated for p in self.partitions),
            # Offsets of partitions without a commit count from their start (as lag does).
            "committed": sum(
                p.committed if p.committed is not None else p.start for p in self.partitions
            ),
            "end": sum(p.end for p in self.partitions),
            "partitions": [asdict(p) for p in self.partitions],
        }


@dataclass
class ResetPlan:
    group: str
    topic: str
    #: partition -> (current committed offset or None, new offset)
    moves: dict[int, tuple[int | None, int]] = field(default_factory=dict)
    #: partition -> (block, record) inside the new object (``--to-message-id``), kept in
    #: the commit metadata: the group starts at that record, not at the object's first.
    positions: dict[int, tuple[int, int]] = field(default_factory=dict)
    executed: bool = False
    #: Executed, but the notification Kafka dropped :attr:`positions` (some
    #: Kafka-protocol brokers do): the group reads those objects again whole.
    positions_dropped: bool = False


def _kafka_message(e: Exception) -> str:
    """librdkafka's own message of a KafkaException (else the exception's text)."""
    err: Any = e.args[0] if e.args else None
    return str(err.str()) if err is not None and hasattr(err, "str") else str(e)


class GroupAdmin:
    """Group operations against the Kafka the topics' notifications go to."""

    def __init__(
        self,
        bootstrap: str | None = None,
        config: dict[str, Any] | None = None,
        timeout: float = 15.0,
        kafka: dict[str, Any] | None = None,
    ) -> None:
        """``config``: client settings for the MemQ brokers; ``kafka``: extra librdkafka
        settings for the notification Kafka (security.protocol, sasl.*, ssl.*)."""
        self._kafka_conf = dict(kafka or {})
        cfg, endpoints = resolve_client(
            SecureClientConfig.from_mapping(config or {}), split_servers(bootstrap)
        )
        self.brokers = endpoints.bootstrap
        self.security = cfg.security()
        self.timeout = timeout
        self._kafka: str | None = None
        self._names: dict[str, str] = {}  # notification topic -> MemQ topic
        self._partitions: dict[str, int] = {}  # MemQ topic -> notification partitions
        #: The cluster's topics at the last full listing, and when it was asked for
        #: (epoch ms); None before one.
        self.listed: tuple[frozenset[str], int] | None = None
        # The notification Kafka's clients, made once and kept until close(): a lag
        # collector measures every few seconds, and a client per measurement meant a
        # new librdkafka instance (threads, connections, a destroy to wait out) each time.
        self._admin_client: Any = None
        self._probe_client: NotificationProbe | None = None

    def close(self) -> None:
        """Release the Kafka clients (again: nothing to do)."""
        probe, self._probe_client = self._probe_client, None
        self._admin_client = None  # (confluent-kafka's AdminClient has no close)
        if probe is not None:
            probe.close()

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- topology ---------------------------------------------------------------------

    def _load(self, topics: list[str] | None) -> None:
        """Learn ``topics`` (None: every topic of the cluster, forgetting those it no
        longer has: deleted ones)."""
        asked = int(time.time() * 1000)  # (a topic created after this may be missing)
        meta = fetch_metadata(self.brokers, topics, timeout=self.timeout, security=self.security)
        if topics is None:
            self._names, self._partitions = {}, {}
        for name, t in meta.topics.items():
            if t.error is not None:
                if topics is not None:
                    raise UnknownTopicError(f"topic {name!r}: {t.error}")
                continue
            self._names[t.notification["topic"]] = name
            self._partitions[name] = int(t.notification["partitions"])
            self._kafka = self._kafka or t.notification["bootstrap_servers"]
        if topics is None:  # (every name the brokers list: one failing to load exists too)
            self.listed = (frozenset(meta.topics), asked)

    def _note_topic(self, topic: str) -> str:
        if topic not in self._partitions:
            self._load([topic])
        return next(nt for nt, t in self._names.items() if t == topic)

    def _admin(self) -> Any:
        """The notification Kafka's admin client (made on first use, then kept)."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is not None:
            return self._admin_client
        if self._kafka is None:
            self._load(None)
        if self._kafka is None:
            raise MemqError("the cluster has no topics yet: no Kafka to ask about groups")
        try:
            conf: dict[str, Any] = {**self._kafka_conf, "bootstrap.servers": self._kafka}
            conf["logger"] = log  # (librdkafka's own logs through Python logging)
            self._admin_client = AdminClient(conf)
        except Exception as e:  # a bad setting: KafkaException(_INVALID_ARG)
            raise ConfigError(f"notification Kafka client settings: {_kafka_message(e)}") from None
        return self._admin_client

    def _probe(self) -> NotificationProbe:
        """The notification reader (made on first use, then kept until close())."""
        assert self._kafka is not None
        if self._probe_client is not None:
            return self._probe_client
        try:
            self._probe_client = NotificationProbe(
                {**self._kafka_conf, "bootstrap.servers": self._kafka}, timeout=self.timeout
            )
        except MemqError:
            raise
        except Exception as e:
            raise ConfigError(f"notification Kafka client settings: {_kafka_message(e)}") from None
        return self._probe_client

    # --- reads --------------------------------------------------------------------------

    def _offsets(self, admin: Any, group: str) -> list[Any]:
        """``group``'s committed offsets (TopicPartitions, with their metadata)."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        try:
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            return list(res[group].result(self.timeout).topic_partitions or [])
        except Exception as e:
            raise NotificationError(f"reading group {group!r}'s offsets failed: {e}") from e

    def _committed(self, admin: Any, group: str) -> dict[tuple[str, int], int]:
        return {(p.topic, p.partition): p.offset for p in self._offsets(admin, group)
                if p.offset >= 0}  # fmt: skip

    def _describe(self, admin: Any, group: str) -> tuple[str, str, list[dict[str, Any]]]:
        """(state, group protocol, members) of ``group``."""
        return self._describe_many(admin, [group])[group]

    def _describe_many(
        self, admin: Any, groups: list[str]
    ) -> dict[str, tuple[str, str, list[dict[str, Any]]]]:
        """Per group: its state, its group protocol (classic or consumer, KIP-848;
        unknown from a broker that does not say) and its members, with the (MemQ) topic
        partitions assigned to each."""
        if not groups:
            return {}
        out = {}
        futures = admin.describe_consumer_groups(groups)
        for group in groups:
            try:
                desc = futures[group].result(self.timeout)
            except Exception as e:
                raise NotificationError(f"describing group {group!r} failed: {e}") from e
            kind = getattr(desc, "type", None)
            protocol = str(getattr(kind, "name", kind or "unknown")).lower()
            members = []
            for m in desc.members or []:
                parts = m.assignment.topic_partitions if m.assignment else []
                members.append(
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.host,
                        "partitions": sorted(
                            [self._names.get(p.topic, p.topic), p.partition] for p in parts
                        ),
                    }
                )
            state = str(getattr(desc.state, "name", desc.state)).lower()
            out[group] = (state, protocol, members)
        return out

    def _topics_of(
        self, committed: dict[tuple[str, int], int], members: list[dict[str, Any]]
    ) -> list[str]:
        """The MemQ topics a group has committed offsets on or its members are assigned."""
        names = {self._names[t] for t, _ in committed if t in self._names}
        names.update(t for m in members for t, _ in m["partitions"] if t in self._partitions)
        return sorted(names)

    def _check_stopped(self, admin: Any, group: str) -> None:
        state, _, members = self._describe(admin, group)
        if members or state in _LIVE:
            raise InvalidRequestError(
                f"group {group!r} is {state} with {len(members) or 'some'} active member(s): "
                "stop them first (a live group would overwrite the offsets with its commits)"
            )

    def list_groups(
        self, match: Callable[[str], bool] | None = None, *, members: bool = True
    ) -> list[dict[str, Any]]:
        """Groups with committed offsets on some MemQ topic or (with ``members``) members
        reading one, with their state, member count and those topics (only the groups
        whose id ``match`` accepts)."""
        admin = self._admin()
        self._load(None)
        try:
            listed = admin.list_consumer_groups().result(self.timeout).valid
        except Exception as e:
            raise NotificationError(f"listing consumer groups failed: {e}") from e
        ids = sorted(g.group_id for g in listed if match is None or match(g.group_id))
        described = self._describe_many(admin, ids)  # listings may say "unknown"
        out = []
        for group in ids:
            state, protocol, live = described[group]
            topics = self._topics_of(self._committed(admin, group), live if members else [])
            if topics:
                out.append({"group": group, "state": state, "protocol": protocol,
                            "members": len(live), "topics": topics})  # fmt: skip
        return out

    def describe(self, group: str, topic: str | None = None) -> dict[str, Any]:
        """Members, and per topic and partition: committed, end, lag (objects, records,
        seconds)."""
        admin = self._admin()
        if topic is not None:
            self._note_topic(topic)
        else:
            self._load(None)
        committed = self._committed(admin, group)
        state, protocol, members = self._describe(admin, group)
        topics = [topic] if topic else self._topics_of(committed, members)
        if not topics:
            raise InvalidRequestError(
                f"group {group!r} has no committed offsets on any MemQ topic and no member "
                "reading one: check the name (memq group list)"
            )
        if topic is not None and not members and state not in _LIVE:
            nt = self._note_topic(topic)
            if not any(t == nt for t, _ in committed):  # a typo would get the whole topic as lag
                raise InvalidRequestError(
                    f"group {group!r} has no committed offsets on topic {topic!r} and no "
                    "active member: check the names (memq group list)"
                )
        lags = self._measure(topics, committed)
        out_topics = {t: [asdict(p) for p in parts] for t, parts in lags.items()}
        return {
            "group": group,
            "state": state,
            "protocol": protocol,
            "members": members,
            "topics": out_topics,
            "lag_objects": sum(p["lag_objects"] for ps in out_topics.values() for p in ps),
            "lag_records": sum(p["lag_records"] for ps in out_topics.values() for p in ps),
        }

    def lag(self, group: str, topics: Sequence[str]) -> dict[str, list[PartitionLag]]:
        """Per topic of ``topics`` (MemQ names), ``group``'s lag per partition."""
        committed = self._committed(self._admin(), group)
        return self._measure(topics, committed)

    def _measure(
        self, topics: Sequence[str], committed: dict[tuple[str, int], int]
    ) -> dict[str, list[PartitionLag]]:
        probe = self._probe()
        return {t: self._lags(probe, t, committed) for t in topics}

    def _lags(
        self, probe: NotificationProbe, topic: str, committed: dict[tuple[str, int], int]
    ) -> list[PartitionLag]:
        nt = self._note_topic(topic)
        out = []
        now = time.time() * 1000
        for p in range(self._partitions[topic]):
            low, high = probe.watermarks(nt, p)
            at = committed.get((nt, p))
            pos = max(at if at is not None else low, low)
            records, estimated, oldest = 0, False, None
            for _, note in probe.scan(nt, p, pos, min(high, pos + MAX_LAG_READS)):
                records += note.record_count
                oldest = note.min_timestamp if oldest is None else oldest
            if high - pos > MAX_LAG_READS and records:  # the rest: at the same average
                records = round(records * (high - pos) / MAX_LAG_READS)
                estimated = True
            out.append(
                PartitionLag(
                    p,
                    at,
                    low,
                    high,
                    max(0, high - pos),
                    records,
                    round((now - oldest) / 1000, 3) if oldest is not None else None,
                    estimated,
                )
            )
        return out

    # --- changes ------------------------------------------------------------------------

    def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: str,
        value: str | int | None = None,
        execute: bool = False,
    ) -> ResetPlan:
        """Plan (and with ``execute``, apply) new committed offsets for ``group`` on
        ``topic``. ``to``: earliest, latest, datetime (epoch ms), shift (by ``value``
        objects), message-id (``partition:offset:block:record``: that partition only)."""
        admin = self._admin()
        nt = self._note_topic(topic)
        if execute:
            self._check_stopped(admin, group)
        committed = self._committed(admin, group)
        plan = ResetPlan(group, topic)
        probe = self._probe()
        parts = range(self._partitions[topic])
        if to == "message-id":
            mid = MessageId.parse(str(value))
            if mid.partition not in parts:
                raise InvalidRequestError(
                    f"message id {value}: topic {topic!r} has partitions 0-{parts[-1]}"
                )
            parts = range(mid.partition, mid.partition + 1)
        for p in parts:
            low, high = probe.watermarks(nt, p)
            cur = committed.get((nt, p))
            if to == "earliest":
                new = low
            elif to == "latest":
                new = high
            elif to == "datetime":
                new = first_offset_at(probe, nt, p, int(value or 0))
            elif to == "shift":
                new = min(high, max(low, (cur if cur is not None else low) + int(value or 0)))
            elif to == "message-id":
                new = self._message_id_offset(probe, nt, p, low, high, str(value), plan)
            else:
                raise InvalidRequestError(
                    f"unknown reset {to!r}: use earliest, latest, datetime, shift or message-id"
                )
            plan.moves[p] = (cur, new)
        if execute:
            self._alter(admin, group, nt, plan)
            plan.executed = True
            if plan.positions:
                kept = {(o.topic, o.partition): o.metadata for o in self._offsets(admin, group)}
                plan.positions_dropped = any(
                    kept.get((nt, p)) != encode_position(*at) for p, at in plan.positions.items()
                )
        return plan

    @staticmethod
    def _message_id_offset(
        probe: NotificationProbe, nt: str, p: int, low: int, high: int, value: str,
        plan: ResetPlan,
    ) -> int:  # fmt: skip
        """The object offset of message id ``value`` (checked against its notification);
        its block:record goes to ``plan.positions``."""
        mid = MessageId.parse(value)
        if not low <= mid.offset < high:
            where = (
                f"has expired (the oldest kept is {low}): use --to-earliest"
                if mid.offset < low
                else f"does not exist yet (partition {p} ends at {high}): use --to-latest"
            )
            raise InvalidPositionError(f"message id {value}: object {mid.offset} {where}")
        note = probe.read(nt, p, mid.offset)
        if note is not None and (mid.block >= note.block_count or mid.record >= note.record_count):
            raise InvalidPositionError(
                f"message id {value}: object {mid.offset} has {note.block_count} block(s) "
                f"and {note.record_count} record(s): there is no block {mid.block} record "
                f"{mid.record}"
            )
        if (mid.block, mid.record) != (0, 0):
            plan.positions[p] = (mid.block, mid.record)
        return mid.offset

    def _alter(self, admin: Any, group: str, nt: str, plan: ResetPlan) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        tps = []
        for p, (_, new) in sorted(plan.moves.items()):
            at = plan.positions.get(p)  # block:record inside the object: commit metadata
            tps.append(TopicPartition(nt, p, new, encode_position(*at)) if at else
                       TopicPartition(nt, p, new))  # fmt: skip
        try:
            res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
            res[group].result(self.timeout)
        except Exception as e:
            raise NotificationError(f"setting group {group!r}'s offsets failed: {e}") from e

    def delete(self, group: str) -> None:
        """Delete a stopped group that has committed offsets on some MemQ topic (a name
        with none is a typo, or another application's group on the same Kafka: refused)."""
        admin = self._admin()
        self._check_stopped(admin, group)
        self._load(None)
        if not any(t in self._names for t, _ in self._committed(admin, group)):
            raise InvalidRequestError(
                f"group {group!r} has no committed offsets on any MemQ topic: nothing to "
                "delete (memq group list shows the groups)"
            )
        try:
            admin.delete_consumer_groups([group])[group].result(self.timeout)
        except Exception as e:
            raise NotificationError(f"deleting group {group!r} failed: {e}") from e


class LagCollector:
    """Prometheus collector of consumer groups' lag (``memq group exporter``, the
    auditor's ``/metrics``).

    :meth:`refresh` measures (it reads notifications: call it every few tens of seconds);
    scrapes and :meth:`snapshot` return the last measurement, so neither waits on Kafka.
    ``groups``: fnmatch patterns of the group ids to measure (empty: every group with
    committed offsets on a MemQ topic)."""

    def __init__(self, admin: GroupAdmin, groups: Sequence[str] = ()) -> None:
        self.admin = admin
        self.patterns = list(groups)
        self.lags: list[GroupLag] = []
        self.errors = 0
        #: The last refresh's failure (``ErrorType: message``, one line); None after a
        #: successful one.
        self.last_error: str | None = None
        #: When the last successful measurement was taken (epoch ms).
        self.measured_ms: int | None = None

    def _wanted(self, group: str) -> bool:
        return not self.patterns or any(fnmatch.fnmatchcase(group, p) for p in self.patterns)

    def refresh(self, topics: Collection[str] | None = None) -> None:
        """Measure every wanted group on its MemQ topics (only ``topics``, when given).
        A failure keeps the last measurement and sets :attr:`last_error`."""
        if topics is not None and not topics:  # nothing to measure (no topic audited yet)
            self.lags, self.last_error = [], None
            self.measured_ms = int(time.time() * 1000)
            return
        try:
            lags = []
            # Groups that committed: one that has not yet would count its lag from the
            # start of the topic, wrong for a group that starts at the end.
            for g in self.admin.list_groups(self._wanted, members=False):
                names = [t for t in g["topics"] if topics is None or t in topics]
                if not names:
                    continue
                for topic, parts in self.admin.lag(g["group"], names).items():
                    lags.append(GroupLag(g["group"], g["state"], topic, parts))
        except Exception as e:  # MemQ's errors, and Kafka client errors outside them
            self.errors += 1
            why = " ".join(f"{type(e).__name__}: {e}".split())  # one line
            again = why == self.last_error  # the same failure as last time: once is enough
            self.last_error = why
            log.log(
                logging.DEBUG if again else logging.WARNING,
                "measuring consumer lag failed: %s",
                why,
                exc_info=not isinstance(e, MemqError),
            )
            return
        self.lags = lags
        self.last_error = None
        self.measured_ms = int(time.time() * 1000)

    def listing(self) -> tuple[frozenset[str], int] | None:
        """The MemQ topics the cluster had at the last measurement's listing, and when
        (epoch ms); None before one."""
        return self.admin.listed

    def close(self) -> None:
        """Release the Kafka clients (on the thread that refreshes, between refreshes)."""
        self.admin.close()

    def snapshot(self) -> dict[str, Any]:
        """The last measurement as JSON: ``groups`` (one entry per group and topic),
        ``measured_ms``, ``error`` (the last refresh's, if it failed) and ``errors``."""
        return {
            "measured_ms": self.measured_ms,
            "error": self.last_error,
            "errors": self.errors,
            "groups": [g.to_dict() for g in self.lags],
        }

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["group", "topic", "partition"]
        objs = GaugeMetricFamily("memq_group_lag_objects", "Objects behind the end", labels=labels)
        recs = GaugeMetricFamily("memq_group_lag_records", "Records behind the end", labels=labels)
        secs = GaugeMetricFamily(
            "memq_group_lag_seconds", "Age of the oldest pending record", labels=labels
        )
        for g in self.lags:
            for p in g.partitions:
                key = [g.group, g.topic, str(p.partition)]
                objs.add_metric(key, p.lag_objects)
                recs.add_metric(key, p.lag_records)
                secs.add_metric(key, p.lag_seconds or 0.0)
        errors = CounterMetricFamily("memq_group_lag_errors", "Failed lag measurements")
        errors.add_metric([], self.errors)
        yield from (objs, recs, secs, errors)
