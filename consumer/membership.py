"""Which partitions a consumer reads, and where each one starts.

Two ways, as in Kafka: :meth:`Membership.subscribe` joins the consumer group (partitions
come and go with rebalances, served inside polls) and :meth:`Membership.assign` reads the
partitions it is given, without a group (no join, no rebalances; commits only with a
``group.id``). Either way a partition starts at, in this order: a seek asked for before
it was assigned (a reset rule), where this member got to before the same rebalance took
it away (revoked and given back), an explicit position (``assign``), or the group's
committed position, at the very record when the commit was made inside an object (its
commit metadata says which), else ``auto.offset.reset``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from memq.consumer.config import ConsumerConfig
from memq.consumer.connect import Connector
from memq.consumer.fetcher import Start
from memq.consumer.message import MessageId
from memq.consumer.notifications import OFFSET_BEGINNING, OFFSET_END, GroupMember
from memq.consumer.offsets import GroupOffsets, OffsetAndMetadata, decode_position
from memq.consumer.prefetch import Prefetcher
from memq.consumer.seeking import Probe, Seeker
from memq.consumer.topics import Topics
from memq.errors import ConfigError, MemqError

__all__ = ["GROUPLESS", "Membership", "Where", "parse_where"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
PartitionsCallback = Callable[[list[tuple[str, int]]], Any]
#: Where an assigned partition starts: an offset, a message id (or its text), or None
#: (the group's committed position, else auto.offset.reset).
Where = int | MessageId | str | None
#: The Kafka group.id of a consumer without a group (never joined, never committed to).
GROUPLESS = "memq-groupless"


def offset_of(where: MessageId | str) -> int | None:
    """The notification offset of a MessageId (or its text); None if it does not parse
    (:func:`parse_where` then says what is wrong with it)."""
    if isinstance(where, MessageId):
        return where.offset
    try:
        return MessageId.parse(where).offset
    except (MemqError, ValueError):
        return None


def parse_where(topic: str, partition: int, where: Where) -> tuple[int | None, Start | None]:
    """(notification offset or None, start inside that object) of an ``assign`` entry."""
    if isinstance(where, str):
        where = MessageId.parse(where)
    if isinstance(where, MessageId):
        if where.partition != partition:
            raise MemqError(
                f"message id {where} is of partition {where.partition}, not {partition}"
            )
        start = Start(where.block, where.record) if (where.block or where.record) else None
        return where.offset, start
    if where is None:
        return None, None
    if isinstance(where, bool) or not isinstance(where, int) or where < 0:
        raise MemqError(
            f"{topic}[{partition}]: start at an offset >= 0, a MessageId or None, not {where!r}"
        )
    return where, None


def notification_consumer_conf(c: ConsumerConfig, bootstrap: str) -> dict[str, Any]:
    """librdkafka settings of the notification consumer (the user's ``kafka`` win)."""
    # With the consumer protocol the broker owns the session and heartbeat (librdkafka
    # refuses a consumer given them).
    session = (
        {
            "session.timeout.ms": c.session_timeout_ms,
            "heartbeat.interval.ms": c.heartbeat_interval_ms,
        }
        if c.group_protocol == "classic"
        else {}
    )
    return {
        "bootstrap.servers": bootstrap,
        # The group's member list (memq group describe, kafka-consumer-groups) names it.
        "client.id": c.client_id,
        "group.id": c.group_id or GROUPLESS,
        "group.protocol": c.group_protocol,
        "auto.offset.reset": c.auto_offset_reset,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        **session,
        # librdkafka waits up to 500 ms per empty fetch; a Kafka-protocol broker that
        # does not answer a waiting fetch as soon as data arrives adds that to
        # end-to-end latency. Ten empty fetches a second per broker cost nothing.
        "fetch.wait.max.ms": 100,
        # Read partitions added to a topic (notification.partitions grown) are found at
        # the next metadata refresh, then assigned by a rebalance: librdkafka's 5 minutes
        # would leave their records unread that long. One small metadata request per
        # consumer every 10 s (100/s for 1,000 consumers) is nothing to a Kafka cluster.
        "topic.metadata.refresh.interval.ms": 10_000,
        **c.kafka,
    }


def _position(at: tuple[int, Start | None]) -> tuple[int, int, int]:
    """(offset, block, record) of a start, for ordering two of them."""
    offset, start = at
    return (offset, 0, 0) if start is None else (offset, start.block, start.record)


class Membership:
    """The Kafka consumer and probe, subscription or assignment, rebalance callbacks."""

    def __init__(
        self,
        config: ConsumerConfig,
        topics: Topics,
        connector: Callable[[], Connector],
        *,
        offsets: GroupOffsets,
        seeker: Seeker,
        prefetch: Prefetcher,
        on_commit_failed: Callable[[Exception], None],
    ) -> None:
        self._config = config
        self._topics = topics
        self._connector = connector
        self._offsets = offsets
        self._seeker = seeker
        self._prefetch = prefetch
        self._on_commit_failed = on_commit_failed
        self.source: GroupMember | None = None
        self.probe: Probe | None = None
        #: "subscribe" (a group member), "assign" (given partitions) or None (neither).
        self.mode: str | None = None
        #: Progress of partitions just revoked: where they resume if assigned back.
        self._resume: dict[TP, OffsetAndMetadata] = {}
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None

    def names(self, parts: list[TP]) -> list[tuple[str, int]]:
        """``[(MemQ topic, partition)]`` of notification partitions."""
        by_note = self._topics.by_note
        return [(by_note[t].name, p) for t, p in parts if t in by_note]

    # --- Kafka clients ----------------------------------------------------------------

    def kafka_conf(self, bootstrap: str) -> dict[str, Any]:
        return notification_consumer_conf(self._config, bootstrap)

    def resolve(self, names: list[str]) -> list[str]:
        """The notification topics of ``names`` (metadata asked once per topic); the
        group-less probe exists afterwards."""
        notes = self._topics.resolve(names)
        if self.probe is None:
            assert self._topics.kafka is not None
            self.probe = self._connector().probe(self.kafka_conf(self._topics.kafka))
        return notes

    def member(self) -> GroupMember:
        if self.source is None:
            assert self._topics.kafka is not None and self.probe is not None
            self.source = self._connector().member(self.kafka_conf(self._topics.kafka))
            self._offsets.source = self.source
            self._seeker.attach(self.source, self.probe)
        return self.source

    # --- subscribe, assign, unsubscribe -------------------------------------------------

    def subscribe(
        self,
        names: list[str],
        on_assign: PartitionsCallback | None,
        on_revoke: PartitionsCallback | None,
    ) -> None:
        if self._config.group_id is None:
            raise ConfigError(
                "subscribe() joins a consumer group: set group.id, or read partitions "
                "without a group with assign()"
            )
        if self.mode == "assign":
            raise MemqError("this consumer reads assigned partitions: unsubscribe() first")
        notes = self.resolve(names)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self.member().subscribe(notes, self._assigned, self._revoked, self._lost)
        self.mode = "subscribe"

    def assign(self, wanted: list[tuple[str, int, Where]]) -> None:
        if self.mode == "subscribe":
            raise MemqError("this consumer is a group member: unsubscribe() before assign()")
        notes = self.resolve([t for t, _, _ in wanted])
        plan: dict[TP, tuple[int | None, Start | None]] = {}
        for (topic, part, where), note_topic in zip(wanted, notes, strict=True):
            self._topics.check_partition(topic, part)
            plan[(note_topic, part)] = parse_where(topic, part, where)
        source = self.member()
        if self.mode == "assign":
            self._leave()
        committed = self._committed_starts([tp for tp, (o, _) in plan.items() if o is None])
        reset = OFFSET_BEGINNING if self._config.auto_offset_reset == "earliest" else OFFSET_END
        offsets: dict[TP, int] = {}
        for tp, asked in plan.items():
            offset, start = committed.get(tp, asked) if asked[0] is None else asked
            if offset is None:
                offsets[tp] = reset
                continue
            offsets[tp] = offset
            self._seeker.start_at(tp, offset, start)
        source.assign_partitions(offsets)
        self.mode = "assign"
        log.info("assigned %s", sorted(offsets))

    def unsubscribe(self) -> None:
        if self.mode is None or self.source is None:
            return
        self._leave()
        if self.mode == "assign":
            self.source.unassign()
        else:
            # Leave the group and close this Kafka consumer: closing serves the
            # revocation (librdkafka runs it in a later poll, which could otherwise
            # unassign partitions assigned meanwhile); a new one joins or assigns next.
            source, self.source, self._offsets.source = self.source, None, None
            self._seeker.source = None
            try:
                source.unsubscribe()
            finally:
                source.close()
        self.mode = None

    def _leave(self) -> None:
        """Commit (auto-commit) and forget everything of the current assignment."""
        assert self.source is not None
        parts = set(self.source.assignment()) | self._prefetch.partitions()
        try:
            self._offsets.commit_revoked(parts)
        except Exception as e:
            log.warning("commit of %s failed: %s", sorted(parts), e)
            self._on_commit_failed(e)
        finally:
            self._forget(parts)
            self._resume.clear()

    def _committed_starts(self, parts: list[TP]) -> dict[TP, tuple[int, Start | None]]:
        """The group's committed positions of ``parts`` (offset, and where inside that
        object when the commit was made in the middle of it); none without a group."""
        if self._config.group_id is None or not parts:
            return {}
        assert self.source is not None
        try:
            marks = self.source.committed(parts, self._config.metadata_timeout_ms / 1000)
        except Exception as e:  # Kafka's own committed offsets apply (objects read whole)
            log.warning("reading committed positions of %s failed: %s", parts, e)
            return {}
        return {
            tp: (m.offset, decode_position(m.metadata)) for tp, m in marks.items() if m is not None
        }

    # --- rebalance callbacks (inside polls) -----------------------------------------------

    def _assigned(self, parts: list[TP]) -> dict[TP, int] | None:
        log.info("assigned %s", parts)
        # A seek_* asked for before the assignment; else, for a partition this member
        # had before, where it got to: the objects it had fetched ahead were dropped,
        # and Kafka's committed offset may be behind (auto-commit off, or its commit
        # failed).
        offsets = self._seeker.assigned(parts) or {}
        rest = [tp for tp in parts if tp not in offsets]
        committed = self._committed_starts(rest)
        for tp in rest:
            at = committed.get(tp)
            mark = self._resume.get(tp)
            # Where this member got to, unless the group committed further: an incremental
            # rebalance (group.protocol=consumer, cooperative) gives a partition back in a
            # later rebalance, after another member may have read on from it.
            if mark is not None:
                mine = (mark.offset, decode_position(mark.metadata))
                if at is None or _position(mine) >= _position(at):
                    offsets[tp] = mark.offset
                    self._seeker.start_at(tp, *mine)
                    continue
            # The committed offset; one committed in the middle of an object starts there
            # at its next record (the commit metadata says which).
            if at is not None and at[1] is not None:
                offsets[tp] = at[0]
                self._seeker.start_at(tp, *at)
        self._resume.clear()
        if self._on_assign is not None:
            self._on_assign(self.names(parts))
        return offsets or None

    def _revoked(self, parts: list[TP]) -> None:
        """``parts`` are being revoked (still ours): commit what was handed out, clean up."""
        log.info("revoked %s", parts)
        gone = set(parts)
        try:
            self._offsets.commit_revoked(gone)  # auto-commit: their progress, first
        except Exception as e:  # never breaks the rebalance; the cleanup below must run
            log.warning("commit of revoked partitions %s failed: %s", parts, e)
            self._on_commit_failed(e)
        finally:
            self._resume.update(self._forget(gone))
        if self._on_revoke is not None:
            self._on_revoke(self.names(parts))

    def _lost(self, parts: list[TP]) -> None:
        """``parts`` were lost (another member may own them already): never commit."""
        log.warning("lost %s (not committed: another member may own them)", parts)
        gone = set(parts)
        self._forget(gone)
        for tp in gone:
            self._resume.pop(tp, None)
        if self._on_revoke is not None:
            self._on_revoke(self.names(parts))

    def _forget(self, parts: set[TP]) -> dict[TP, OffsetAndMetadata]:
        """Drop everything of ``parts``: progress, seeks, objects, pauses (as Kafka does);
        returns their progress (taken before the objects in progress are dropped)."""
        done = self._offsets.forget(parts)
        self._seeker.revoked(parts)
        self._prefetch.drop(parts)
        self._prefetch.resume(parts)
        return done

    # --- pausing ------------------------------------------------------------------------

    def assigned(self, parts: list[tuple[str, int]]) -> set[TP]:
        """The notification partitions of ``[(MemQ topic, partition)]``, all assigned."""
        have = set(self.source.assignment()) if self.source is not None else set()
        out = set()
        for topic, part in parts:
            tp = (self._topics.note_topic(topic), part)
            if tp not in have:
                raise MemqError(f"partition {part} of {topic!r} is not assigned to this consumer")
            out.add(tp)
        return out

    def pause(self, parts: set[TP]) -> None:
        assert self.source is not None
        self.source.pause_partitions(sorted(parts))
        self._prefetch.pause(parts)

    def resume(self, parts: set[TP]) -> None:
        assert self.source is not None
        self.source.resume_partitions(sorted(parts))
        self._prefetch.resume(parts)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
        if self.probe is not None:
            self.probe.close()
