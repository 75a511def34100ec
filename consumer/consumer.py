"""``memq.Consumer``: read a topic's records straight from storage, at least once, in groups
or by partition.

It reads the topic's notifications from Kafka as a member of a consumer group
(:meth:`Consumer.subscribe`) or from the partitions it is given (:meth:`Consumer.assign`:
no group), fetches the objects they point at from S3 (or the filesystem) with a prefetch
pool, verifies them, and hands their records to the application in object order.
Offsets are notification offsets; a commit never passes a record not handed out (an
object in progress is committed at its next record, in the commit metadata), so a crash
re-delivers at most what was not committed, never loses a record. Copies of blocks
already handed out are dropped (``dedup.enable``; docs/guarantees.md says exactly what
is guaranteed under which failure).

Use it from one thread (like a Kafka consumer); the fetch pool works in the background.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from memq.audit.client import ClientAudit
from memq.client.bootstrap import resolve_client
from memq.client.stats import StatsCollector, split_stats_cb, stats_ticker
from memq.config.base import check_timeout
from memq.consumer.auditing import audit_object
from memq.consumer.config import ConsumerConfig
from memq.consumer.connect import Connector, KafkaConnector
from memq.consumer.delivery import Delivery
from memq.consumer.fetcher import Start
from memq.consumer.handout import Current, Deduplicator
from memq.consumer.membership import Membership, Where, offset_of
from memq.consumer.message import Chunk, Message, MessageId, RecordBatch
from memq.consumer.notifications import GroupMember
from memq.consumer.offsets import GroupOffsets
from memq.consumer.pending import Pending
from memq.consumer.positions import Lag, gauges, measure_lag, oldest_retained
from memq.consumer.prefetch import Prefetcher
from memq.consumer.seeking import Probe, Seeker, first_offset_at
from memq.consumer.session import LOCAL_GROUP_SESSION, local_group_session
from memq.consumer.stats import ConsumerStats, stats_dict
from memq.consumer.topics import Topics
from memq.errors import ClientClosedError, ConfigError, InvalidPositionError, MemqError
from memq.formats.notification import Notification

__all__ = ["LOCAL_GROUP_SESSION", "Consumer", "Lag", "local_group_session"]

TP = tuple[str, int]  # (notification topic, partition)
V = TypeVar("V")
SkipCallback = Callable[[Notification, MemqError], Any]
PartitionsCallback = Callable[[list[tuple[str, int]]], Any]


class Consumer:
    """Consume MemQ topics.

    >>> c = Consumer({"group.id": "g", "auto.offset.reset": "earliest"})  # doctest: +SKIP
    >>> c.subscribe("events")                                           # doctest: +SKIP
    >>> for msg in c:                                                   # doctest: +SKIP
    ...     handle(msg.value)

    Without a group: ``Consumer({...}).assign([("events", 0, 1234)])`` reads partition 0
    from notification offset 1234 (no group join; commits only with a ``group.id``).
    ``stats_cb`` (a keyword, or a key beside the settings) with ``statistics.interval.ms``
    receives :meth:`stats_dict` periodically.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | ConsumerConfig | None = None,
        /,
        on_skip: SkipCallback | None = None,
        **kwargs: Any,
    ) -> None:
        config, stats_cb = split_stats_cb(config, kwargs)
        if isinstance(config, ConsumerConfig):
            cfg = config.model_copy(update=kwargs) if kwargs else config
        else:
            cfg = ConsumerConfig.from_mapping(config, **kwargs)
        cfg, endpoints = resolve_client(cfg, cfg.bootstrap_list())
        if endpoints.local:  # given bootstrap.servers or not: a short session (session.py)
            cfg = local_group_session(cfg)
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
        self._resolved = Topics(cfg, self.bootstrap, self._storage, lambda: self.connector)
        self._topics = self._resolved.by_note  # notification topic -> topic
        self.stats = ConsumerStats()
        self._offsets = GroupOffsets(
            auto_commit=cfg.enable_auto_commit and cfg.group_id is not None,
            auto_commit_interval=cfg.auto_commit_interval_ms / 1000,
            on_commit_error=self._commit_failed,
            partial=self._partial,
            timeout=cfg.metadata_timeout_ms / 1000,
        )
        self._dedup = Deduplicator.from_config(cfg, self.stats) if cfg.dedup_enable else None
        self._seeker = Seeker(
            restart=self._offsets.restart,
            drop=self._drop,
            name=lambda t: self._topics[t].name,
            beginning=self._beginning,
        )
        self._prefetch = Prefetcher(
            cfg,
            reader=lambda t: self._topics[t].reader,
            start=self._seeker.take_start,
            on_skip=self._skipped,
            stats=self.stats,
            audit=self._audit is not None,
            dedup=self._dedup,
            retention=lambda t: self._topics[t].meta.retention_ms,
        )
        self._delivery = Delivery(
            self._prefetch, self._seeker, lambda: self._source, self._object_done
        )
        self._members = Membership(
            cfg,
            self._resolved,
            lambda: self.connector,
            offsets=self._offsets,
            seeker=self._seeker,
            prefetch=self._prefetch,
            on_commit_failed=self._commit_failed,
        )
        self._closed = False
        self._ticker = stats_ticker(
            self.stats_dict, stats_cb, cfg.statistics_interval_ms, "memq-consumer-stats"
        )

    # --- subscription and assignment -------------------------------------------------------

    @property
    def _source(self) -> GroupMember | None:
        return self._members.source

    @property
    def _probe(self) -> Probe | None:
        return self._members.probe

    def _resolve(self, names: list[str]) -> list[str]:
        self._check_open()
        return self._members.resolve(names)

    def subscribe(
        self,
        topic: str | list[str],
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Join the group for ``topic`` (or several); callbacks get ``[(topic, partition)]``.
        Needs a ``group.id`` (:meth:`assign` reads partitions without one)."""
        self._check_open()
        names = (
            [topic]
            if isinstance(topic, str)
            else list(topic)
            if isinstance(topic, Iterable)
            else []
        )
        if not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"subscribe needs a topic name or a list of them, got {topic!r}")
        self._members.subscribe(names, on_assign, on_revoke)

    def assign(self, partitions: Iterable[tuple[str, int] | tuple[str, int, Where]]) -> None:
        """Read exactly these partitions, without joining a group (no rebalances).

        Each entry is ``(topic, partition)`` or ``(topic, partition, where)``: ``where`` is
        a notification offset, a :class:`MessageId` (or its text ``"p:o:b:r"``: from that
        very record), or None: the group's committed position with a ``group.id`` (at the
        very record when it was committed inside an object), else ``auto.offset.reset``.
        Replaces a previous assignment (its progress is committed first with auto-commit).
        An explicit position is a seek: what is read again is handed out again (dedup
        forgets). Commits (automatic or :meth:`commit`) need a ``group.id``.
        """
        self._check_open()
        entries: list[tuple[str, int, Where]] = []
        for e in partitions:
            part = _partition_of(e)
            if part is None:
                raise ConfigError(
                    "assign needs [(topic, partition)] or [(topic, partition, where)] with "
                    f"a str topic and an int partition, got {e!r}"
                )
            where: Where = e[2] if len(e) > 2 else None
            if any(t == e[0] and p == part for t, p, _ in entries):  # (the last one won)
                raise ConfigError(f"assign names partition {part} of {e[0]!r} twice")
            entries.append((e[0], part, where))
        for topic, part, where in entries:
            if where is not None and not isinstance(where, bool):
                offset = where if isinstance(where, int) else offset_of(where)
                if offset is not None:
                    self._check_not_past_the_end(topic, part, offset)
        self._members.assign(entries)
        if any(where is not None for _, _, where in entries):
            self._reread()

    def unsubscribe(self) -> None:
        """Leave the group, or drop the assigned partitions (with auto-commit, what was
        handed out is committed first). subscribe() or assign() may follow."""
        self._check_open()
        self._members.unsubscribe()

    def _memq(self, parts: list[TP]) -> list[tuple[str, int]]:
        return self._members.names(parts)

    def _named(self, offsets: Mapping[TP, V]) -> dict[tuple[str, int], V]:
        return {(self._topics[t].name, p): o for (t, p), o in offsets.items()}

    def _commit_failed(self, _e: Exception) -> None:
        self.stats.commit_failures += 1

    def _drop(self, parts: set[TP]) -> None:
        """Forget queued and in-progress objects of ``parts`` (after a seek)."""
        self._prefetch.drop(parts)

    # --- consuming ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")

    def _partial(self) -> dict[TP, tuple[int, int, int]]:
        """Per partition with an object in progress: its offset and next record's position."""
        return self._delivery.partial()

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
                audit_object(
                    self._audit,
                    pending,
                    note,
                    topic=self._topics[pending.tp[0]].name,
                    group=self.config.group_id,
                    kafka=self._resolved.kafka,
                )

    def audit_stats(self) -> dict[str, int]:
        """Audit records emitted, delivered and dropped (zeros when auditing is off)."""
        if self._audit is None:
            return {"audit_emitted": 0, "audit_delivered": 0, "audit_dropped": 0}
        return self._audit.stats()

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` records, waiting at most ``timeout`` seconds (None: forever).

        A few hundred per call is cheapest: a list of thousands of messages is still
        alive when CPython's cyclic GC runs, which then walks every one of them
        (docs/clients.md); :meth:`consume_batch` builds no object per record.
        """
        if type(num_messages) is not int or num_messages < 1:
            raise ConfigError(f"consume needs num_messages >= 1, got {num_messages!r}")
        self._prefetch.lazy_values = False  # (messages want every value as bytes)
        out: list[Message] = []

        def take(cur: Current, n: int) -> int:
            got = cur.take(n)
            out.extend(got)
            return len(got)

        self._hand_out(num_messages, timeout, take)
        return out

    def consume_batch(self, max_records: int = 10_000, timeout: float | None = None) -> RecordBatch:
        """Up to ``max_records`` records as columns, waiting at most ``timeout`` seconds
        (None: forever): like :meth:`consume` (the same records, order, commits and
        dedup), but no per-record object is built: ``batch.values`` is a list of the
        values; ``batch.messages()`` builds :class:`Message` objects if wanted."""
        if type(max_records) is not int or max_records < 1:
            raise ConfigError(f"consume_batch needs max_records >= 1, got {max_records!r}")
        self._prefetch.lazy_values = True
        chunks: list[Chunk] = []

        def take(cur: Current, n: int) -> int:
            got = cur.take_chunks(n)
            chunks.extend(got)
            return sum(c.length for c in got)

        self._hand_out(max_records, timeout, take)
        return RecordBatch(chunks)

    def _hand_out(
        self, limit: int, timeout: float | None, take: Callable[[Current, int], int]
    ) -> int:
        """Hand out up to ``limit`` records with ``take(current object, at most n)``
        (returns how many it took), waiting at most ``timeout`` seconds for the first."""
        self._check_open()
        check_timeout(timeout)
        if self._members.mode is None:
            raise MemqError("subscribe() to a topic, or assign() partitions, before consuming")
        # Auto-commit covers what earlier calls handed out, never this call's records:
        # asking for more is what says the previous ones were processed (Kafka's Java
        # consumer does the same), so a crash mid-batch hands that batch out again.
        self._offsets.maybe_auto_commit()
        got = self._delivery.hand_out(limit, timeout, take)
        self.stats.records += got
        return got

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, or None if none arrived within ``timeout`` seconds."""
        msgs = self.consume(1, timeout)
        return msgs[0] if msgs else None

    def __iter__(self) -> Iterator[Message]:
        """Records one at a time until :meth:`close`. Each is handed out when it is
        yielded, not before, so a ``commit()``, ``seek()`` or ``pause()`` in the loop, a
        ``break`` and the commit of ``close()`` cover exactly the records the loop saw.
        :meth:`consume` hands out many per call, at less CPU per record."""
        while not self._closed:
            if (msg := self.poll(1.0)) is not None:
                yield msg

    # --- commits ------------------------------------------------------------------------

    def _check_group(self, what: str) -> None:
        if self.config.group_id is None:
            raise ConfigError(f"{what} needs a group.id: this consumer reads without a group")

    def commit(self, *, asynchronous: bool = False) -> dict[tuple[str, int], int]:
        """Commit, per partition, everything handed out: the offset after the last object
        fully handed out or, for an object handed out in part, that object's offset with
        the position of its next record in the commit metadata (a consumer starting from
        that commit continues at that record, where Kafka keeps commit metadata:
        :attr:`precise_commits`).

        Returns the committed notification offset per ``(topic, partition)`` with
        progress (also those unchanged since the last commit, which are not sent again).
        ``asynchronous`` is keyword-only: confluent-kafka's ``commit(msg)`` (commit up to
        that message) is a TypeError here, never a commit of everything handed out.
        """
        self._check_open()
        self._check_group("commit()")
        return self._named(self._offsets.commit(asynchronous=asynchronous))

    @property
    def precise_commits(self) -> bool | None:
        """Whether commits inside an object keep their record position (the notification
        Kafka keeps commit metadata); None until one such commit was read back (the first
        synchronous commit inside an object does). False: a restart reads an object
        committed in the middle again, whole."""
        return self._offsets.metadata_kept

    def committed(
        self, partitions: Iterable[tuple[str, int]] | None = None, timeout: float = 10.0
    ) -> dict[tuple[str, int], int | None]:
        """The group's committed notification offsets for the assigned partitions (only
        ``partitions``, ``[(topic, partition)]`` of them, when given)."""
        self._check_open()
        self._check_group("committed()")
        check_timeout(timeout)
        wanted = None if partitions is None else _topic_partitions(partitions, "committed()")
        got = {tp: m.offset if m is not None else None
               for tp, m in self._offsets.committed(timeout).items()}  # fmt: skip
        named = self._named(got)
        if wanted is None:
            return named
        if missing := [tp for tp in wanted if tp not in named]:
            raise ConfigError(f"committed() reads assigned partitions: {missing} are not")
        return {tp: named[tp] for tp in wanted}

    def _in_progress(self) -> dict[TP, int]:
        return self._delivery.in_progress()

    def position(self) -> dict[tuple[str, int], int | None]:
        """Per assigned partition, the notification offset of the next object to finish."""
        self._check_open()
        return self._named(self._offsets.position(self._in_progress()))

    def assignment(self) -> list[tuple[str, int]]:
        self._check_open()
        if self._source is None:
            return []
        return self._memq(self._offsets.assignment())

    # --- partitions -----------------------------------------------------------------------

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Hand out nothing more of these assigned ``[(topic, partition)]`` until resumed:
        the object in progress and those fetched ahead are kept (not fetched again), and
        no more notifications are read for them. A revoked partition is no longer paused."""
        self._check_open()
        self._members.pause(self._members.assigned(list(partitions)))

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Hand out these paused partitions again, from where they stopped."""
        self._check_open()
        self._members.resume(self._members.assigned(list(partitions)))

    def paused(self) -> list[tuple[str, int]]:
        """The partitions paused by :meth:`pause`."""
        return self._memq(sorted(self._prefetch.paused))

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic`` (of its notification topic), as the brokers report
        them now."""
        self._resolve([topic])
        return list(range(self._resolved.refresh(topic)))

    def offsets_for_times(
        self, partitions: Iterable[tuple[str, int, int]]
    ) -> dict[tuple[str, int], int]:
        """Per ``(topic, partition, timestamp_ms)``: the notification offset of the first
        object reaching that time (its newest record's timestamp >= ts), or the end
        offset when none does yet, so the answer can be given to :meth:`assign` (which
        then reads those objects whole; :meth:`seek_to_time` also skips their older
        records). Found by :func:`~memq.consumer.seeking.first_offset_at` from Kafka's
        offsets_for_times."""
        out: dict[tuple[str, int], int] = {}
        for topic, part, ts in partitions:
            _check_timestamp(ts, "offsets_for_times")
            (note_topic,) = self._resolve([topic])
            self._resolved.check_partition(topic, part)
            assert self._probe is not None
            out[(topic, part)] = first_offset_at(self._probe, note_topic, part, ts)
        return out

    def get_watermark_offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high) notification offsets of a partition, as Kafka reports them now."""
        (note_topic,) = self._resolve([topic])
        self._resolved.check_partition(topic, partition)
        assert self._probe is not None
        return self._probe.watermarks(note_topic, partition)

    # --- seeking ------------------------------------------------------------------------

    def _check_not_past_the_end(self, topic: str, partition: int, offset: int) -> None:
        """An explicit start past a partition's end is an error at the call: Kafka would
        apply auto.offset.reset, and the local Kafka just waits there (records published
        below it meanwhile were then never handed out)."""
        if offset > 0 and offset > (high := self.get_watermark_offsets(topic, partition)[1]):
            raise InvalidPositionError(
                f"offset {offset} is past the end of {topic!r} partition {partition}: its "
                f"next notification offset is {high} (start at an offset up to {high}, or "
                "seek_to_end() to read only what comes next)"
            )

    def _note_topic(self, topic: str | None) -> str:
        self._check_open()
        if topic is None:
            if not self._topics:
                raise MemqError("subscribe() to a topic, or assign() partitions, before seeking")
            if len(self._topics) != 1:
                raise MemqError("several topics are subscribed: name the topic to seek")
            return next(iter(self._topics))
        return self._resolved.note_topic(topic)

    def _beginning(self, tp: TP) -> int:
        """The oldest notification of ``tp`` whose object was not deleted by retention."""
        assert self._probe is not None
        return oldest_retained(self._probe, self._topics[tp[0]], tp)

    def seek(self, message_id: MessageId | str, topic: str | None = None) -> None:
        """Re-read from this record on (its object is range-read from that block)."""
        if not isinstance(message_id, str | MessageId):
            raise TypeError(
                f"seek needs a MessageId or its text 'p:o:b:r', not {type(message_id).__name__}"
            )
        mid = MessageId.parse(message_id) if isinstance(message_id, str) else message_id
        tp = (self._note_topic(topic), mid.partition)
        self._check_not_past_the_end(self._topics[tp[0]].name, mid.partition, mid.offset)
        self._seeker.seek(
            tp, mid.offset, Start(mid.block, mid.record) if (mid.block or mid.record) else None
        )
        self._reread()

    def _reread(self) -> None:
        """After a seek: what is read again is handed out again (dedup forgets)."""
        if self._dedup is not None:
            self._dedup.clear()

    def seek_to_beginning(self) -> None:
        """Continue from the oldest object of every (to be) assigned partition that still
        exists: objects deleted past their topic's retention are stepped over (their
        notifications outlive them by a day)."""
        self._check_open()
        self._seeker.to_beginning()
        self._reread()

    def seek_to_end(self) -> None:
        """Skip everything published so far in every (to be) assigned partition."""
        self._check_open()
        self._seeker.to_end()

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Continue, in every assigned partition, from the first record with timestamp >= ts.

        The first object reaching ts is found from Kafka's offsets_for_times (over the
        notifications' publish times), stepping over objects in flight then and looking
        back for ones stamped ahead (:func:`~memq.consumer.seeking.first_offset_at`).
        Records older than ts inside the first object are skipped, whole blocks by their
        index without reading them.
        """
        self._check_open()
        _check_timestamp(timestamp_ms, "seek_to_time")
        self._seeker.to_time(timestamp_ms)
        self._reread()

    # --- lag and lifecycle -------------------------------------------------------------

    def lag(self) -> Lag:
        """Notifications behind the end of each assigned partition, and records (estimated
        from the record counts of recent notifications)."""
        self._check_open()
        if self._source is None or self._probe is None:
            raise MemqError("subscribe() to a topic, or assign() partitions, first")
        position = self.position()
        committed = self.committed() if self.config.group_id is not None else {}
        return measure_lag(
            self._source.assignment(),
            self._probe.watermarks,
            lambda t: self._topics[t].name,
            position,
            committed,
            self.stats.record_counts,
        )

    # --- statistics -------------------------------------------------------------------

    def stats_dict(self) -> dict[str, Any]:
        """Every counter and gauge as a plain dict (keys in docs/clients.md, "Consumer
        keys"): what ``stats_cb`` and :meth:`prometheus_collector` report."""
        gauge = gauges(
            self._prefetch, self._source, lambda: self._offsets.known_positions(self._in_progress())
        )
        return stats_dict(self.stats, gauge, self.audit_stats())

    def prometheus_collector(self) -> StatsCollector:
        """A Prometheus collector of :meth:`stats_dict` (``memq_consumer_<key>`` gauges):
        ``registry.register(consumer.prometheus_collector())``."""
        return StatsCollector(self.stats_dict, "consumer", self.config.client_id)

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Commit what was handed out (with auto-commit), leave the group, stop fetching.
        Fetches in flight are waited for (up to ``close.timeout.ms``) before the storage
        readers are closed."""
        if self._closed:
            return
        if self._ticker is not None:
            self._ticker.stop()
        try:
            self._offsets.close()  # the final commit, with auto-commit
        finally:
            self._closed = True
            # Leave first: the revocation's commit must see the objects in progress.
            self._members.close()
            self._prefetch.close(self.config.close_timeout_ms / 1000)
            self._resolved.close()
            if self._audit is not None:
                self._audit.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Epoch milliseconds below this (before 1973-03-03) are refused as what they most likely
#: are: epoch *seconds* (``int(time.time())``), which read as milliseconds is January 1970
#: and would silently seek to the oldest data. The CLI and Spark refuse them the same way.
_SECONDS_LIKE = 10**11


def _check_timestamp(ts: int, what: str) -> None:
    if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
        raise ConfigError(f"{what} needs a timestamp in epoch milliseconds >= 0, got {ts!r}")
    if 0 < ts < _SECONDS_LIKE:
        raise ConfigError(
            f"{what}({ts}) looks like epoch seconds, read as milliseconds it is January "
            "1970: give epoch milliseconds, e.g. int(time.time() * 1000) (0: the oldest)"
        )


def _topic_partitions(entries: Any, what: str) -> list[tuple[str, int]]:
    """``[(topic, partition)]``, else a ConfigError (a list was taken as a timeout)."""
    listed = hasattr(entries, "__iter__") and not isinstance(entries, str | bytes | tuple)
    out = list(entries) if listed else []  # (committed(10.0): a timeout given first)
    parts = [_partition_of(e) for e in out]
    if not out or any(p is None or len(e) != 2 for e, p in zip(out, parts, strict=True)):
        raise ConfigError(f"{what} takes [(topic, partition)], got {entries!r}")
    return [(e[0], p) for e, p in zip(out, parts, strict=True) if p is not None]


def _partition_of(entry: Any) -> int | None:
    """The partition of an assign() entry, or None if it is not (topic, partition[, where])."""
    if not isinstance(entry, tuple | list) or not 2 <= len(entry) <= 3:
        return None
    if not isinstance(entry[0], str) or isinstance(entry[1], bool):
        return None
    try:
        return operator.index(entry[1])
    except TypeError:
        return None
