"""``memq.Consumer``: read a topic's records straight from storage, at least once, in groups.

It reads the topic's notifications from Kafka as a member of a consumer group, fetches
the objects they point at from S3 (or the filesystem) with a prefetch pool, verifies
them, and hands their records to the application in object order. Offsets are
notification offsets, committed only for objects whose last record was handed out, so
a crash re-delivers at most the objects in progress, never loses one.

Use it from one thread (like a Kafka consumer); the fetch pool works in the background.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from memq.audit.client import ClientAudit
from memq.client.bootstrap import fetch_metadata, resolve_bootstrap, with_local_stack_security
from memq.consumer.config import ConsumerConfig
from memq.consumer.fetcher import BlockAudit, FetchedObject, Start, fetch_object
from memq.consumer.message import Message, MessageId
from memq.consumer.notifications import NotificationProbe, NotificationSource, Polled
from memq.errors import (
    ClientClosedError,
    CorruptObjectError,
    MemqError,
    ObjectNotFoundError,
    UnknownTopicError,
)
from memq.formats.notification import Notification
from memq.protocol import TopicMetadata
from memq.storage_handlers.base import StorageReader
from memq.storage_handlers.registry import make_reader

__all__ = ["Consumer", "Lag"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
SkipCallback = Callable[[Notification, MemqError], Any]
PartitionsCallback = Callable[[list[tuple[str, int]]], Any]


class Lag(NamedTuple):
    """How far a consumer is behind: notifications (objects) and an estimate of records."""

    notifications: int
    records_estimate: int
    partitions: dict[tuple[str, int], int]


@dataclass(eq=False)
class _Pending:
    tp: TP
    offset: int
    notification: Notification
    start: Start | None
    future: Future[FetchedObject]
    blocks: list[BlockAudit] = field(default_factory=list)  # set once it is current


@dataclass
class _Topic:
    name: str  # MemQ topic
    meta: TopicMetadata
    reader: StorageReader


@dataclass
class _Stats:
    records: int = 0
    objects: int = 0
    bytes: int = 0
    skipped_missing: int = 0
    skipped_corrupt: int = 0
    fetch_seconds: float = 0.0
    record_counts: deque[int] = field(default_factory=lambda: deque(maxlen=100))


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
        cfg = with_local_stack_security(cfg, uses_local_stack=not cfg.bootstrap_list())
        self.config = cfg
        self.bootstrap = resolve_bootstrap(cfg.bootstrap_list())
        self.on_skip = on_skip
        #: Audit records of handed-out blocks (audit.enable; on by default on the local stack).
        self._audit = (
            ClientAudit(cfg, cfg.client_id)
            if cfg.audit_enabled(uses_local_stack=not cfg.bootstrap_list())
            else None
        )
        self._notify_kafka: str | None = None
        self._topics: dict[str, _Topic] = {}  # notification topic -> topic
        self._source: NotificationSource | None = None
        self._probe: NotificationProbe | None = None
        self._pool = ThreadPoolExecutor(cfg.fetch_concurrency, thread_name_prefix="memq-fetch")
        self._queue: deque[_Pending] = deque()
        self._queued_bytes = 0
        self._current: list[Message] = []
        self._current_pos = 0
        self._current_pending: _Pending | None = None
        self._done: dict[TP, int] = {}  # next offset to commit, per partition
        self._committed_sent: dict[TP, int] = {}
        self._starts: dict[tuple[TP, int], Start] = {}  # where to start inside an object
        self._pending_seeks: dict[TP, int] = {}
        self._last_commit = time.monotonic()
        self._user_on_assign: PartitionsCallback | None = None
        self._user_on_revoke: PartitionsCallback | None = None
        self._closed = False
        #: A start rule (seek_* before assignment) applied when partitions get assigned.
        self._reset: Callable[[TP], tuple[int, Start | None]] | None = None
        self.stats = _Stats()

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
        meta = fetch_metadata(
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
            reader = make_reader(t.storage, self.config.storage)
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
            self._source = NotificationSource(conf)
            self._probe = NotificationProbe(conf)
        self._source.subscribe(list(self._topics), self._assigned, self._revoked)

    def _memq(self, parts: list[TP]) -> list[tuple[str, int]]:
        return [(self._topics[t].name, p) for t, p in parts if t in self._topics]

    def _assigned(self, parts: list[TP]) -> dict[TP, int] | None:
        log.info("assigned %s", parts)
        offsets: dict[TP, int] | None = None
        if self._reset is not None:
            offsets = {}
            for tp in parts:
                offset, start = self._reset(tp)
                offsets[tp] = self._done[tp] = offset
                if start is not None:
                    self._starts[(tp, offset)] = start
            self._reset = None
        if self._user_on_assign is not None:
            self._user_on_assign(self._memq(parts))
        return offsets

    def _revoked(self, parts: list[TP]) -> None:
        log.info("revoked %s", parts)
        gone = set(parts)
        if self.config.enable_auto_commit:
            self._commit({tp: o for tp, o in self._done.items() if tp in gone}, asynchronous=False)
        self._drop(gone)
        for tp in gone:
            self._done.pop(tp, None)
            self._committed_sent.pop(tp, None)
        if self._user_on_revoke is not None:
            self._user_on_revoke(self._memq(parts))

    def _drop(self, parts: set[TP]) -> None:
        """Forget queued and in-progress objects of ``parts`` (after revoke or seek)."""
        keep: deque[_Pending] = deque()
        for p in self._queue:
            if p.tp in parts:
                p.future.cancel()
                self._queued_bytes -= p.notification.size
            else:
                keep.append(p)
        self._queue = keep
        if self._current_pending is not None and self._current_pending.tp in parts:
            self._current, self._current_pos, self._current_pending = [], 0, None

    # --- consuming ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")

    def _submit(self, polled: Polled) -> None:
        tp = (polled.topic, polled.partition)
        note = polled.notification
        assert note is not None
        start = self._starts.pop((tp, polled.offset), None)
        reader = self._topics[polled.topic].reader
        fut = self._pool.submit(
            fetch_object, reader, note, polled.partition, polled.offset, start,
            audit=self._audit is not None,
        )  # fmt: skip
        self._queue.append(_Pending(tp, polled.offset, note, start, fut))
        self._queued_bytes += note.size

    def _room(self) -> bool:
        return (
            len(self._queue) < self.config.prefetch_objects
            and self._queued_bytes < self.config.prefetch_bytes
        )

    def _pull(self, timeout: float) -> None:
        """Poll notifications (serving rebalances); prefetch as many objects as allowed."""
        assert self._source is not None
        self._apply_pending_seeks()
        if not self._room():
            self._source.pause()  # keep serving the group without buffering more
            self._source.poll(1, 0)
            return
        self._source.resume()
        for polled in self._source.poll(self.config.prefetch_objects - len(self._queue), timeout):
            if polled.notification is None:
                self._skip_or_raise(polled, polled.error or CorruptObjectError("bad notification"))
                continue
            self._submit(polled)

    def _skip_or_raise(self, polled: Polled | _Pending, err: MemqError) -> None:
        note = polled.notification
        where = f"{polled.tp if isinstance(polled, _Pending) else (polled.topic, polled.partition)}"
        if self.config.corrupt_object_policy == "fail":
            raise err
        kind = "missing" if isinstance(err, ObjectNotFoundError) else "corrupt"
        if kind == "missing":
            self.stats.skipped_missing += 1
        else:
            self.stats.skipped_corrupt += 1
        log.warning("skipping %s object at %s offset %d: %s", kind, where, polled.offset, err)
        if self.on_skip is not None and note is not None:
            self.on_skip(note, err)

    def _object_done(self, pending: _Pending) -> None:
        self._done[pending.tp] = pending.offset + 1
        self.stats.objects += 1
        self.stats.record_counts.append(pending.notification.record_count)
        if self._audit is not None and pending.blocks:
            self._audit_object(pending)

    def _audit_object(self, pending: _Pending) -> None:
        """One audit record per block of ``pending`` that was handed out."""
        assert self._audit is not None
        note = pending.notification
        now = int(time.time() * 1000)
        for b in pending.blocks:
            self._audit.emit(
                {
                    "kind": "consumed",
                    "topic": self._topics[pending.tp[0]].name,
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
        pending.blocks = []

    def audit_stats(self) -> dict[str, int]:
        """Audit records emitted, delivered and dropped (zeros when auditing is off)."""
        if self._audit is None:
            return {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 0}
        return self._audit.stats()

    def _next_object(self, deadline: float | None) -> bool:
        """Make the next object current; False if none became ready before ``deadline``."""
        assert self._source is not None
        while True:
            self._pull(0.0 if self._queue else (self._remaining(deadline, cap=0.5) or 0.0))
            if not self._queue:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            head = self._queue[0]
            try:
                fetched = head.future.result(timeout=self._remaining(deadline, cap=None))
            except TimeoutError:
                return False
            except MemqError as e:
                if isinstance(e, ObjectNotFoundError | CorruptObjectError) and (
                    self.config.corrupt_object_policy == "skip"
                ):
                    self._queue.popleft()
                    self._queued_bytes -= head.notification.size
                    self._skip_or_raise(head, e)
                    self._object_done(head)
                    continue
                # Leave it at the head for the next poll (a transient failure is re-fetched).
                head.future = self._pool.submit(
                    fetch_object,
                    self._topics[head.tp[0]].reader,
                    head.notification,
                    head.tp[1],
                    head.offset,
                    head.start,
                    audit=self._audit is not None,
                )
                raise
            self._queue.popleft()
            self._queued_bytes -= head.notification.size
            self.stats.bytes += fetched.bytes_read
            self.stats.fetch_seconds += fetched.seconds
            if not fetched.messages:  # everything before a seek position or time floor
                self._object_done(head)
                continue
            self._current, self._current_pos, self._current_pending = fetched.messages, 0, head
            head.blocks = fetched.blocks
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
            if self._current_pending is not None:
                cur, pos = self._current, self._current_pos
                take = min(num_messages - len(out), len(cur) - pos)
                out.extend(cur[pos : pos + take])
                self._current_pos = pos + take
                if self._current_pos >= len(cur):
                    self._object_done(self._current_pending)
                    self._current, self._current_pos, self._current_pending = [], 0, None
                continue
            ready = bool(self._queue) and self._queue[0].future.done()
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
        self._maybe_auto_commit()
        return out

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, or None if none arrived within ``timeout`` seconds."""
        msgs = self.consume(1, timeout)
        return msgs[0] if msgs else None

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            yield from self.consume(500, 1.0)

    # --- commits ------------------------------------------------------------------------

    def _commit(self, offsets: dict[TP, int], *, asynchronous: bool) -> dict[TP, int]:
        todo = {tp: o for tp, o in offsets.items() if self._committed_sent.get(tp) != o}
        if todo and self._source is not None:
            self._source.commit(todo, asynchronous=asynchronous)
            self._committed_sent.update(todo)
        return todo

    def _maybe_auto_commit(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        if self.config.enable_auto_commit and time.monotonic() - self._last_commit >= interval:
            self._commit(dict(self._done), asynchronous=True)
            self._last_commit = time.monotonic()

    def commit(self, asynchronous: bool = False) -> dict[tuple[str, int], int]:
        """Commit, per partition, the offset after the last object fully handed out.

        Returns what was committed, as ``{(topic, partition): notification offset}``.
        """
        self._check_open()
        done = self._commit(dict(self._done), asynchronous=asynchronous)
        self._last_commit = time.monotonic()
        return {(self._topics[t].name, p): o for (t, p), o in done.items()}

    def committed(self, timeout: float = 10.0) -> dict[tuple[str, int], int | None]:
        """The group's committed notification offsets for the assigned partitions."""
        assert self._source is not None
        res = self._source.committed(self._source.assignment(), timeout)
        return {(self._topics[t].name, p): o for (t, p), o in res.items()}

    def position(self) -> dict[tuple[str, int], int | None]:
        """Per assigned partition, the notification offset of the next object to finish."""
        assert self._source is not None
        out: dict[tuple[str, int], int | None] = {}
        for tp in self._source.assignment():
            cur = self._current_pending
            pos = cur.offset if cur is not None and cur.tp == tp else self._done.get(tp)
            out[(self._topics[tp[0]].name, tp[1])] = pos
        return out

    def assignment(self) -> list[tuple[str, int]]:
        assert self._source is not None
        return self._memq(self._source.assignment())

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

    def _seek(self, tp: TP, offset: int, start: Start | None) -> None:
        assert self._source is not None
        if tp not in self._source.assignment():
            raise MemqError(
                f"partition {tp[1]} of {self._topics[tp[0]].name!r} is not assigned to this consumer"
            )
        self._drop({tp})
        self._done[tp] = offset
        if start is not None:
            self._starts[(tp, offset)] = start
        self._pending_seeks[tp] = offset
        self._apply_pending_seeks()

    def _apply_pending_seeks(self) -> None:
        assert self._source is not None
        for tp, offset in list(self._pending_seeks.items()):
            try:
                self._source.seek(tp[0], tp[1], offset)
            except Exception as e:  # not fetching yet right after assignment: retry next poll
                log.debug("seek %s to %d deferred: %s", tp, offset, e)
                continue
            del self._pending_seeks[tp]

    def seek(self, message_id: MessageId | str, topic: str | None = None) -> None:
        """Re-read from this record on (its object is range-read from that block)."""
        mid = MessageId.parse(message_id) if isinstance(message_id, str) else message_id
        tp = (self._note_topic(topic), mid.partition)
        self._seek(
            tp, mid.offset, Start(mid.block, mid.record) if (mid.block or mid.record) else None
        )

    def _reset_all(self, rule: Callable[[TP], tuple[int, Start | None]]) -> None:
        """Apply ``rule`` to every assigned partition now, or on the next assignment
        (right after subscribe(), before the group has assigned anything)."""
        if self._source is None:
            raise MemqError("subscribe() to a topic before seeking")
        assigned = self._source.assignment()
        if not assigned:
            self._reset = rule
            return
        for tp in assigned:
            self._seek(tp, *rule(tp))

    def seek_to_beginning(self) -> None:
        """Continue from the oldest object of every (to be) assigned partition."""
        assert self._probe is not None
        probe = self._probe
        self._reset_all(lambda tp: (probe.watermarks(*tp)[0], None))

    def seek_to_end(self) -> None:
        """Skip everything published so far in every (to be) assigned partition."""
        assert self._probe is not None
        probe = self._probe
        self._reset_all(lambda tp: (probe.watermarks(*tp)[1], None))

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Continue, in every assigned partition, from the first record with timestamp >= ts.

        Uses Kafka's offsets_for_times where it is answered sensibly; otherwise (some
        Kafka-protocol brokers always answer 0) binary-searches notification offsets by
        the min/max record timestamps notifications carry. Records older than ts inside
        the first object are skipped, whole blocks by their index without reading them.
        """
        self._reset_all(
            lambda tp: (self._offset_for_time(tp, timestamp_ms), Start(min_timestamp=timestamp_ms))
        )

    def _offset_for_time(self, tp: TP, ts: int) -> int:
        assert self._source is not None and self._probe is not None
        low, high = self._probe.watermarks(*tp)
        hint = self._probe.offsets_for_time(tp[0], tp[1], ts, timeout=10)
        if (
            hint is not None
            and low <= hint <= high
            and self._is_first_at_or_after(tp, hint, ts, low)
        ):
            return hint
        lo, hi = low, high  # first offset whose object reaches ts (max_timestamp >= ts)
        while lo < hi:
            mid = (lo + hi) // 2
            note = self._probe.read(tp[0], tp[1], mid)
            if note is not None and note.max_timestamp < ts:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _is_first_at_or_after(self, tp: TP, offset: int, ts: int, low: int) -> bool:
        """Whether ``offset`` is where ts begins: the object before it ends before ts."""
        assert self._probe is not None
        at = self._probe.read(tp[0], tp[1], offset)
        if at is not None and at.max_timestamp < ts:
            return False
        if offset == low:
            return True
        before = self._probe.read(tp[0], tp[1], offset - 1)
        return before is not None and before.max_timestamp < ts

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
        """Commit what was fully handed out (with auto-commit), leave the group, stop fetching."""
        if self._closed:
            return
        try:
            if self.config.enable_auto_commit and self._source is not None:
                self._commit(dict(self._done), asynchronous=False)
        finally:
            self._closed = True
            for p in self._queue:
                p.future.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)
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
