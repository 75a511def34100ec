"""The producer's network side: routes blocks to a topic's writers, retries, completes.

Runs on the producer's I/O event loop. Each block is encoded once (off the loop, in
the encoder pool) and re-sent unchanged on retry, with the same producer id, epoch and
sequence, so the broker (and every reader) recognises a duplicate.

Retries stick to the writer that may already hold the block: a block whose response was
lost (timeout, dropped connection) may be in that writer's open or uploading batch, and
only that writer's dedup window can answer "duplicate" for it. A retry moves to another
writer only when the first is gone: it refuses connections, no longer writes the topic
(NOT_WRITER, or absent from fresh metadata), or is shutting down. (A copy stored by a
writer that then crashed can still be stored again by the next one: consumers drop such
copies by block id; see docs/guarantees.md.)

Every block ends in exactly one completion: acknowledged, or failed with a typed error,
whatever the failure (an unexpected exception included).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from memq.client.pool import ConnectionPool, MetadataCache
from memq.errors import (
    BrokerShuttingDownError,
    BrokerUnreachableError,
    ClientClosedError,
    ConnectionLostError,
    MemqError,
    NotWriterError,
    UnknownTopicError,
)
from memq.formats.frames import RequestType
from memq.producer.accumulator import SealedBlock
from memq.producer.config import ProducerConfig
from memq.producer.lanes import LaneOrder
from memq.protocol import (
    Ack,
    ClusterMetadata,
    TopicMetadata,
    WriteAck,
    decode_msg,
    encode_write_header,
)
from memq.retry import RetryPolicy

__all__ = ["Sender"]

log = logging.getLogger(__name__)

#: Blocks of at most this many record bytes are encoded on the I/O loop itself: for a
#: few records, encoding (tens of microseconds) is cheaper than the encoder pool's hop.
INLINE_ENCODE_BYTES = 16 * 1024

Finish = Callable[[SealedBlock, MemqError | None, dict[str, Any]], None]
Encoded = Callable[[SealedBlock, int], None]


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        bootstrap: list[str],
        *,
        producer_id: int,
        epoch: int,
        encoder: Executor,
        finish: Finish,
        encoded: Encoded | None = None,
        content_crc: bool = False,
    ) -> None:
        self.config = config
        #: Also compute each block's content CRC while encoding (for audit records).
        self.content_crc = content_crc
        self.producer_id = producer_id
        self.epoch = epoch
        self.encoder = encoder
        self.finish = finish
        self.encoded = encoded
        self.pool = ConnectionPool(
            connect_timeout=config.connect_timeout_ms / 1000,
            max_frame_size=max(16 << 20, config.batch_size * 2),
            security=config.security(),
        )
        self.meta = MetadataCache(
            bootstrap,
            self.pool,
            max_age=config.metadata_max_age_ms / 1000,
            timeout=config.request_timeout_ms / 1000,
        )
        self.policy = RetryPolicy(
            attempts=min(config.retries, 1_000_000) + 1,
            base=config.retry_backoff_ms / 1000,
            cap=max(config.retry_backoff_max_ms, config.retry_backoff_ms) / 1000,
            deadline=config.delivery_timeout_ms / 1000,
        )
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._rr = itertools.count()
        #: Keyed blocks go one at a time per lane, in the order their lane opened them.
        self.lanes = LaneOrder()
        self.sent_requests = 0
        self.retries = 0
        self.internal_errors = 0

    def _slot(self, address: str) -> asyncio.Semaphore:
        sem = self._slots.get(address)
        if sem is None:
            sem = self._slots[address] = asyncio.Semaphore(self.config.max_in_flight)
        return sem

    async def _writers(self, topic: str) -> list[str]:
        """Addresses of ``topic``'s writers; any known broker when none is known yet."""
        try:
            tmeta: TopicMetadata | None = await self.meta.topic(topic)
        except UnknownTopicError:
            tmeta = None
        return self.writers_of(tmeta)

    def writers_of(self, tmeta: TopicMetadata | None) -> list[str]:
        """Sorted addresses of the writers in ``tmeta``; any known broker when there are
        none (a topic a broker auto-creates on first write)."""
        writers = (
            [] if tmeta is None else [a for w in tmeta.writers if (a := self.meta.address_of(w))]
        )
        if not writers:
            # Unknown to metadata: a broker with auto_create_topics creates it on first write.
            cluster = self.meta.cluster
            writers = [b.address for b in cluster.brokers] if cluster and cluster.brokers else []
            writers = writers or self.meta.bootstrap
        return sorted(set(writers))

    async def _target(self, topic: str, sticky: str | None, lane: str | None = None) -> str:
        """The writer for the next attempt: ``sticky`` (the previous attempt's, which may
        hold the block) while it still writes the topic, else a keyed block's ``lane``
        writer while it does, else the next one round robin."""
        writers = await self._writers(topic)
        if sticky is not None and sticky in writers:
            return sticky
        if lane is not None and lane in writers:
            return lane
        return writers[next(self._rr) % len(writers)]

    def spawn(self, block: SealedBlock) -> None:
        """Start sending ``block`` (call on the I/O loop)."""
        task = asyncio.get_running_loop().create_task(self.send(block))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Fail every block still being sent (ClientClosedError) and close connections."""
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.pool.close()

    async def send(self, block: SealedBlock) -> None:
        """Send ``block`` until acknowledged or failed; always completes it exactly once."""
        try:
            await self._send(block)
        except asyncio.CancelledError:
            self.finish(
                block,
                ClientClosedError(
                    "producer closed before the block was acknowledged: its outcome is "
                    "unknown (it may have been stored; a retry with a new producer may "
                    "store it twice)"
                ),
                {},
            )
            raise
        except Exception as e:  # fail closed: a bug or an unexpected library error
            log.exception("sending a block of %s failed unexpectedly", block.topic)
            self.internal_errors += 1
            self.finish(
                block,
                MemqError(
                    f"block of {block.topic!r} (sequence {block.sequence}) failed: internal "
                    f"error {type(e).__name__}: {e}"
                ),
                {},
            )
        finally:
            if block.lane is not None:  # the lane's next block may go
                self.lanes.done((block.topic, block.lane), block.open.lane_seq)

    async def _send(self, block: SealedBlock) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        args = (
            self.producer_id, self.epoch, cfg.compression_type, self.content_crc,
            cfg.block_version,
        )  # fmt: skip
        try:
            if block.open.size <= INLINE_ENCODE_BYTES:
                # A small block (a trickling topic) costs less to encode here than the hop
                # to the encoder pool and back (submit, wrap_future, a wake-up).
                data = block.encode(*args)
            else:
                data = await loop.run_in_executor(self.encoder, block.encode, *args)
        except MemqError as e:
            self.finish(block, e, {})
            return
        if self.encoded is not None:
            self.encoded(block, len(data[0]) + len(data[1]))
        lane = block.lane
        if lane is not None:  # after every earlier block of the lane (encoded meanwhile)
            await self.lanes.turn((block.topic, lane), block.open.lane_seq)
        header = encode_write_header(block.topic, cfg.acks, keyed=lane is not None)
        meta: dict[str, Any] = {
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "sequence": block.sequence,
        }
        start = block.open.created
        deadline = start + cfg.delivery_timeout_ms / 1000
        attempt = 0
        causes: dict[str, str] = {}  # distinct error kinds seen, for the final message
        sticky: str | None = None  # the writer that may hold the block already
        while True:
            attempt += 1
            address = "?"
            try:
                address = await self._target(block.topic, sticky, lane)
                conn = await self.pool.get(address)
                async with self._slot(address):
                    self.sent_requests += 1
                    if cfg.acks == Ack.NONE:
                        await conn.send(RequestType.WRITE, header, *data)
                        self.finish(block, None, meta)
                        return
                    timeout = min(
                        cfg.request_timeout_ms / 1000, max(0.1, deadline - time.monotonic())
                    )
                    resp = await conn.request(RequestType.WRITE, header, *data, timeout=timeout)
                if cfg.acks == Ack.ALL and resp.body:
                    ack = decode_msg(WriteAck, resp.body, "WRITE response")
                    meta.update(
                        bucket=ack.bucket,
                        key=ack.key,
                        block_index=ack.block,
                        duplicate=ack.duplicate,
                    )
                self.finish(block, None, meta)
                return
            except MemqError as e:
                block.open.result.last_error = e  # the cause a caller's timeout names
                self._observe_failure(block.topic, address, e)
                sticky = address if _may_hold(e) else None
                causes.setdefault(type(e).__name__, str(e))
                delay = self.policy.delay(attempt)
                elapsed = time.monotonic() - start
                if not self.policy.should_retry(attempt, elapsed, delay, e.retriable):
                    if e.retriable:
                        earlier = "; ".join(
                            f"{k}: {v}" for k, v in causes.items() if k != type(e).__name__
                        )
                        e = type(e)(
                            f"{e} (gave up after {attempt} attempts in {elapsed:.1f} s, "
                            f"delivery.timeout.ms={cfg.delivery_timeout_ms}"
                            + (f"; earlier errors: {earlier}" if earlier else "")
                            + ")",
                            body=e.body,
                        )
                    self.finish(block, e, meta)
                    return
                self.retries += 1
                log.debug(
                    "block %s/%d to %s failed (%s); retry %d in %.2fs",
                    block.topic,
                    block.sequence,
                    address,
                    e,
                    attempt,
                    delay,
                )
                await asyncio.sleep(delay)

    def _observe_failure(self, topic: str, address: str, e: MemqError) -> None:
        """Update connections and metadata after a failed attempt."""
        if isinstance(e, ConnectionLostError):
            self.pool.drop(address)
            self.meta.invalidate(topic)
        elif isinstance(e, NotWriterError):
            if e.body:
                try:
                    self.meta.update(decode_msg(ClusterMetadata, e.body, "NOT_WRITER metadata"))
                    return
                except MemqError:
                    pass
            self.meta.invalidate(topic)


def _may_hold(e: MemqError) -> bool:
    """Whether the writer that failed this attempt may hold the block, and is still
    there to say so: the answer was lost, or it failed the batch it was in (its retry is
    stored anew there); not when it refused the connection, does not write the topic or
    is shutting down."""
    return not isinstance(
        e, NotWriterError | BrokerShuttingDownError | UnknownTopicError | BrokerUnreachableError
    )
