"""``memq.Producer``: Kafka-like, thread-safe, batching producer.

``produce()`` appends a record to its topic's open block under a lock (cheap, per
record) and returns a :class:`RecordFuture`. A block is sealed when it reaches
``batch.size`` or when ``linger.ms`` passes, encoded and compressed off the caller's
thread, and sent by a background I/O event loop that retries retriable errors with
jittered backoff until ``delivery.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import operator
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate, repeat
from typing import Any

from memq.aio import LoopInbox
from memq.audit.client import ClientAudit
from memq.client.bootstrap import resolve_client
from memq.client.stats import StatsCollector, split_stats_cb, stats_ticker
from memq.config.base import check_timeout
from memq.errors import ClientClosedError, ConfigError, MemqError
from memq.formats.block import (
    BLOCK_FRAME,
    INT64_MAX,
    INT64_MIN,
    RECORD_OVERHEAD,
    Header,
    record_size,
    record_too_large,
)
from memq.formats.keys import validate_name
from memq.producer.accumulator import OpenBlock, SealedBlock
from memq.producer.config import ProducerConfig
from memq.producer.filling import BlockFilling, BufferFullError, partly_queued
from memq.producer.futures import BatchFuture, BlockResult, DeliveryCallback, RecordFuture
from memq.producer.sender import Sender
from memq.protocol import Ack

__all__ = ["BufferFullError", "Producer"]

log = logging.getLogger(__name__)

#: How long close() waits for the I/O loop to cancel its sends (and audit records to
#: find their topic) before it stops the loop anyway and fails what is left.
_SHUTDOWN_WAIT_S = 10.0


def _as_bytes(v: Any, what: str) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    if v is None and what == "value":  # (a Kafka tombstone: MemQ has no compaction)
        raise TypeError(
            "record value must be bytes or str, not None: MemQ topics are not compacted, "
            "so there are no tombstones to write"
        )
    raise TypeError(f"record {what} must be bytes or str, not {type(v).__name__}")


def _kafka_arguments(
    on_delivery: DeliveryCallback | None, callback: DeliveryCallback | None, partition: Any
) -> DeliveryCallback | None:
    """confluent-kafka's produce() arguments: ``callback`` is ``on_delivery``; a partition
    cannot be chosen (a clear error instead of a TypeError about the keyword)."""
    if partition is not None:
        raise ConfigError(
            "produce(partition=...): MemQ writes are not partitioned (brokers batch every "
            "record of a topic; partitions are for reading): leave it out, and give records "
            "a key to keep their order"
        )
    if on_delivery is not None and callback is not None:
        raise TypeError("give on_delivery or callback (the same thing), not both")
    return on_delivery if on_delivery is not None else callback


def _headers(h: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[Header, ...]:
    if isinstance(h, str | bytes | bytearray | memoryview):
        raise TypeError(f"headers must be a mapping or (name, value) pairs, not {type(h).__name__}")
    items = h.items() if isinstance(h, Mapping) else h
    out = []
    for pair in items:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"headers must be a mapping or (name, value) pairs, got {pair!r}")
        name, value = pair
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        out.append((name, None if value is None else _as_bytes(value, f"header {name!r}")))
    return tuple(out)


def _timestamp(ts: Any) -> int:
    """A record's timestamp given by the caller: epoch milliseconds that fit an int64."""
    if isinstance(ts, bool) or not isinstance(ts, int):
        try:  # (a float is refused, as confluent-kafka does: time.time() is *seconds*,
            ts = operator.index(ts)  # truncated to milliseconds it was January 1970)
        except TypeError:
            raise TypeError(
                f"record timestamp must be an int (epoch milliseconds, e.g. "
                f"time.time_ns() // 1_000_000), not {type(ts).__name__}"
            ) from None
    if not INT64_MIN <= ts <= INT64_MAX:
        raise ConfigError(f"record timestamp {ts} does not fit an int64 (epoch milliseconds)")
    return int(ts)


class Producer(BlockFilling):
    """Send records to MemQ topics.

    >>> p = Producer({"bootstrap.servers": "127.0.0.1:9092", "acks": "all"})
    >>> p.produce("events", b"hello").result(timeout=30)  # doctest: +SKIP
    >>> p.close()  # doctest: +SKIP

    Thread-safe. Delivery callbacks ``on_delivery(err, metadata)`` run on the
    producer's I/O thread: keep them short.
    """

    def __init__(
        self, config: Mapping[str, Any] | ProducerConfig | None = None, /, **kwargs: Any
    ) -> None:
        config, stats_cb = split_stats_cb(config, kwargs)
        if isinstance(config, ProducerConfig):
            cfg = config.model_copy(update=kwargs) if kwargs else config
        else:
            cfg = ProducerConfig.from_mapping(config, **kwargs)
        cfg, endpoints = resolve_client(cfg, cfg.bootstrap_list())
        self.config = cfg
        bootstrap = endpoints.bootstrap
        #: Audit records of acked blocks (audit.enable; on by default on the local stack).
        self._audit = (
            ClientAudit(cfg, cfg.client_id)
            if cfg.audit_enabled(uses_local_stack=endpoints.local)
            else None
        )
        self._acks_name = {Ack.NONE: "0", Ack.LEADER: "1", Ack.ALL: "all"}[cfg.acks]
        self._audit_tasks: set[asyncio.Task[None]] = set()
        self.producer_id = (
            cfg.producer_id if cfg.producer_id is not None else random.getrandbits(63)
        )
        self.epoch = cfg.epoch
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._local = threading.local()
        self._open: set[OpenBlock] = set()
        #: Sealed blocks not completed yet (close() fails any the sender never finished).
        self._inflight: set[SealedBlock] = set()
        self._counts = dict.fromkeys(
            (
                "records_acked",
                "records_failed",
                "blocks_acked",
                "blocks_failed",
                "bytes_acked",
                "duplicate_blocks_acked",
            ),
            0,
        )
        self._errors: dict[str, int] = {}  # records failed, by error type
        self._seq: dict[str, int] = {}
        self._busy: set[str] = set()
        self._limits: dict[str, int] = {}
        #: The largest block a record may have to itself, by topic: the topic's
        #: max_block_bytes (a record larger than batch.size goes in a block of its own,
        #: as Kafka sends one larger than batch.size alone), else batch.size.
        self._record_limits: dict[str, int] = {}
        #: Open blocks of the key lanes, by (topic, writer): shared by every thread, so
        #: a key's records keep the order of the produce() calls.
        self._keyed: dict[tuple[str, str], OpenBlock] = {}
        #: Blocks opened so far per key lane (a block's place in its lane).
        self._lane_opened: dict[tuple[str, str], int] = {}
        #: Per topic: the metadata object the lanes were computed from, and its writers.
        self._lane_writers: dict[str, tuple[object, list[str]]] = {}
        self._buffered = 0
        self._pending_records = 0
        self._needs = []
        self._closed = False
        self._encoder = ThreadPoolExecutor(cfg.encode_threads, thread_name_prefix="memq-encode")
        self._loop = asyncio.new_event_loop()
        self._inbox = LoopInbox(self._loop)
        self._sender = Sender(
            cfg,
            bootstrap,
            producer_id=self.producer_id,
            epoch=self.epoch,
            encoder=self._encoder,
            finish=self._finish,
            encoded=self._encoded,
            content_crc=self._audit is not None,
        )
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="memq-producer-io", daemon=True
        )
        self._thread.start()
        self._ticker = stats_ticker(
            lambda: self.stats, stats_cb, cfg.statistics_interval_ms, "memq-producer-stats"
        )

    def prometheus_collector(self) -> StatsCollector:
        """A Prometheus collector of :attr:`stats` (``memq_producer_<key>`` gauges):
        ``registry.register(producer.prometheus_collector())``."""
        return StatsCollector(lambda: self.stats, "producer", self.config.client_id)

    # --- produce ------------------------------------------------------------------------

    def _block_limit(self, topic: str) -> int:
        """The largest block for ``topic``: batch.size, capped by the topic's limit once its
        metadata is known (waiting for it up to max.block.ms; never on the I/O thread)."""
        limit = self._limits.get(topic)
        if limit is not None:
            return limit
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        try:  # a bad name fails at the call, not at result()
            validate_name("topic", topic)
        except MemqError as e:
            raise ConfigError(str(e)) from None
        tmeta = self._sender.meta.cached(topic)
        if tmeta is None and not self._on_io_thread() and self.config.max_block_ms > 0:
            fut = asyncio.run_coroutine_threadsafe(self._sender.meta.topic(topic), self._loop)
            deadline = time.monotonic() + self.config.max_block_ms / 1000
            try:
                while not fut.done() and not self._closed and time.monotonic() < deadline:
                    concurrent.futures.wait([fut], min(0.1, deadline - time.monotonic()))
                tmeta = fut.result(0) if fut.done() else None
            except MemqError as e:
                log.debug("no metadata for %s yet (%s): using batch.size", topic, e)
            if not fut.done():
                fut.cancel()
                log.debug("metadata for %s not known within max.block.ms", topic)
        if tmeta is None:  # not cached: asked again by the next produce()
            return self.config.batch_size
        limit = self.config.batch_size
        if tmeta.max_block_bytes:
            limit = min(limit, tmeta.max_block_bytes)
        self._record_limits[topic] = max(limit, tmeta.max_block_bytes or 0)
        self._limits[topic] = limit
        return limit

    def _largest(self, topic: str, size: int, limit: int) -> int:
        """The block limit for a record of ``size`` bytes that does not fit ``limit`` (the
        topic's block size): a block of its own, up to the topic's largest block; else
        MessageTooLargeError, naming the largest record the topic takes."""
        most = self._record_limits.get(topic, limit)
        if size + BLOCK_FRAME > most:
            raise record_too_large(size, most, "a record", f"topic {topic!r}")
        return size + BLOCK_FRAME

    def produce(
        self,
        topic: str,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
        *,
        callback: DeliveryCallback | None = None,
        partition: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves when the chosen ``acks`` is satisfied.

        ``callback`` is confluent-kafka's other name for ``on_delivery``. ``partition`` is
        refused: MemQ writes are not partitioned (a key keeps its records' order)."""
        if self._closed:
            raise ClientClosedError("producer is closed")
        if callback is not None or partition is not None:
            on_delivery = _kafka_arguments(on_delivery, callback, partition)
        v = value if type(value) is bytes else _as_bytes(value, "value")
        k = key if key is None or type(key) is bytes else _as_bytes(key, "key")
        h = None if headers is None else _headers(headers)  # ([] stays empty, not none)
        ts = time.time_ns() // 1_000_000 if timestamp is None else _timestamp(timestamp)
        if on_delivery is not None and not callable(on_delivery):  # (it failed on the I/O
            raise TypeError(  # thread, logged, after the record was sent)
                f"on_delivery must be a callable(err, metadata), not {type(on_delivery).__name__}"
            )
        # (the common record, no key and no headers, sized without a call)
        size = len(v) + RECORD_OVERHEAD if k is None and h is None else record_size(k, v, h)
        blocks: dict[str, OpenBlock] | None = getattr(self._local, "blocks", None)
        if (
            k is None
            and blocks is not None
            and (acc := blocks.get(topic)) is not None
            and acc.limit_known
        ):
            # The fast path: the record fits this thread's open block of the topic, so it
            # fits the topic's block limit too (a block opened once the limit was known
            # has its capacity within it; the limit never changes after that).
            fut = acc.try_add(ts, k, v, h, size, on_delivery)
            if fut is not None:
                return fut
        limit = self._limits.get(topic) or self._block_limit(topic)
        if size + BLOCK_FRAME > limit:
            limit = self._largest(topic, size, limit)
        if k is not None:
            return self._produce_keyed(topic, ts, k, v, h, size, limit, on_delivery)
        if blocks is None:
            blocks = self._local.blocks = {}
        while True:
            acc = blocks.get(topic)
            if acc is not None:
                fut = acc.try_add(ts, k, v, h, size, on_delivery)
                if fut is not None:
                    return fut
                if self._grow(acc, size):
                    continue
                self._seal(acc)  # full (a no-op if linger or flush sealed it already)
            acc = blocks[topic] = self._open_block(topic, limit, size)
            acc.limit_known = topic in self._limits

    def produce_batch(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        timestamp: int | None = None,
    ) -> BatchFuture:
        """Queue many records at once: the bulk path for high rates.

        The records share one timestamp and carry no headers; there is no future or
        callback per record: the returned :class:`BatchFuture` resolves once every block
        holding them is acknowledged (or raises the first error). Records keep their
        order. Per-record Python work is limited to C-level list operations.
        """
        if self._closed:
            raise ClientClosedError("producer is closed")
        if not isinstance(topic, str):  # (a list raised "unhashable type")
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(
            values, Iterable
        ):
            raise TypeError(f"values must be a list of bytes, not {type(values).__name__}")
        if not isinstance(values, list):
            values = list(values)
        if values and set(map(type, values)) != {bytes}:
            values = [v if type(v) is bytes else _as_bytes(v, "value") for v in values]
        if keys is not None:
            if len(keys) != len(values):
                raise ValueError(f"{len(keys)} keys for {len(values)} values")
            keys = [k if k is None or type(k) is bytes else _as_bytes(k, "key") for k in keys]
        ts = int(time.time() * 1000) if timestamp is None else _timestamp(timestamp)
        limit = self._limits.get(topic) or self._block_limit(topic)
        # Record sizes (value + key + framing) with C-level loops only.
        lens = list(map(len, values))
        n = len(lens)
        if keys is None and n and lens[-1] == lens[0] and lens.count(lens[0]) == n:
            # (records of one size: their running totals are a range, nothing per record)
            size = lens[0] + RECORD_OVERHEAD
            if size + BLOCK_FRAME > limit:
                limit = self._largest(topic, size, limit)
            totals: Sequence[int] = range(0, (n + 1) * size, size)
        else:
            sizes = list(map(operator.add, lens, repeat(RECORD_OVERHEAD)))
            if keys is not None:
                sizes = list(map(operator.add, sizes, (len(k) if k else 0 for k in keys)))
            if sizes and max(sizes) + BLOCK_FRAME > limit:
                limit = self._largest(topic, max(sizes), limit)
            if keys is not None and any(k is not None for k in keys):
                return BatchFuture(
                    topic, self._produce_keyed_many(topic, ts, keys, values, sizes, limit)
                )
            totals = list(accumulate(sizes, initial=0))
        parts: list[tuple[BlockResult, int]] = []
        try:
            self._fill(topic, None, ts, keys, values, totals, limit, parts)
        except MemqError as e:  # (buffer.memory full, closed) after some records went in
            raise partly_queued(e, topic, parts, range(sum(c for _, c in parts)), n) from None
        return BatchFuture(topic, parts)

    # --- completion ---------------------------------------------------------------------

    def _encoded(self, block: SealedBlock, nbytes: int) -> None:
        """The block is encoded: account its encoded size and free the record objects.

        buffer.memory then bounds what the producer really holds (compressed blocks),
        so compression lets more records be in flight instead of fewer.
        """
        o = block.open
        o.release_records()
        with self._lock:
            self._buffered += nbytes - o.reserved
            o.reserved = nbytes
            self._freed()

    def _finish(self, block: SealedBlock, error: MemqError | None, meta: dict[str, Any]) -> None:
        o = block.open
        with self._lock:
            if block not in self._inflight:
                return  # completed already (close() failed it; the sender finished late)
            self._inflight.discard(block)
            self._buffered -= o.reserved
            self._freed()
            c = self._counts
            if error is None:
                c["records_acked"] += o.count
                c["blocks_acked"] += 1
                c["bytes_acked"] += o.reserved  # the block's encoded size
                c["duplicate_blocks_acked"] += bool(meta.get("duplicate"))
            else:
                c["records_failed"] += o.count
                c["blocks_failed"] += 1
                kind = type(error).__name__
                self._errors[kind] = self._errors.get(kind, 0) + o.count
        result = o.result
        result.complete(error, **meta)
        if error is None and self._audit is not None:
            self._audit_block(block, meta)
        if o.cb_fn:
            # Per-record work: one tuple and one call per callback.
            metas = result.metadata_many(o.topic, o.timestamps, o.cb_index)
            for cb, md in zip(o.cb_fn, metas, strict=True):
                try:
                    cb(error, md)
                except Exception:
                    log.exception("on_delivery callback raised")
        with self._lock:  # after the callbacks: flush() returns once they all ran
            self._pending_records -= o.count
            if not self._pending_records:
                self._changed.notify_all()

    def _audit_block(self, block: SealedBlock, meta: dict[str, Any]) -> None:
        """Emit the block's ``produced`` audit record (on the I/O loop, never blocking)."""
        fields = self._audit_fields(block, meta)
        tmeta = self._sender.meta.cached(block.topic)
        kafka = tmeta.notification.get("bootstrap_servers") if tmeta else None
        assert self._audit is not None
        if kafka or self.config.audit_bootstrap_servers:
            self._audit.emit(fields, kafka)
            return
        # A topic written before its metadata was known (auto-created on first write):
        # learn its notification Kafka in the background, then emit.
        task = self._loop.create_task(self._audit_after_metadata(block.topic, fields))
        self._audit_tasks.add(task)
        task.add_done_callback(self._audit_tasks.discard)

    async def _audit_after_metadata(self, topic: str, fields: dict[str, Any]) -> None:
        assert self._audit is not None
        kafka, why = None, None
        for _ in range(10):  # (acks=0/1: the write that creates the topic may be under way)
            try:
                tmeta = await self._sender.meta.topic(topic, refresh=True)
                kafka = tmeta.notification.get("bootstrap_servers")
                break
            except MemqError as e:
                why = e
                await asyncio.sleep(0.5)
        if kafka is None:
            log.warning("no metadata for %s to route its audit record: %s", topic, why)
        self._audit.emit(fields, kafka)

    def _audit_fields(self, block: SealedBlock, meta: dict[str, Any]) -> dict[str, Any]:
        o = block.open
        tmeta = self._sender.meta.cached(o.topic)
        return {
            "kind": "produced",
            "topic": o.topic,
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "sequence": block.sequence,
            "records": o.count,
            "content_crc": block.content_crc or 0,
            "min_timestamp": min(o.timestamps),
            "time": int(time.time() * 1000),
            "acks": self._acks_name,
            "bucket": meta.get("bucket"),
            "key": meta.get("key"),
            "block_index": meta.get("block_index"),
            # (null: unknown; a topic kept forever reports Long.MAX_VALUE, as Kafka)
            "retention_ms": None if tmeta is None else (tmeta.retention_ms or INT64_MAX),
        }

    # --- flush / close ------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> int:
        """Send every open block and wait until all records are acknowledged or failed.

        Returns the number of records still pending (0 when everything completed).
        """
        check_timeout(timeout)
        if self._on_io_thread():  # (it would wait for the thread it blocks)
            raise MemqError("flush() cannot be called from a delivery callback")
        with self._lock:
            open_blocks = list(self._open)
        for acc in open_blocks:
            self._seal(acc)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending_records:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
            return self._pending_records

    def poll(self, timeout: float | None = 0) -> int:
        """confluent-kafka's ``poll()``, for code written for it: delivery callbacks run
        on the producer's own thread as blocks are acknowledged, so there is nothing to
        serve here; returns 0 at once (``timeout`` is checked, not waited)."""
        check_timeout(timeout)
        return 0

    def __len__(self) -> int:
        """Records produced but not yet acknowledged or failed."""
        with self._lock:
            return self._pending_records + sum(acc.count for acc in self._open)

    @property
    def stats(self) -> dict[str, Any]:
        """Counters since the producer started (documented in docs/clients.md):
        records/blocks/bytes acknowledged and failed, failures by error type, requests,
        retries, blocks in flight, buffer use, audit records."""
        with self._lock:
            counts = dict(self._counts)
            errors = dict(self._errors)
            inflight = len(self._inflight)
        return {
            "pending_records": len(self),
            "buffered_bytes": self._buffered,
            "buffer_memory": self.config.buffer_memory,
            "blocks_in_flight": inflight,
            "requests": self._sender.sent_requests,
            "retries": self._sender.retries,
            "internal_errors": self._sender.internal_errors,
            **counts,
            "errors": errors,
            **(self._audit.stats() if self._audit else {}),
        }

    def close(self, timeout: float | None = 30.0) -> int:
        """Stop taking records, flush (up to ``timeout``), stop the I/O thread.

        Every record produced before close() returns is delivered or failed: those still
        unacknowledged when the time is up fail with :class:`ClientClosedError` (their
        futures resolve, their callbacks run). Returns how many records that was. Stopping
        the I/O thread then takes at most 10 s more (a delivery callback that blocks it).
        """
        if self._on_io_thread():
            raise MemqError("close() cannot be called from a delivery callback")
        with self._lock:
            if self._closed:
                return 0
            self._closed = True  # produce() raises ClientClosedError from now on
            self._changed.notify_all()
        left = self.flush(timeout)
        # Stopping the I/O thread takes at most _SHUTDOWN_WAIT_S in all (one deadline, not
        # one per step: a delivery callback blocking the thread made close(5) take 25 s).
        deadline = time.monotonic() + _SHUTDOWN_WAIT_S
        try:
            if self._audit_tasks:  # audit records still waiting for their topic's metadata
                asyncio.run_coroutine_threadsafe(
                    asyncio.wait(set(self._audit_tasks), timeout=5), self._loop
                ).result(max(0.0, deadline - time.monotonic()))
            asyncio.run_coroutine_threadsafe(self._sender.shutdown(), self._loop).result(
                max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:  # (close() returns all the same: what is left fails below)
            log.warning(
                "producer close: the I/O loop did not stop its sends within %.0f s; "
                "stopping it, its blocks fail with ClientClosedError",
                _SHUTDOWN_WAIT_S,
            )
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(max(0.1, deadline - time.monotonic()))
        with self._lock:  # sealed but never sent (the loop stopped first): fail them
            leftover = list(self._inflight)
        for block in leftover:
            self._finish(block, ClientClosedError("producer closed before the block was sent"), {})
        self._encoder.shutdown(wait=False)
        if self._ticker is not None:
            self._ticker.stop()
        if self._audit is not None:
            self._audit.close()
        if left:
            log.warning("producer closed with %d records undelivered", left)
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
