"""``memq.Consumer``: read a topic's records straight from storage, at least once, in groups.

It reads the topic's notifications from Kafka as a member of a consumer group, fetches
the objects they point at from S3 (or the filesystem) with a prefetch pool, verifies
them, and hands their records to the application in object order. Offsets are
notification offsets, committed only for objects whose last record was handed out, so
a crash re-delivers at most the objects in progress, never loses one. Copies of blocks
already handed out are dropped (``dedup.enable``; docs/guarantees.md says exactly what
is guaranteed under which failure).

Use it from one thread (like a Kafka consumer); the fetch pool works in the background.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from memq.audit.client import ClientAudit
from memq.client.bootstrap import resolve_client
from memq.consumer.config import ConsumerConfig
from memq.consumer.connect import Connector, KafkaConnector
from memq.consumer.fetcher import Start
from memq.consumer.handout import Deduplicator
from memq.consumer.message import Message, MessageId
from memq.consumer.notifications import GroupMember
from memq.consumer.offsets import GroupOffsets
from memq.consumer.prefetch import ConsumerStats, Pending, Prefetcher
from memq.consumer.seeking import Probe, Seeker
from memq.errors import ClientClosedError, MemqError, UnknownTopicError
from memq.formats.notification import Notification
from memq.protocol import TopicMetadata
from memq.storage_handlers.base import StorageReader

__all__ = ["Consumer", "Lag"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
V = TypeVar("V")
SkipCallback = Callable[[Notification, MemqError], Any]
PartitionsCallback = Callable[[list[tuple[str, int]]], Any]


class Lag(NamedTuple):
    """How far a consumer is behind: notifications (objects) and an estimate of records."""

    notifications: int
    records_estimate: int
    partitions: dict[tuple[str, int], int]


@dataclass
class _Topic:
    name: str  # MemQ topic
    meta: TopicMetadata
    reader: StorageReader


class Consumer:
    """Consume MemQ topics.

    >>> c = Consumer({"group.id": "g", "auto.offset.reset": "earliest"})  # doctest: +SKIP
    >>> c.subscribe("events")                                           # doctest: +SKIP
    >>> for msg in c:                                                   # doctest: +SKIP
    ...     handle(msg.value)
    """

    def __init__(
        self,
        config: Mapping[str, Any] | ConsumerConfig | None = None,
        /,
        on_skip: SkipCallback | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(config, ConsumerConfig):
            cfg = config.model_copy(update=kwargs) if kwargs else config
        else:
            cfg = ConsumerConfig.from_mapping(config, **kwargs)
        cfg, endpoints = resolve_client(cfg, cfg.bootstrap_list())
        self.config = cfg
        self.bootstrap = endpoints.bootstrap
        #: Storage reader settings: the local stack's (endpoint, credentials), then ours.
        self._storage = {**endpoints.storage, **cfg.storage}
        self.on_skip = on_skip
        #: Audit records of handed-out blocks (audit.enable; on by default on the local stack).
        self._audit = (
            ClientAudit(cfg, cfg.client_id)
            if cfg.audit_enabled(uses_local_stack=endpoints.local)
            else None
        )
        #: Where subscribe() gets metadata, storage readers and the Kafka clients from:
        #: replace it before subscribe() to run over in-process fakes (tests).
        self.connector: Connector = KafkaConnector()
        self._notify_kafka: str | None = None
        self._topics: dict[str, _Topic] = {}  # notification topic -> topic
        self._source: GroupMember | None = None
        self._probe: Probe | None = None
        self.stats = ConsumerStats()
        self._offsets = GroupOffsets(
            auto_commit=cfg.enable_auto_commit,
            auto_commit_interval=cfg.auto_commit_interval_ms / 1000,
            on_commit_error=self._commit_failed,
        )
        #: Done offsets of partitions just revoked: where they resume if assigned back.
        self._resume: dict[TP, int] = {}
        self._dedup = Deduplicator.from_config(cfg, self.stats) if cfg.dedup_enable else None
        self._seeker = Seeker(
            restart=self._offsets.restart,
            drop=self._drop,
            name=lambda t: self._topics[t].name,
        )
        self._prefetch = Prefetcher(
            cfg,
            reader=lambda t: self._topics[t].reader,
            start=self._seeker.take_start,
            on_skip=self._skipped,
            stats=self.stats,
            audit=self._audit is not None,
            dedup=self._dedup,
        )
        self._user_on_assign: PartitionsCallback | None = None
        self._user_on_revoke: PartitionsCallback | None = None
        self._closed = False

    # --- subscription ---------------------------------------------------------------------

    def _kafka_conf(self, bootstrap: str) -> dict[str, Any]:
        c = self.config
        return {
            "bootstrap.servers": bootstrap,
            "group.id": c.group_id,
            "auto.offset.reset": c.auto_offset_reset,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "session.timeout.ms": c.session_timeout_ms,
            "heartbeat.interval.ms": c.heartbeat_interval_ms,
            **c.kafka,
        }

    def subscribe(
        self,
        topic: str | list[str],
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Join the group for ``topic`` (or several); callbacks get ``[(topic, partition)]``."""
        self._check_open()
        names = [topic] if isinstance(topic, str) else list(topic)
        meta = self.connector.metadata(
            self.bootstrap,
            names,
            timeout=self.config.metadata_timeout_ms / 1000,
            security=self.config.security(),
        )
        kafka = set()
        for name in names:
            t = meta.topics.get(name)
            if t is None or t.error is not None:
                raise UnknownTopicError(
                    f"topic {name!r} is unknown to cluster {meta.cluster!r}: "
                    f"{t.error if t else 'no metadata'}"
                )
            note_topic = t.notification["topic"]
            reader = self.connector.reader(t.storage, self._storage)
            self._topics[note_topic] = _Topic(name, t, reader)
            kafka.add(
                self.config.notification_bootstrap_servers or t.notification["bootstrap_servers"]
            )
        if len(kafka) != 1:
            raise MemqError(
                f"topics {names} notify to different Kafka clusters ({sorted(kafka)}): "
                "use one consumer per cluster"
            )
        self._notify_kafka = kafka.pop()
        conf = self._kafka_conf(self._notify_kafka)
        self._user_on_assign, self._user_on_revoke = on_assign, on_revoke
        if self._source is None:
            self._source = self.connector.member(conf)
            self._probe = self.connector.probe(conf)
            self._offsets.source = self._source
            self._seeker.attach(self._source, self._probe)
        self._source.subscribe(list(self._topics), self._assigned, self._revoked, self._lost)

    def _memq(self, parts: list[TP]) -> list[tuple[str, int]]:
        return [(self._topics[t].name, p) for t, p in parts if t in self._topics]

    def _named(self, offsets: Mapping[TP, V]) -> dict[tuple[str, int], V]:
        return {(self._topics[t].name, p): o for (t, p), o in offsets.items()}

    def _assigned(self, parts: list[TP]) -> dict[TP, int] | None:
        log.info("assigned %s", parts)
        # A seek_* asked for before the assignment; else, for a partition revoked just
        # before (the same rebalance: nobody read it since), where this member got to:
        # the objects it had fetched ahead were dropped, and Kafka's committed offset
        # may be behind (auto-commit off, or its commit failed).
        offsets = self._seeker.assigned(parts) or {}
        for tp in parts:
            if tp in self._resume and tp not in offsets:
                offsets[tp] = self._resume[tp]
                self._offsets.restart(tp, offsets[tp])
        self._resume.clear()
        if self._user_on_assign is not None:
            self._user_on_assign(self._memq(parts))
        return offsets or None

    def _revoked(self, parts: list[TP]) -> None:
        """``parts`` are being revoked (still ours): commit what was handed out, clean up."""
        log.info("revoked %s", parts)
        gone = set(parts)
        try:
            self._offsets.commit_revoked(gone)  # auto-commit: their progress, first
        except Exception as e:  # never breaks the rebalance; the cleanup below must run
            log.warning("commit of revoked partitions %s failed: %s", parts, e)
            self._commit_failed(e)
        finally:
            self._resume.update(self._forget(gone))
        if self._user_on_revoke is not None:
            self._user_on_revoke(self._memq(parts))

    def _lost(self, parts: list[TP]) -> None:
        """``parts`` were lost (another member may own them already): never commit."""
        log.warning("lost %s (not committed: another member may own them)", parts)
        gone = set(parts)
        self._forget(gone)
        for tp in gone:
            self._resume.pop(tp, None)
        if self._user_on_revoke is not None:
            self._user_on_revoke(self._memq(parts))

    def _forget(self, parts: set[TP]) -> dict[TP, int]:
        """Drop everything of ``parts``: progress, seeks, objects; returns their progress."""
        done = self._offsets.forget(parts)
        self._seeker.revoked(parts)
        self._drop(parts)
        return done

    def _commit_failed(self, _e: Exception) -> None:
        self.stats.commit_failures += 1

    def _drop(self, parts: set[TP]) -> None:
        """Forget queued and in-progress objects of ``parts`` (after revoke or seek)."""
        self._prefetch.drop(parts)

    # --- consuming ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")

    def _pull(self, timeout: float) -> None:
        """Poll notifications (serving rebalances); prefetch as many objects as allowed."""
        assert self._source is not None
        self._seeker.apply_pending()
        self._prefetch.fill(self._source, timeout)

    def _skipped(self, note: Notification, err: MemqError) -> None:
        if self.on_skip is not None:
            self.on_skip(note, err)

    def _object_done(self, pending: Pending) -> None:
        self._offsets.object_done(pending.tp, pending.offset)
        self.stats.objects += 1
        note = pending.notification
        if note is not None:  # else: a notification that did not decode, skipped
            self.stats.record_counts.append(note.record_count)
            if self._audit is not None and (pending.blocks or pending.copies):
                self._audit_object(pending, note)

    def _audit_object(self, pending: Pending, note: Notification) -> None:
        """One ``consumed`` audit record per block of ``pending`` that was handed out, one
        ``dropped`` record per copy of a block handed out before (dedup)."""
        assert self._audit is not None
        now = int(time.time() * 1000)
        topic = self._topics[pending.tp[0]].name
        for kind, blocks in (("consumed", pending.blocks), ("dropped", pending.copies)):
            for b in blocks:
                self._audit.emit(
                    {
                        "kind": kind,
                        "topic": topic,
                        "producer_id": b.producer_id,
                        "epoch": b.epoch,
                        "sequence": b.sequence,
                        "records": b.records,
                        "content_crc": b.content_crc,
                        "min_timestamp": b.min_timestamp,
                        "time": now,
                        "bucket": note.bucket,
                        "key": note.key,
                        "group": self.config.group_id,
                        "block_index": b.index,
                    },
                    self._notify_kafka,
                )
        pending.blocks = pending.copies = []

    def audit_stats(self) -> dict[str, int]:
        """Audit records emitted, delivered and dropped (zeros when auditing is off)."""
        if self._audit is None:
            return {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 0}
        return self._audit.stats()

    def _next_object(self, deadline: float | None) -> bool:
        """Make the next object current; False if none became ready before ``deadline``."""
        assert self._source is not None
        prefetch = self._prefetch
        while True:
            self._pull(0.0 if prefetch.queue else (self._remaining(deadline, cap=0.5) or 0.0))
            if not prefetch.queue:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            head = prefetch.take(self._remaining(deadline, cap=None))
            if head is None:
                return False
            if prefetch.current is None:  # skipped, or nothing at or after its start
                self._object_done(head)
                continue
            return True

    @staticmethod
    def _remaining(deadline: float | None, cap: float | None) -> float | None:
        if deadline is None:
            return cap
        left = max(0.0, deadline - time.monotonic())
        return left if cap is None else min(left, cap)

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` records, waiting at most ``timeout`` seconds (None: forever)."""
        self._check_open()
        if self._source is None:
            raise MemqError("subscribe() to a topic before consuming")
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Message] = []
        while len(out) < num_messages:
            cur = self._prefetch.current
            if cur is not None:
                out.extend(cur.take(num_messages - len(out)))
                if cur.exhausted:
                    self._object_done(cur.pending)
                    self._prefetch.current = None
                continue
            ready = self._prefetch.head_ready()
            if out and not ready:
                break
            try:
                if not self._next_object(deadline if not out else time.monotonic()):
                    break
            except MemqError:
                if not out:
                    raise
                # Records already taken from earlier objects are handed out now (their
                # objects are done and may be committed); the failed object stays at the
                # head, is re-fetched, and its error (if it persists) comes next call.
                break
        self.stats.records += len(out)
        self._offsets.maybe_auto_commit()
        return out

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, or None if none arrived within ``timeout`` seconds."""
        msgs = self.consume(1, timeout)
        return msgs[0] if msgs else None

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            yield from self.consume(500, 1.0)

    # --- commits ------------------------------------------------------------------------

    def commit(self, asynchronous: bool = False) -> dict[tuple[str, int], int]:
        """Commit, per partition, the offset after the last object fully handed out.

        Returns what was committed, as ``{(topic, partition): notification offset}``.
        """
        self._check_open()
        return self._named(self._offsets.commit(asynchronous=asynchronous))

    def committed(self, timeout: float = 10.0) -> dict[tuple[str, int], int | None]:
        """The group's committed notification offsets for the assigned partitions."""
        return self._named(self._offsets.committed(timeout))

    def position(self) -> dict[tuple[str, int], int | None]:
        """Per assigned partition, the notification offset of the next object to finish."""
        cur = self._prefetch.current
        return self._named(
            self._offsets.position(None if cur is None else (cur.pending.tp, cur.pending.offset))
        )

    def assignment(self) -> list[tuple[str, int]]:
        return self._memq(self._offsets.assignment())

    # --- seeking ------------------------------------------------------------------------

    def _note_topic(self, topic: str | None) -> str:
        if topic is None:
            if len(self._topics) != 1:
                raise MemqError("several topics are subscribed: name the topic to seek")
            return next(iter(self._topics))
        for nt, t in self._topics.items():
            if t.name == topic:
                return nt
        raise UnknownTopicError(f"topic {topic!r} is not subscribed")

    def seek(self, message_id: MessageId | str, topic: str | None = None) -> None:
        """Re-read from this record on (its object is range-read from that block)."""
        mid = MessageId.parse(message_id) if isinstance(message_id, str) else message_id
        tp = (self._note_topic(topic), mid.partition)
        self._seeker.seek(
            tp, mid.offset, Start(mid.block, mid.record) if (mid.block or mid.record) else None
        )
        self._reread()

    def _reread(self) -> None:
        """After a seek: what is read again is handed out again (dedup forgets)."""
        if self._dedup is not None:
            self._dedup.clear()

    def seek_to_beginning(self) -> None:
        """Continue from the oldest object of every (to be) assigned partition."""
        self._seeker.to_beginning()
        self._reread()

    def seek_to_end(self) -> None:
        """Skip everything published so far in every (to be) assigned partition."""
        self._seeker.to_end()

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Continue, in every assigned partition, from the first record with timestamp >= ts.

        Uses Kafka's offsets_for_times where it is answered sensibly; otherwise (some
        Kafka-protocol brokers always answer 0) binary-searches notification offsets by
        the min/max record timestamps notifications carry. Records older than ts inside
        the first object are skipped, whole blocks by their index without reading them.
        """
        self._seeker.to_time(timestamp_ms)
        self._reread()

    # --- lag and lifecycle -------------------------------------------------------------

    def lag(self) -> Lag:
        """Notifications behind the end of each assigned partition, and records (estimated
        from the record counts of recent notifications)."""
        assert self._source is not None and self._probe is not None
        parts: dict[tuple[str, int], int] = {}
        for tp in self._source.assignment():
            _, high = self._probe.watermarks(*tp)
            pos = self.position().get((self._topics[tp[0]].name, tp[1]))
            if pos is None:
                pos = self.committed().get((self._topics[tp[0]].name, tp[1])) or 0
            parts[(self._topics[tp[0]].name, tp[1])] = max(0, high - pos)
        counts = self.stats.record_counts
        avg = sum(counts) / len(counts) if counts else 0
        total = sum(parts.values())
        return Lag(total, round(total * avg), parts)

    def close(self) -> None:
        """Commit what was fully handed out (with auto-commit), leave the group, stop fetching.

        Fetches in flight are waited for (up to ``close.timeout.ms``) before the storage
        readers are closed.
        """
        if self._closed:
            return
        try:
            self._offsets.close()  # the final commit, with auto-commit
        finally:
            self._closed = True
            self._prefetch.close(self.config.close_timeout_ms / 1000)
            if self._source is not None:
                self._source.close()
            if self._probe is not None:
                self._probe.close()
            for t in self._topics.values():
                t.reader.close()
            if self._audit is not None:
                self._audit.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
