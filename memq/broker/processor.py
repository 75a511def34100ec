"""Topic processor: appends verified blocks into batches, seals, stores, notifies, acks.

One per topic a broker writes. A batch lives in a buffer taken from the broker-wide
:class:`memq.broker.pool.BufferPool` when the batch opens (at most ``ring_size`` per
topic at once) and given back once it is uploaded, so an idle topic holds no batch
memory. A batch is sealed on size, age or block count; sealed batches upload
concurrently in a thread pool (never blocking the event loop), then their notification
is published; only then are ``ack=all`` waiters answered and the buffer returned. When
the pool has no buffer for the topic, writers wait (first come, first served) up to the
throttle timeout and then get a retriable THROTTLED error.

The upload task fails closed: whatever goes wrong in it (a typed storage or
notification error, or an unexpected exception) becomes a typed error for every writer
waiting on the batch, is counted in ``memq_errors_total``, and the batch's block ids
leave the dedup window (a retry is stored anew instead of answered "duplicate").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from memq.aio import LoopInbox
from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool, size_classes
from memq.config import TopicConfig
from memq.errors import (
    BrokerShuttingDownError,
    IdempotencyKeyReusedError,
    MemqError,
    MessageTooLargeError,
    NotificationError,
    NotWriterError,
    StorageError,
    ThrottledError,
)
from memq.formats.batch import BatchBuilder
from memq.formats.block import BlockHeader
from memq.formats.keys import batch_id
from memq.formats.notification import Notification
from memq.storage_handlers.base import StorageWriter, StoredObject

__all__ = ["Batch", "NotificationSink", "TopicProcessor"]

log = logging.getLogger(__name__)

DEDUP_WINDOW = 65536
BlockId = tuple[int, int, int]  # producer id, epoch, sequence


class NotificationSink(Protocol):
    def publish(
        self, topic: str, notification: Notification, *, key: bytes | None = None
    ) -> Future[Any]:
        """Publish ``notification``; ``key`` (keyed batches only) picks a stable partition."""
        ...


@dataclass(eq=False)
class Batch:
    """One open or sealed batch and the futures waiting on it."""

    builder: BatchBuilder
    seq: int
    opened_at: float
    done: asyncio.Future[StoredObject]
    block_ids: list[BlockId] = field(default_factory=list)
    ack1_records: int = 0
    timer: asyncio.TimerHandle | None = None
    #: Holds a keyed block: notified with a Kafka key, after the keyed batch sealed before.
    keyed: bool = False
    #: The upload of the keyed batch sealed just before this one (keyed batches only).
    after: asyncio.Task[None] | None = None


def _typed(e: BaseException, topic: str, batch: str) -> MemqError:
    """The error an upload's waiters get for ``e``."""
    if isinstance(e, MemqError):
        return e
    if isinstance(e, asyncio.CancelledError):
        return BrokerShuttingDownError(
            f"topic {topic!r}: upload of batch {batch} was cancelled (the broker is stopping): "
            "retry on another broker"
        )
    return MemqError(
        f"topic {topic!r}: batch {batch} failed: internal error {type(e).__name__}: {e}"
    )


class TopicProcessor:
    def __init__(
        self,
        config: TopicConfig,
        *,
        cluster: str,
        broker_id: str,
        writer: StorageWriter,
        sink: NotificationSink,
        executor: Executor,
        metrics: BrokerMetrics,
        throttle_timeout: float,
        pool: BufferPool,
    ) -> None:
        self.config = config
        self.topic = config.name
        self.cluster = cluster
        self.broker_id = broker_id
        self.writer = writer
        self.sink = sink
        self.notification_topic = config.notification_topic(cluster)
        self.executor = executor
        self.metrics = metrics
        self.throttle_timeout = throttle_timeout
        self.pool = pool
        #: Block bytes accepted so far (the broker's load meter samples it).
        self.bytes_received = 0
        #: Buffer shapes a batch moves through as it grows (the last: batch.bytes).
        self._classes = size_classes(config.batch.max_bytes, config.batch.max_blocks)
        #: The class the last sealed batch needed: the next batch asks for it first.
        self._last_class: tuple[int, int] | None = None
        self._open: Batch | None = None
        self._seq = 0
        self._uploads: set[asyncio.Task[None]] = set()
        #: Recent block ids: their batch, index in it and fingerprint (see :meth:`append`).
        self._recent: OrderedDict[BlockId, tuple[Batch, int, bytes | None]] = OrderedDict()
        self._closing: type[MemqError] | None = None
        #: The upload of the last keyed batch sealed (the next keyed one is notified after).
        self._last_keyed: asyncio.Task[None] | None = None
        # This topic's metric series, looked up once: labels() takes a lock and hashes the
        # label values on every call (py-spy: ~8% of the event loop at 1,000 topics).
        topic = self.topic
        self._m_bytes_in = metrics.bytes_in.labels(topic)
        self._m_blocks = metrics.blocks.labels(topic)
        self._m_records = metrics.records.labels(topic)
        self._m_buffers = metrics.buffers_in_use.labels(topic)
        self._m_uploads = metrics.uploads_in_flight.labels(topic)
        self._m_batch_bytes = metrics.batch_bytes.labels(topic)
        self._m_notify = metrics.notify_seconds.labels(topic)
        self._m_upload = metrics.upload_seconds.labels(topic, writer.name)
        self._m_sealed: dict[str, Any] = {}
        self._m_buffers.set(0)
        self._m_uploads.set(0)

    @property
    def in_flight(self) -> int:
        return len(self._uploads)

    # --- writes -------------------------------------------------------------------------

    async def append(
        self,
        block: memoryview,
        header: BlockHeader,
        received: float,
        *,
        keyed: bool = False,
        fingerprint: bytes | None = None,
    ) -> tuple[Batch, int, bool]:
        """Copy a verified block into the open batch; returns (batch, block index, duplicate).

        ``keyed`` (the WRITE's keyed flag) makes the batch keyed: see :meth:`_notify_after`.
        ``fingerprint`` (a digest of what the block was made from, HTTP ingest) is kept
        with the block's id: a later block of the same id with another fingerprint is not
        a duplicate but a reused id (IdempotencyKeyReusedError).

        Raises ThrottledError when no buffer frees up in time, or the error the
        processor is closing with.
        """
        if self._closing is not None:
            raise self._closing(f"broker no longer writes topic {self.topic!r}")
        bid = (header.producer_id, header.epoch, header.sequence)
        seen = self._recent.get(bid)
        if (
            seen is not None
        ):  # failed batches are forgotten, so this one is open, uploading or stored
            if fingerprint is not None and seen[2] not in (None, fingerprint):
                raise IdempotencyKeyReusedError(f"block id {bid} was written with other content")
            self.metrics.duplicates.labels(self.topic).inc()
            return seen[0], seen[1], True
        n = len(block)
        deadline = received + self.throttle_timeout
        while True:
            batch = self._open
            if batch is None:
                builder = await self._take_buffer(deadline, self._class_for(n, 1))
                if self._open is not None:  # another writer opened a batch meanwhile
                    self._release(builder)
                    continue
                batch = self._start_batch(builder)
            if not batch.builder.fits(n):
                b = batch.builder
                shape = self._class_for(b.size + n, b.block_count + 1)
                if shape is not None and shape[0] > b.capacity:
                    bigger = self.pool.grow(self.topic, b, shape)
                    if bigger is not None:  # the batch moved up a size class
                        batch.builder = bigger
                        continue
                    self._seal(batch, "memory")  # no room to grow now: upload it as it is
                    continue
                if b.block_count == 0:
                    raise MessageTooLargeError(
                        f"block of {n} bytes does not fit an empty batch of topic {self.topic!r}"
                    )
                self._seal(batch, "size" if shape is None else "count")
                continue
            index = batch.builder.append(block, header)
            batch.keyed = batch.keyed or keyed
            batch.block_ids.append(bid)
            self._remember(bid, batch, index, fingerprint)
            self.bytes_received += n
            self._m_bytes_in.inc(n)
            self._m_blocks.inc()
            self._m_records.inc(header.record_count)
            b = batch.builder
            if b.size >= self.config.batch.max_bytes:
                self._seal(batch, "size")
            elif b.block_count >= self.config.batch.max_blocks:
                self._seal(batch, "count")
            elif keyed and b.size >= self.config.batch.max_bytes // 2:
                # A key lane sends its next block only after this one's ack, and grows it
                # meanwhile (memq.producer): waiting for batch.ms would only stall it.
                self._seal(batch, "keyed")
            return batch, index, False

    def _class_for(self, nbytes: int, blocks: int) -> tuple[int, int] | None:
        """The smallest buffer class holding ``nbytes`` in ``blocks`` blocks (None: none)."""
        for shape in self._classes:
            if shape[0] >= nbytes and shape[1] >= blocks:
                return shape
        return None

    def note_ack1(self, batch: Batch, records: int) -> None:
        batch.ack1_records += records

    def _remember(self, bid: BlockId, batch: Batch, index: int, fp: bytes | None) -> None:
        self._recent[bid] = (batch, index, fp)
        if len(self._recent) > DEDUP_WINDOW:
            self._recent.popitem(last=False)

    async def _take_buffer(self, deadline: float, shape: tuple[int, int] | None) -> BatchBuilder:
        cap, blocks = shape or self._classes[-1]  # a block larger than the batch: refused later
        try:
            builder = await self.pool.acquire(
                self.topic,
                cap,
                blocks,
                self.config.ring_size,
                deadline - time.monotonic(),
                prefer=self._last_class,
            )
        except TimeoutError:
            raise ThrottledError(
                f"topic {self.topic!r}: no free batch buffer in time (the topic holds "
                f"{self.pool.held(self.topic)} of its {self.config.ring_size}, the broker's "
                f"pool has {self.pool.free_bytes} of {self.pool.limit} bytes free): storage "
                "is slower than ingest; retry with backoff"
            ) from None
        self._m_buffers.set(self.pool.held(self.topic))
        return builder

    def _start_batch(self, builder: BatchBuilder) -> Batch:
        loop = asyncio.get_running_loop()
        self._seq += 1
        batch = Batch(builder, self._seq, time.monotonic(), loop.create_future())
        batch.timer = loop.call_later(self.config.batch.ms / 1000, self._seal_if_open, batch, "age")
        self._open = batch
        return batch

    def _seal_if_open(self, batch: Batch, trigger: str) -> None:
        if self._open is batch:
            self._seal(batch, trigger)

    def seal_if_open(self, batch: Batch, trigger: str) -> None:
        """Seal ``batch`` before its age if it is still the open one (the Kafka listener,
        when every producer writing the topic waits for an answer)."""
        self._seal_if_open(batch, trigger)

    def _seal(self, batch: Batch, trigger: str) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
        self._open = None
        b = batch.builder
        self._last_class = self._class_for(b.size, b.block_count)
        sealed = self._m_sealed.get(trigger)
        if sealed is None:
            sealed = self._m_sealed[trigger] = self.metrics.batches.labels(self.topic, trigger)
        sealed.inc()
        task = asyncio.get_running_loop().create_task(self._upload(batch))
        if batch.keyed:  # notified after the keyed batch sealed before it
            batch.after, self._last_keyed = self._last_keyed, task
        self._uploads.add(task)
        self._m_uploads.set(len(self._uploads))
        task.add_done_callback(self._upload_done)

    def _upload_done(self, task: asyncio.Task[None]) -> None:
        self._uploads.discard(task)
        self._m_uploads.set(len(self._uploads))

    # --- upload + notify ----------------------------------------------------------------

    async def _upload(self, batch: Batch) -> None:
        loop = asyncio.get_running_loop()
        inbox = LoopInbox.of(loop)  # the store's and the notification's completions
        b = batch.builder
        view = b.seal()
        created = int(time.time() * 1000)
        bid = batch_id(created, self.broker_id, batch.seq)
        self._m_batch_bytes.observe(len(view))
        try:
            t0 = time.monotonic()
            try:
                stored = await inbox.run(
                    self.executor, self.writer.store, self.topic, bid, created, view
                )
            except Exception as e:  # the writer's typed errors, or anything unexpected
                self.metrics.errors.labels("storage").inc()
                raise StorageError(f"topic {self.topic!r}: batch {bid} not stored: {e}") from e
            self._m_upload.observe(time.monotonic() - t0)
            headers = b.headers
            note = Notification(
                topic=self.topic,
                cluster=self.cluster,
                broker=self.broker_id,
                storage=stored.storage,
                bucket=stored.bucket,
                key=stored.key,
                size=stored.size,
                block_count=len(headers),
                record_count=b.record_count,
                min_timestamp=min(h.min_timestamp for h in headers),
                max_timestamp=max(h.max_timestamp for h in headers),
                checksum=b.header_crc,
                batch_id=bid,
                created_at=created,
            )
            if batch.keyed:
                await self._notify_after(batch)
            t0 = time.monotonic()
            try:
                await inbox.wrap(self._publish(batch, note))
            except Exception as e:
                self.metrics.errors.labels("notification").inc()
                await self._drop_orphan(stored)
                raise NotificationError(
                    f"topic {self.topic!r}: batch {stored.key} stored but its notification "
                    f"failed ({e}); the object was removed and the write must be retried"
                ) from e
            self._m_notify.observe(time.monotonic() - t0)
            batch.done.set_result(stored)
        except BaseException as e:  # fail closed: every waiter gets a typed error
            err = _typed(e, self.topic, bid)
            if not isinstance(e, MemqError):
                self.metrics.errors.labels("internal").inc()
            log.error("%s", err)
            self._forget(batch)
            if batch.ack1_records:
                self.metrics.lost_unacked.labels(self.topic).inc(batch.ack1_records)
            if not batch.done.done():
                batch.done.set_exception(err)
                batch.done.exception()  # mark retrieved: waiters may all be ack=0/1
            if not isinstance(e, Exception):
                raise  # cancellation or exit: after the waiters were answered
        finally:
            view.release()
            self._release(b)

    async def _notify_after(self, batch: Batch) -> None:
        """Wait until the keyed batch sealed before ``batch`` is notified (or failed).

        Keyed batches of a processor are notified in seal order, each published only once
        the previous one's notification was acknowledged (or its upload failed), all with
        the same Kafka key: so they land on one notification partition in seal order, even
        when a later batch's upload finishes first, and whatever the Kafka producer's
        ``max.in.flight`` or idempotence settings. Blocks are appended in arrival order,
        so a producer's keyed blocks are read in the order this writer received them.
        """
        prev, batch.after = batch.after, None
        if prev is not None and not prev.done():
            await asyncio.wait({prev})

    def _publish(self, batch: Batch, note: Notification) -> Future[Any]:
        """Publish ``batch``'s notification: keyed batches with this broker's id as Kafka key
        (one stable partition per writer), others without (spread over the partitions)."""
        if not batch.keyed:
            return self.sink.publish(self.notification_topic, note)
        return self.sink.publish(self.notification_topic, note, key=self.broker_id.encode())

    async def _drop_orphan(self, stored: StoredObject) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(
                self.executor, self.writer.delete, stored.key
            )
        except Exception as e:  # the object is unreferenced: harmless but listed by Spark
            log.warning("could not delete orphan object %s: %s", stored.key, e)

    def _forget(self, batch: Batch) -> None:
        for bid in batch.block_ids:
            seen = self._recent.get(bid)
            if seen is not None and seen[0] is batch:
                del self._recent[bid]

    def _release(self, builder: BatchBuilder) -> None:
        """Give a buffer back to the broker's pool."""
        self.pool.release(self.topic, builder)
        self._m_buffers.set(self.pool.held(self.topic))

    # --- lifecycle ----------------------------------------------------------------------

    async def close(self, trigger: str = "shutdown", timeout: float = 60.0) -> None:
        """Seal the open batch, wait for every upload, fail waiters for buffers.

        New writes get BrokerShuttingDownError (``shutdown``) or NotWriterError
        (``reassign``) so producers retry elsewhere.
        """
        self._closing = BrokerShuttingDownError if trigger == "shutdown" else NotWriterError
        if self._open is not None:
            self._seal(self._open, trigger)
        self.pool.fail_waiters(
            self.topic, self._closing(f"broker stopped writing topic {self.topic!r}")
        )
        if self._uploads:
            _done, pending = await asyncio.wait(set(self._uploads), timeout=timeout)
            if pending:
                log.error(
                    "topic %s: %d uploads still running after %.0f s at close",
                    self.topic,
                    len(pending),
                    timeout,
                )
