"""A deterministic harness for ``memq.Consumer``'s state machine: no Kafka, no S3.

* :class:`FakeKafka` holds notification partitions (encoded notifications, or garbage)
  and the group's committed offsets; :class:`FakeMember` is this consumer's membership,
  implementing what the consumer uses of ``NotificationSource``
  (``memq.consumer.notifications.GroupMember``): rebalances are scripted
  (:meth:`FakeMember.assign`, :meth:`~FakeMember.revoke`, :meth:`~FakeMember.lose`) and
  delivered, like librdkafka's, inside the next ``poll``; partitions can also be assigned
  without a group (``assign_partitions``); pause is per partition (the prefetcher's flow
  control and the application's, separately) and a newly assigned partition is not
  paused; a seek right after an assignment is refused until the partition was polled
  once; commits keep their metadata (a record position) unless ``drop_metadata``; they
  can be made to fail, and a commit during ``on_lost`` is refused (the member's
  generation is stale) and counted.
* :class:`MemoryStorage` is a ``StorageReader`` over real batch objects built with
  ``memq.formats`` (:class:`Objects`), with transient failures, missing objects, gates
  (a fetch that waits until released) and delays.
* :class:`Harness` wires them into a real ``Consumer`` (through ``Consumer.connector``),
  drives it, records what it handed out, and checks the invariants: commits never pass
  a record not handed out, every record published is handed out or explicitly skipped.

Record values name their block: ``b"<producer>/<epoch>/<sequence>/<index>"``, so a copy
of a block (same id, another object) carries the same values.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from memq.consumer import Consumer, Message
from memq.consumer.notifications import AssignCallback, PartitionsCallback, Polled
from memq.consumer.offsets import OffsetAndMetadata, decode_position
from memq.errors import MemqFormatError, NotificationError, ObjectNotFoundError, StorageError
from memq.formats import BatchBuilder, Compression, Notification, encode_block, verify_block
from memq.formats.notification import decode_notification, encode_notification
from memq.protocol import ClusterMetadata, TopicMetadata
from memq.security import ClientSecurity
from memq.storage_handlers.base import ObjectInfo, StorageReader

TOPIC = "events"  # the MemQ topic
NOTE_TOPIC = "memq-notify.events"  # its notification topic
BUCKET = "bucket"
TP = tuple[str, int]


def tp(partition: int) -> TP:
    return (NOTE_TOPIC, partition)


# --- objects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    producer_id: int
    epoch: int
    sequence: int
    records: int

    @property
    def values(self) -> list[bytes]:
        return [
            b"%d/%d/%d/%d" % (self.producer_id, self.epoch, self.sequence, i)
            for i in range(self.records)
        ]


@dataclass(frozen=True)
class Stored:
    key: str
    blocks: tuple[Block, ...]
    notification: Notification

    @property
    def values(self) -> list[bytes]:
        return [v for b in self.blocks for v in b.values]


class Objects:
    """Builds batch objects of blocks (the broker's BatchBuilder) and their notifications."""

    def __init__(self) -> None:
        self._n = 0

    def build(self, blocks: list[Block], created_at: int | None = None) -> tuple[Stored, bytes]:
        self._n += 1
        key = f"obj-{self._n:05d}"
        builder = BatchBuilder(1 << 20, max_blocks=64)
        ts = 1_800_000_000_000 + self._n * 1000 if created_at is None else created_at
        for b in blocks:
            data = encode_block(
                [(ts + i, None, v, None) for i, v in enumerate(b.values)],
                producer_id=b.producer_id,
                epoch=b.epoch,
                sequence=b.sequence,
                compression=Compression.NONE,
            )
            builder.append(data, verify_block(data))
        obj = bytes(builder.seal())
        note = Notification(
            topic=TOPIC,
            cluster="harness",
            broker="b0",
            storage="memory",
            bucket=BUCKET,
            key=key,
            size=len(obj),
            block_count=len(blocks),
            record_count=sum(b.records for b in blocks),
            min_timestamp=ts,
            max_timestamp=ts + max(b.records for b in blocks),
            checksum=builder.header_crc,
            batch_id=key,
            created_at=ts,
        )
        return Stored(key, tuple(blocks), note), obj


# --- storage -------------------------------------------------------------------------------


class MemoryStorage(StorageReader):
    """Objects in a dict, with injected failures, gates and delays (thread-safe)."""

    name = "memory"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail_times: dict[str, int] = {}  # transient StorageErrors left, per key
        self.gates: dict[str, threading.Event] = {}  # a read of the key waits for its gate
        self.delays: dict[str, float] = {}  # simulated GET latency, per key
        self._lock = threading.Lock()
        self.active = 0
        self.reads = 0
        self.closed = False
        self.active_at_close = 0
        self.reads_after_close = 0

    def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        with self._lock:
            self.active += 1
            self.reads += 1
            if self.closed:
                self.reads_after_close += 1
        try:
            gate = self.gates.get(key)
            if gate is not None:
                gate.wait(30)
            delay = self.delays.get(key)
            if delay:
                time.sleep(delay)
            with self._lock:
                left = self.fail_times.get(key, 0)
                if left:
                    self.fail_times[key] = left - 1
            if left:
                raise StorageError(f"injected transient failure reading {key}")
            try:
                data = self.objects[key]
            except KeyError:
                raise ObjectNotFoundError(f"no object {key}") from None
            return data[start:end]
        finally:
            with self._lock:
                self.active -= 1

    def list_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        for k in sorted(self.objects):
            if k.startswith(prefix):
                yield ObjectInfo(k, len(self.objects[k]))

    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        return []

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.active_at_close = self.active


# --- Kafka -----------------------------------------------------------------------------------


class FakeKafka:
    """Notification partitions and the group's committed offsets."""

    def __init__(self, partitions: int) -> None:
        self.logs: dict[TP, list[bytes]] = {tp(p): [] for p in range(partitions)}
        self.committed: dict[TP, int] = {}
        self.metadata: dict[TP, str] = {}  # commit metadata (a record position)
        #: (partition, offset, metadata) of every commit.
        self.commit_log: list[tuple[TP, int, str]] = []
        self.drop_metadata = False  # like some Kafka-protocol brokers

    def publish(self, partition: int, raw: bytes) -> int:
        log = self.logs[tp(partition)]
        log.append(raw)
        return len(log) - 1


class FakeMember:
    """This consumer's group membership, driven by a script."""

    def __init__(self, kafka: FakeKafka, reset: str = "earliest") -> None:
        self.kafka = kafka
        self.reset = reset
        self.positions: dict[TP, int] = {}  # assigned partitions and their positions
        self.paused: set[TP] = set()  # flow control (the prefetch queue is full)
        self.held: set[TP] = set()  # paused by the application
        self.manual = False  # assigned without a group
        self.fetching: set[TP] = set()  # polled since assigned (seeks are accepted)
        self.events: deque[tuple[str, list[TP]]] = deque()
        self.fail_commits = 0  # the next n commits fail
        self.commits_while_lost = 0
        self.commit_failures = 0
        self._losing = False
        self._on_assign: AssignCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._on_lost: PartitionsCallback | None = None
        self.closed = False
        self._rr = 0

    # script
    def assign(self, parts: list[TP]) -> None:
        self.events.append(("assign", parts))

    def revoke(self, parts: list[TP]) -> None:
        self.events.append(("revoke", parts))

    def lose(self, parts: list[TP]) -> None:
        self.events.append(("lose", parts))

    def _serve(self) -> None:
        while self.events:
            kind, parts = self.events.popleft()
            if kind == "assign":
                new = [p for p in parts if p not in self.positions]
                if not new:
                    continue
                assert self._on_assign is not None
                offsets = self._on_assign(new) or {}
                for p in new:
                    log_end = len(self.kafka.logs[p])
                    committed = self.kafka.committed.get(p)
                    default = committed if committed is not None else (
                        0 if self.reset == "earliest" else log_end
                    )  # fmt: skip
                    self.positions[p] = offsets.get(p, default)
                    self.fetching.discard(p)
                continue
            mine = [p for p in parts if p in self.positions]
            if not mine:
                continue
            if kind == "revoke":
                assert self._on_revoke is not None
                self._on_revoke(mine)
            else:
                assert self._on_lost is not None
                self._losing = True
                try:
                    self._on_lost(mine)
                finally:
                    self._losing = False
            for p in mine:
                del self.positions[p]
                self.paused.discard(p)
                self.held.discard(p)
                self.fetching.discard(p)

    # GroupMember
    def subscribe(
        self,
        topics: list[str],
        on_assign: AssignCallback,
        on_revoke: PartitionsCallback,
        on_lost: PartitionsCallback,
    ) -> None:
        assert topics == [NOTE_TOPIC]
        assert not self.manual, "subscribe() after assign_partitions()"
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost

    def unsubscribe(self) -> None:
        """Leave the group: the partitions are revoked (the consumer closes this member
        next, which is where librdkafka serves that revocation)."""
        self.revoke(sorted(self.positions))
        self._serve()
        self._on_assign = self._on_revoke = self._on_lost = None

    def assign_partitions(self, offsets: dict[TP, int]) -> None:
        assert self._on_assign is None, "assign_partitions() while subscribed"
        self.manual = True
        self.positions = {}
        self.fetching.clear()
        self.paused.clear()
        self.held &= set(offsets)
        for p, o in offsets.items():
            end = len(self.kafka.logs[p])
            self.positions[p] = {-2: 0, -1: end}.get(o, o)

    def unassign(self) -> None:
        self.positions.clear()
        self.paused.clear()
        self.held.clear()
        self.fetching.clear()
        self.manual = False

    def poll(self, max_records: int, timeout: float) -> list[Polled]:
        assert not self.closed
        self._serve()
        out: list[Polled] = []
        parts = sorted(self.positions)
        while len(out) < max_records:
            ready = [
                p
                for p in parts
                if p not in self.paused
                and p not in self.held
                and self.positions[p] < len(self.kafka.logs[p])
            ]
            if not ready:
                break
            p = ready[self._rr % len(ready)]
            self._rr += 1
            off = self.positions[p]
            self.positions[p] = off + 1
            raw = self.kafka.logs[p][off]
            try:
                out.append(Polled(p[0], p[1], off, decode_notification(raw)))
            except MemqFormatError as e:
                out.append(Polled(p[0], p[1], off, None, e))
        self.fetching.update(self.positions)
        if not out and timeout > 0:
            time.sleep(min(timeout, 0.001))
        return out

    def commit(self, offsets: dict[TP, OffsetAndMetadata], *, asynchronous: bool) -> None:
        if self._losing:
            self.commits_while_lost += 1
            raise NotificationError("commit refused: this member's generation is stale")
        if self.fail_commits:
            self.fail_commits -= 1
            self.commit_failures += 1
            raise NotificationError("injected commit failure")
        for p, m in offsets.items():
            meta = "" if self.kafka.drop_metadata else m.metadata
            self.kafka.committed[p] = m.offset
            self.kafka.metadata[p] = meta
            self.kafka.commit_log.append((p, m.offset, meta))

    def committed(self, parts: list[TP], timeout: float) -> dict[TP, OffsetAndMetadata | None]:
        return {
            p: OffsetAndMetadata(self.kafka.committed[p], self.kafka.metadata.get(p, ""))
            if p in self.kafka.committed
            else None
            for p in parts
        }

    def assignment(self) -> list[TP]:
        return sorted(self.positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        p = (topic, partition)
        if p not in self.positions or p not in self.fetching:
            raise RuntimeError(f"Erroneous state: {p} is not being fetched")
        self.positions[p] = offset

    def pause(self) -> None:
        self.paused.update(self.positions)

    def resume(self) -> None:
        self.paused.clear()

    def pause_partitions(self, parts: list[TP]) -> None:
        self.held.update(parts)

    def resume_partitions(self, parts: list[TP]) -> None:
        self.held.difference_update(parts)

    def high_watermarks(self) -> dict[TP, int]:
        return {p: len(self.kafka.logs[p]) for p in list(self.positions)}

    def close(self) -> None:
        """Closing a subscribed member serves the revocation of its partitions first, as
        librdkafka's consumer close does (its on_revoke runs inside close())."""
        if self._on_revoke is not None and not self.closed:
            self.revoke(sorted(self.positions))
            self._serve()
        self.closed = True


class FakeProbe:
    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka

    def read(self, topic: str, partition: int, offset: int) -> Notification | None:
        log = self.kafka.logs[(topic, partition)]
        return decode_notification(log[offset]) if offset < len(log) else None

    def scan(
        self, topic: str, partition: int, start: int, stop: int
    ) -> Iterator[tuple[int, Notification]]:
        for off in range(start, min(stop, len(self.kafka.logs[(topic, partition)]))):
            note = self.read(topic, partition, off)
            assert note is not None
            yield off, note

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, len(self.kafka.logs[(topic, partition)])

    def offsets_for_time(self, topic: str, partition: int, ts: int, timeout: float) -> int | None:
        return None

    def close(self) -> None:
        pass


class FakeConnector:
    """``Consumer.connector`` over the fakes."""

    def __init__(
        self, kafka: FakeKafka, storage: MemoryStorage, retention_ms: int | None = None
    ) -> None:
        self.kafka = kafka
        self.storage = storage
        self.retention_ms = retention_ms
        self.members: list[FakeMember] = []

    def metadata(
        self, bootstrap: list[str], topics: list[str], *, timeout: float, security: ClientSecurity
    ) -> ClusterMetadata:
        assert topics == [TOPIC]
        return ClusterMetadata(
            cluster="harness",
            broker="b0",
            topics={
                TOPIC: TopicMetadata(
                    name=TOPIC,
                    storage={"type": "memory"},
                    notification={
                        "topic": NOTE_TOPIC,
                        "bootstrap_servers": "fake:9092",
                        "partitions": len(self.kafka.logs),
                    },
                    retention_ms=self.retention_ms,
                )
            },
        )

    def reader(self, storage: Mapping[str, Any], overrides: Mapping[str, Any]) -> StorageReader:
        return self.storage

    def member(self, conf: dict[str, Any]) -> FakeMember:
        self.members.append(FakeMember(self.kafka, reset=str(conf["auto.offset.reset"])))
        return self.members[-1]

    def probe(self, conf: dict[str, Any]) -> FakeProbe:
        return FakeProbe(self.kafka)


# --- the harness -----------------------------------------------------------------------------


class AuditSpy:
    """Stands in for the consumer's ClientAudit: records what it would emit."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def emit(self, fields: dict[str, Any], kafka_bootstrap: str | None) -> None:
        self.records.append(fields)

    def stats(self) -> dict[str, int]:
        return {"audit_emitted": len(self.records), "audit_delivered": 0, "audit_dropped": 0}

    def close(self, timeout: float = 5.0) -> None:
        pass


#: Settings that make the harness fast (tiny backoffs) and strict.
FAST = {
    "bootstrap.servers": "harness:9092",
    "group.id": "g",
    "auto.offset.reset": "earliest",
    "retry.backoff.ms": 1,
    "retry.backoff.max.ms": 5,
    "fetch.retry.timeout.ms": 5000,
    "close.timeout.ms": 5000,
}


@dataclass
class Harness:
    """A real Consumer over the fakes, plus what it did."""

    partitions: int = 2
    config: dict[str, Any] = field(default_factory=dict)
    audit: bool = False
    #: The topic's retention.ms (None: forever).
    retention_ms: int | None = None
    #: Join the group at once (else: call ``consumer.subscribe``/``assign`` yourself).
    subscribe: bool = True

    def __post_init__(self) -> None:
        self.kafka = FakeKafka(self.partitions)
        self.storage = MemoryStorage()
        self.objects = Objects()
        self.stored: dict[tuple[TP, int], Stored] = {}  # what each notification points at
        self.garbage: set[tuple[TP, int]] = set()
        self.delivered: list[Message] = []
        self.others: set[bytes] = set()  # handed out by other members (of lost partitions)
        self.skipped_keys: list[str] = []
        self.errors: list[Exception] = []
        self._seq: Counter[int] = Counter()
        self._checked = 0
        conf = {**FAST, **self.config}
        if self.audit:
            conf["audit.enable"] = True
        self.consumer = Consumer(conf, on_skip=lambda n, e: self.skipped_keys.append(n.key))
        self.spy: AuditSpy | None = None
        if self.audit:
            self.spy = AuditSpy()
            self.consumer._audit = self.spy  # type: ignore[assignment]
        self.connector = FakeConnector(self.kafka, self.storage, self.retention_ms)
        self.consumer.connector = self.connector
        if self.subscribe:
            self.consumer.subscribe(TOPIC)

    @property
    def member(self) -> FakeMember:
        """The consumer's (latest) Kafka consumer."""
        return self.connector.members[-1]

    # publishing
    def block(self, producer_id: int = 1, records: int = 3, epoch: int = 0) -> Block:
        """The next block of ``producer_id``."""
        seq = self._seq[producer_id]
        self._seq[producer_id] += 1
        return Block(producer_id, epoch, seq, records)

    def publish(
        self, partition: int, blocks: list[Block] | None = None, created_at: int | None = None
    ) -> Stored:
        stored, data = self.objects.build(blocks or [self.block()], created_at)
        self.storage.objects[stored.key] = data
        off = self.kafka.publish(partition, encode_notification(stored.notification))
        self.stored[(tp(partition), off)] = stored
        return stored

    def republish(self, partition: int, stored: Stored) -> None:
        """The same notification again (a notification published twice)."""
        off = self.kafka.publish(partition, encode_notification(stored.notification))
        self.stored[(tp(partition), off)] = stored

    def publish_garbage(self, partition: int) -> None:
        off = self.kafka.publish(partition, b'{"format_version": 1, "not": "a notification"}')
        self.garbage.add((tp(partition), off))

    # driving
    def assign(self, *partitions: int) -> None:
        self.member.assign([tp(p) for p in partitions])

    def consume(self, n: int = 1000, timeout: float = 0.05) -> list[Message]:
        try:
            got = self.consumer.consume(n, timeout)
        except Exception as e:
            self.errors.append(e)
            raise
        self.delivered.extend(got)
        return got

    def consume_until(self, count: int, timeout: float = 10.0) -> list[Message]:
        """Consume until ``count`` more records were handed out (or fail)."""
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"only {len(out)} of {count} records came"
            out += self.consume(count - len(out))
        return out

    def idle(self) -> bool:
        """Nothing left to hand out: every assigned partition read to its end, no queue."""
        c = self.consumer
        p = c._prefetch
        return (
            p.current is None
            and not p.queue
            and not p.backlog
            and all(pos >= len(self.kafka.logs[t]) for t, pos in self.member.positions.items())
        )

    def drain(self, timeout: float = 20.0) -> None:
        """Assign every partition and consume until nothing is left (errors are recorded)."""
        self.assign(*range(self.partitions))
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 2:
            assert time.monotonic() < deadline, "the consumer did not drain"
            try:
                got = self.consume(1000, 0.02)
            except Exception:  # recorded; raising means the records are still there
                got = []
            quiet = quiet + 1 if not got and self.idle() else 0

    # invariants
    def handed_out(self) -> set[bytes]:
        return {m.value for m in self.delivered} | self.others

    def check_commits(self) -> None:
        """No commit ever passed a record that was not handed out (nor explicitly skipped)."""
        seen = self.handed_out()
        skipped = set(self.skipped_keys)
        for p, off, meta in self.kafka.commit_log[self._checked :]:
            start = decode_position(meta)
            for o in range(off + (start is not None)):
                stored = self.stored.get((p, o))
                if stored is None or stored.key in skipped:
                    continue  # garbage (skipped or raised) or explicitly skipped
                values = stored.values
                if o == off and start is not None:  # committed inside it: before that record
                    values = before(stored, start.block, start.record)
                missing = [v for v in values if v not in seen]
                assert not missing, (
                    f"commit {p}@{off}:{meta} passes {stored.key}@{o}: {missing[:3]}"
                )
        self._checked = len(self.kafka.commit_log)

    def committed_records(self) -> set[bytes]:
        """The records the group's commits cover (everything before them)."""
        out: set[bytes] = set()
        for p, off in self.kafka.committed.items():
            start = decode_position(self.kafka.metadata.get(p, ""))
            for o in range(off + (start is not None)):
                stored = self.stored.get((p, o))
                if stored is not None:
                    out.update(
                        before(stored, start.block, start.record)
                        if o == off and start is not None
                        else stored.values
                    )
        return out

    def check_at_least_once(self) -> None:
        """Every record published was handed out, unless its object was explicitly skipped."""
        seen = self.handed_out()
        skipped = set(self.skipped_keys)
        for (p, o), stored in self.stored.items():
            if stored.key in skipped:
                continue
            missing = [v for v in stored.values if v not in seen]
            assert not missing, f"{stored.key} at {p}@{o} never handed out: {missing[:3]}"

    def duplicates(self) -> dict[bytes, int]:
        return {v: n for v, n in Counter(m.value for m in self.delivered).items() if n > 1}

    def close(self) -> None:
        for gate in self.storage.gates.values():
            gate.set()
        for member in self.connector.members:
            member.fail_commits = 0  # (the final commit is not what a test checks)
        self.consumer.close()


def before(stored: Stored, block: int, record: int) -> list[bytes]:
    """The values of ``stored`` before record ``record`` of block ``block``."""
    out: list[bytes] = []
    for i, b in enumerate(stored.blocks):
        if i < block:
            out += b.values
        elif i == block:
            out += b.values[:record]
    return out
