"""The Kafka side of a consumer: group membership, notification polling, commits, probes.

Notifications are small JSON records on the topic's notification topic; its partitions
are the topic's read partitions, and the consumer group is a Kafka consumer group on
it. Offsets are committed explicitly, and only for objects fully handed to the
application. A separate, group-less probe consumer reads notifications by offset
and asks Kafka for watermarks and offsets for times: for seeks, lag and the
operator's group commands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from memq.consumer.offsets import OffsetAndMetadata
from memq.errors import MemqError, MemqFormatError, NotificationError
from memq.formats.notification import Notification, decode_notification

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "GroupMember",
    "NotificationProbe",
    "NotificationSource",
    "Polled",
]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
PartitionsCallback = Callable[[list[TP]], None]
#: Called on assignment; may return start offsets for some of the partitions.
AssignCallback = Callable[[list[TP]], dict[TP, int] | None]


@dataclass(frozen=True, slots=True)
class Polled:
    topic: str  # notification topic
    partition: int
    offset: int
    notification: Notification | None  # None when the record did not decode
    error: MemqFormatError | None = None


class GroupMember(Protocol):
    """What the consumer uses of its Kafka consumer (:class:`NotificationSource`).

    It either joins the group (:meth:`subscribe`) or reads partitions it was given
    (:meth:`assign_partitions`: no group join, no rebalances). Rebalance callbacks run
    inside :meth:`poll`: ``on_assign`` before the new partitions are fetched (its offsets,
    if any, are where they start; the others start at the committed offset),
    ``on_revoke`` while this member still owns the partitions (a commit is still
    accepted), ``on_lost`` when it already may not (another member may own them: never
    commit then). :meth:`pause` stops fetching every partition assigned now (calling it
    again covers partitions assigned since) and :meth:`resume` undoes it: the prefetch
    queue's flow control. :meth:`pause_partitions` pauses partitions for the application:
    they stay paused through :meth:`resume` until :meth:`resume_partitions` (or until
    they are revoked, as in Kafka).
    """

    def subscribe(
        self,
        topics: list[str],
        on_assign: AssignCallback,
        on_revoke: PartitionsCallback,
        on_lost: PartitionsCallback,
    ) -> None: ...

    def unsubscribe(self) -> None: ...

    def assign_partitions(self, offsets: dict[TP, int]) -> None:
        """Read exactly these partitions from these offsets (``OFFSET_BEGINNING`` /
        ``OFFSET_END`` allowed), replacing any assignment; no group join."""
        ...

    def unassign(self) -> None: ...

    def poll(self, max_records: int, timeout: float) -> list[Polled]: ...

    def commit(self, offsets: dict[TP, OffsetAndMetadata], *, asynchronous: bool) -> None: ...

    def committed(self, parts: list[TP], timeout: float) -> dict[TP, OffsetAndMetadata | None]: ...

    def assignment(self) -> list[TP]: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def pause_partitions(self, parts: list[TP]) -> None: ...

    def resume_partitions(self, parts: list[TP]) -> None: ...

    def high_watermarks(self) -> dict[TP, int]:
        """The last high watermark seen per assigned partition (no request: may be stale;
        safe to call from another thread)."""
        ...

    def close(self) -> None: ...


#: How long the probe's fetches wait for data at the end of a partition (see
#: :class:`NotificationProbe`).
PROBE_FETCH_WAIT_MS = 10

#: Logical start offsets of :meth:`GroupMember.assign_partitions` (Kafka's values).
OFFSET_BEGINNING = -2
OFFSET_END = -1


def _kafka_error(what: str, e: BaseException) -> NotificationError:
    return NotificationError(f"{what}: {e}")


class NotificationSource:
    """A Kafka consumer over one or more notification topics: a group member, or a reader
    of assigned partitions."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self._conf = config
        try:
            self.kafka = Consumer(config, logger=log)
        except Exception as e:
            raise MemqError(f"invalid notification consumer settings: {e}") from e
        self._flow = False  # the prefetch queue is full: every assigned partition paused
        self._held: set[TP] = set()  # paused by the application
        self._paused: set[TP] = set()  # paused in Kafka now
        #: Whether rebalances add and remove partitions (cooperative) instead of replacing
        #: the whole assignment: on_assign then gets only the added ones.
        self._incremental = (
            "cooperative" in str(config.get("partition.assignment.strategy", ""))
            or str(config.get("group.protocol", "")).lower() == "consumer"
        )

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def subscribe(
        self,
        topics: list[str],
        on_assign: AssignCallback,
        on_revoke: PartitionsCallback,
        on_lost: PartitionsCallback,
    ) -> None:
        def assigned(c: Any, parts: list[Any]) -> None:
            offsets = on_assign([(p.topic, p.partition) for p in parts])
            if offsets:
                for p in parts:
                    if (p.topic, p.partition) in offsets:
                        p.offset = offsets[(p.topic, p.partition)]
                # Start where asked instead of the committed offsets.
                if self._incremental:
                    c.incremental_assign(parts)
                else:
                    c.assign(parts)

        def gone(callback: PartitionsCallback) -> Callable[[Any, list[Any]], None]:
            def run(_c: Any, parts: list[Any]) -> None:
                tps = [(p.topic, p.partition) for p in parts]
                self._release(tps)
                self._held.difference_update(tps)
                callback(tps)

            return run

        self.kafka.subscribe(
            topics, on_assign=assigned, on_revoke=gone(on_revoke), on_lost=gone(on_lost)
        )

    def unsubscribe(self) -> None:
        try:
            self.kafka.unsubscribe()
        except Exception as e:
            raise _kafka_error("leaving the group failed", e) from e
        self._paused.clear()
        self._held.clear()

    def _release(self, parts: list[TP]) -> None:
        """Resume ``parts`` in Kafka (still assigned) before they leave the assignment:
        librdkafka keeps a partition paused through its revocation, so one assigned back
        later (or assigned again) would never be fetched. A new assignment starts
        unpaused, as in Kafka's Java client."""
        from confluent_kafka import TopicPartition

        stale = [tp for tp in parts if tp in self._paused]
        self._paused.difference_update(parts)
        if stale:
            try:
                self.kafka.resume([TopicPartition(t, p) for t, p in stale])
            except Exception as e:  # not assigned any more: nothing of it is kept
                log.debug("resuming %s before it leaves the assignment: %s", stale, e)

    def assign_partitions(self, offsets: dict[TP, int]) -> None:
        self._release(sorted(self._paused))
        try:
            self.kafka.assign(self._tps(offsets))
        except Exception as e:
            raise _kafka_error("assigning notification partitions failed", e) from e
        self._held.intersection_update(offsets)
        self._sync()

    def unassign(self) -> None:
        self._release(sorted(self._paused))
        try:
            self.kafka.unassign()
        except Exception as e:
            raise _kafka_error("unassigning notification partitions failed", e) from e
        self._held.clear()

    def poll(self, max_records: int, timeout: float) -> list[Polled]:
        # librdkafka's consume(n, timeout) waits until it has n messages or the timeout
        # passed: a notification that arrived alone would wait out the timeout (measured:
        # +130 ms p50 end-to-end at batch.ms 100). poll() returns the first at once; the
        # rest already queued are taken without waiting.
        try:
            first = self.kafka.poll(timeout)
            msgs = [] if first is None else [first]
            if first is not None and max_records > 1:
                msgs.extend(self.kafka.consume(num_messages=max_records - 1, timeout=0))
        except Exception as e:
            raise _kafka_error("polling notifications failed", e) from e
        out: list[Polled] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == -191:  # _PARTITION_EOF: informational
                    continue
                if err.fatal():
                    raise NotificationError(f"notification consumer failed: {err.str()}")
                log.warning("notification consumer: %s", err.str())
                continue
            topic, part, off = str(m.topic()), int(m.partition() or 0), int(m.offset() or 0)
            try:
                out.append(Polled(topic, part, off, decode_notification(m.value() or b"")))
            except MemqFormatError as e:
                out.append(Polled(topic, part, off, None, e))
        return out

    def _tps(self, offsets: dict[TP, int]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

    def commit(self, offsets: dict[TP, OffsetAndMetadata], *, asynchronous: bool) -> None:
        from confluent_kafka import TopicPartition

        if not offsets:
            return
        tps = [
            TopicPartition(t, p, m.offset, m.metadata)
            if m.metadata
            else TopicPartition(t, p, m.offset)
            for (t, p), m in offsets.items()
        ]
        try:
            if asynchronous:
                self.kafka.commit(offsets=tps, asynchronous=True)
            else:
                self.kafka.commit(offsets=tps, asynchronous=False)
        except Exception as e:
            raise _kafka_error("committing notification offsets failed", e) from e

    def committed(self, parts: list[TP], timeout: float) -> dict[TP, OffsetAndMetadata | None]:
        try:
            res = self.kafka.committed(self._tps(dict.fromkeys(parts, -1001)), timeout=timeout)
        except Exception as e:
            raise _kafka_error("reading committed offsets failed", e) from e
        return {
            (r.topic, r.partition): (
                OffsetAndMetadata(r.offset, r.metadata or "") if r.offset >= 0 else None
            )
            for r in res
        }

    def assignment(self) -> list[TP]:
        return [(p.topic, p.partition) for p in self.kafka.assignment()]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.kafka.seek(TopicPartition(topic, partition, offset))

    def _sync(self) -> None:
        """Pause and resume in Kafka so exactly the partitions that should be are paused."""
        from confluent_kafka import TopicPartition

        assigned = self.assignment()
        want = set(assigned) if self._flow else self._held.intersection(assigned)
        stop = [tp for tp in assigned if tp in want and tp not in self._paused]
        go = [tp for tp in assigned if tp in self._paused and tp not in want]
        if stop:
            self.kafka.pause([TopicPartition(t, p) for t, p in stop])
        if go:
            self.kafka.resume([TopicPartition(t, p) for t, p in go])
        self._paused = want

    def pause(self) -> None:
        """Stop fetching every assigned partition (also those assigned since the last call)."""
        self._flow = True
        self._sync()

    def resume(self) -> None:
        """Undo :meth:`pause` (partitions the application paused stay paused)."""
        if self._flow or not self._paused <= self._held:
            self._flow = False
            self._sync()

    def pause_partitions(self, parts: list[TP]) -> None:
        self._held.update(parts)
        self._sync()

    def resume_partitions(self, parts: list[TP]) -> None:
        self._held.difference_update(parts)
        self._sync()

    def high_watermarks(self) -> dict[TP, int]:
        from confluent_kafka import TopicPartition

        out: dict[TP, int] = {}
        for t, p in self.assignment():
            try:
                _, high = self.kafka.get_watermark_offsets(TopicPartition(t, p), cached=True)
            except Exception:  # not known yet
                continue
            if high is not None and high >= 0:
                out[(t, p)] = int(high)
        return out

    def close(self) -> None:
        try:
            self.kafka.close()
        except Exception as e:  # closing twice or after a fatal error
            log.debug("closing the notification consumer: %s", e)


class NotificationProbe:
    """Reads single notifications by offset, outside the group (no commits, no rebalances).

    It only reads notifications that are already there, so its fetches wait at most
    :data:`PROBE_FETCH_WAIT_MS` for data, and it stops fetching after each read: Kafka
    answers one request per connection at a time, and a fetch parked for the usual
    ``fetch.wait.max.ms`` at the end of a partition held up the probe's next request
    (a watermark, an offset for a time, the next read) by that long.
    """

    def __init__(self, config: dict[str, Any], timeout: float = 10.0) -> None:
        from confluent_kafka import Consumer

        conf = {k: v for k, v in config.items() if not k.startswith(("group.", "enable.auto"))}
        self.kafka = Consumer(
            {
                **conf,
                "group.id": "memq-probe",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": PROBE_FETCH_WAIT_MS,
            },
            logger=log,
        )
        self.timeout = timeout

    def _stop(self) -> None:
        """Stop fetching (the next request on the connection is not queued behind one)."""
        try:
            self.kafka.unassign()
        except Exception as e:  # closed meanwhile
            log.debug("probe: unassign failed: %s", e)

    def read(self, topic: str, partition: int, offset: int) -> Notification | None:
        """The notification at ``offset``, or None past the end of the partition."""
        from confluent_kafka import TopicPartition

        self.kafka.assign([TopicPartition(topic, partition, offset)])
        try:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                m = self.kafka.poll(0.5)
                if m is None:
                    continue
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # end of partition
                        return None
                    raise NotificationError(
                        f"reading notification {topic}[{partition}]@{offset}: {err.str()}"
                    )
                return decode_notification(m.value() or b"")
        finally:
            self._stop()
        raise NotificationError(f"reading notification {topic}[{partition}]@{offset} timed out")

    def scan(
        self, topic: str, partition: int, start: int, stop: int
    ) -> Iterator[tuple[int, Notification]]:
        """The notifications of offsets ``start .. stop - 1``, in order (stops early at the
        partition's end)."""
        from confluent_kafka import TopicPartition

        self.kafka.assign([TopicPartition(topic, partition, start)])
        try:
            at, deadline = start, time.monotonic() + self.timeout
            while at < stop:
                if time.monotonic() > deadline:
                    raise NotificationError(f"reading {topic}[{partition}]@{at} timed out")
                # consume() returns once it has that many or its timeout passed, not at the
                # end of the partition: a short timeout, and the loop, keep a scan that
                # reaches the end from waiting it out.
                for m in self.kafka.consume(min(500, stop - at), 0.05):
                    err = m.error()
                    if err is not None:
                        if err.code() == -191:  # end of partition
                            return
                        raise NotificationError(
                            f"reading notification {topic}[{partition}]@{at}: {err.str()}"
                        )
                    off = int(m.offset() or 0)
                    if off >= stop:
                        return
                    at, deadline = off + 1, time.monotonic() + self.timeout
                    yield off, decode_notification(m.value() or b"")
        finally:
            self._stop()

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high) offsets as Kafka reports them now (not cached)."""
        from confluent_kafka import TopicPartition

        try:
            low, high = self.kafka.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self.timeout, cached=False
            )
        except Exception as e:
            raise NotificationError(
                f"reading the offsets of notification partition {topic}[{partition}]: {e}"
            ) from e
        return int(low), int(high)

    def offsets_for_time(self, topic: str, partition: int, ts: int, timeout: float) -> int | None:
        """Kafka's first offset of the partition published at or after ``ts`` (the
        notifications' Kafka timestamps); ``OFFSET_END`` (-1) when none is; None when
        Kafka did not answer."""
        from confluent_kafka import TopicPartition

        try:
            (res,) = self.kafka.offsets_for_times(
                [TopicPartition(topic, partition, ts)], timeout=timeout
            )
        except Exception as e:
            log.info("offsets_for_times on %s[%d] not answered: %s", topic, partition, e)
            return None
        if res.error is not None:
            log.info("offsets_for_times on %s[%d] failed: %s", topic, partition, res.error)
            return None
        return int(res.offset) if res.offset >= 0 else OFFSET_END

    def close(self) -> None:
        self.kafka.close()
