"""The broker: TCP server, topic processors, metadata, HTTP side port, graceful shutdown.

It knows the cluster only through :class:`memq.broker.cluster.ClusterView` (standalone
by default; the runner passes a clustered one) and offers itself to it as a
:class:`memq.broker.cluster.TopicHost`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from prometheus_client.registry import Collector

from memq.acl import AclEntry, AclTable, Op
from memq.broker.auditing import AuditSink, BlockAudit
from memq.broker.cluster import AdminResponse, ClusterView, LoadReport, StandaloneView
from memq.broker.connection import BrokerConnection
from memq.broker.metrics import BrokerMetrics
from memq.broker.pool import BufferPool, buffer_bytes
from memq.broker.processor import NotificationSink, TopicProcessor
from memq.config import BrokerConfig, NotificationConfig, TopicConfig
from memq.errors import (
    BrokerShuttingDownError,
    InvalidRequestError,
    MemqError,
    NotWriterError,
    UnknownTopicError,
)
from memq.formats.keys import validate_name
from memq.protocol import (
    AdminRequest,
    BrokerInfo,
    ClusterMetadata,
    MetadataRequest,
    TopicMetadata,
    encode_msg,
)
from memq.security import server_context
from memq.storage_handlers.base import StorageWriter
from memq.storage_handlers.receive import ReceiveBuffers
from memq.storage_handlers.registry import make_writer

__all__ = ["BrokerServer"]

log = logging.getLogger(__name__)

SinkFactory = Callable[[NotificationConfig], Any]
#: Weight of the newest sample in the smoothed per-topic ingest rate.
LOAD_ALPHA = 0.5
#: Requests from this size up are received into reused buffers (glibc maps fresh memory
#: for each allocation this large, and the kernel faults it in a page at a time).
RECEIVE_MIN = 128 * 1024
#: At shutdown, how long queued audit records may take to reach Kafka (the rest are
#: counted dropped).
AUDIT_CLOSE_S = 5.0


class BrokerServer:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        writer_factory: Callable[[TopicConfig, str], StorageWriter] | None = None,
        sink_factory: SinkFactory | None = None,
        metrics: BrokerMetrics | None = None,
        cluster: ClusterView | None = None,
        audit: AuditSink | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or BrokerMetrics()
        #: Reports the blocks this broker encodes (HTTP ingest, Kafka port); None: off.
        self.audit = BlockAudit(audit, config.broker_id) if audit is not None else None
        if self.audit is not None:
            self.metrics.registry.register(cast(Collector, self.audit))
        self.processors: dict[str, TopicProcessor] = {}
        self.connections: set[BrokerConnection] = set()
        auth = config.auth
        #: Who writes what: the cluster given by the runner, else this broker alone.
        self.view: ClusterView = cluster or StandaloneView(config, list(auth.acls if auth else ()))
        self.executor = ThreadPoolExecutor(config.upload_threads, thread_name_prefix="memq-upload")
        self.draining = False
        self.ready = False
        self.port = config.port
        self.http_port: int | None = None
        #: Port Kafka clients are told to use (None: no Kafka listener).
        self.kafka_port: int | None = None
        self.kafka: Any = None
        self.ssl_context = server_context(config.tls) if config.tls is not None else None
        #: ACLs in force (auth.acls standalone; ZooKeeper's when clustered).
        self.acls = AclTable(auth.acls if auth else (), auth.superusers if auth else ())
        self.token_secret = (
            config.auth.secret() if config.auth is not None and config.auth.enabled else None
        )
        self._writer_factory = writer_factory or (lambda t, c: make_writer(t.storage, c))
        self._sink_factory = sink_factory or _kafka_sink
        self._sinks: dict[tuple[Any, ...], NotificationSink] = {}
        self._writers: dict[str, StorageWriter] = {}
        self._load_samples: dict[str, tuple[float, int, float]] = {}
        #: Block ids of HTTP ingest requests without an Idempotency-Key.
        self.http_producer_id = random.getrandbits(63)
        self._http_sequence = itertools.count()
        #: Every topic's batch buffers come from here (bounded by memory_limit_bytes).
        self.pool = BufferPool(config.memory_limit_bytes, self.metrics)
        #: Large requests (blocks, Kafka record sets) are received into reused buffers,
        #: at most two of the largest requests' worth kept (docs/operations.md).
        self._receive = ReceiveBuffers(2 * config.max_frame_bytes, min_size=RECEIVE_MIN)
        self._creating: dict[str, asyncio.Future[TopicProcessor]] = {}
        self._server: asyncio.Server | None = None
        self._http: Any = None
        self._stopped = asyncio.Event()

    # --- identity -----------------------------------------------------------------------

    @property
    def info(self) -> BrokerInfo:
        c = self.config
        return BrokerInfo(
            id=c.broker_id,
            host=c.advertised,
            port=self.port,
            http_port=self.http_port,
            rack=c.rack,
            kafka_port=self.kafka_port,
        )

    @property
    def address(self) -> str:
        return f"{self.config.advertised}:{self.port}"

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if not self.view.clustered:
            for t in self.config.topics:
                await self.add_topic(t)
        self._server = await loop.create_server(
            lambda: BrokerConnection(self),
            self.config.host,
            self.config.port,
            reuse_address=True,
            ssl=self.ssl_context,
            ssl_handshake_timeout=10.0 if self.ssl_context else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.http_port is not None:
            from memq.broker.http import start_http

            self._http, self.http_port = await start_http(
                self, self.config.host, self.config.http_port
            )
        if self.config.kafka_listener is not None:
            from memq.broker.kafka_listener import KafkaListener

            self.kafka = KafkaListener(self)
            await self.kafka.start(self.config.host)
            self.kafka_port = self.kafka.advertised_port
        await self.view.join(self)
        if self.view.clustered:  # topics in the config file exist in the cluster
            for t in self.config.topics:
                settings = t.model_dump(mode="json", by_alias=True, exclude={"name"})
                await self.view.create_topic(t.name, settings, if_not_exists=True)
        self.ready = True
        log.info(
            "broker %s serving %s (http %s, kafka %s)",
            self.config.broker_id,
            self.address,
            self.http_port,
            self.kafka_port,
        )

    # --- TopicHost (what the cluster view may ask) ------------------------------------

    def hosted_topics(self) -> dict[str, TopicConfig]:
        return {name: p.config for name, p in self.processors.items()}

    async def start_topic(self, cfg: TopicConfig) -> None:
        await self.add_topic(cfg)

    async def stop_topic(self, name: str, trigger: str) -> None:
        await self.remove_topic(name, trigger)

    def set_acls(self, entries: list[AclEntry]) -> None:
        auth = self.config.auth
        self.acls = AclTable(entries, auth.superusers if auth else ())

    def next_http_sequence(self) -> int:
        return next(self._http_sequence)

    def load_report(self) -> LoadReport:
        """Per-topic ingest (MB/s, exponentially smoothed between calls) and pool state."""
        now = time.monotonic()
        rates: dict[str, float] = {}
        for name, proc in list(self.processors.items()):
            seen = proc.bytes_received
            last = self._load_samples.get(name)
            if last is None:
                rate = 0.0
            else:
                dt = max(now - last[0], 1e-3)
                instant = (seen - last[1]) / dt / 1e6
                rate = LOAD_ALPHA * instant + (1 - LOAD_ALPHA) * last[2]
            self._load_samples[name] = (now, seen, rate)
            rates[name] = round(rate, 4)
        for gone in set(self._load_samples) - set(self.processors):
            del self._load_samples[gone]
        return LoadReport(rates, self.pool.limit, self.pool.free_bytes)

    # --- topics -------------------------------------------------------------------------

    def sink_for(self, cfg: NotificationConfig) -> NotificationSink:
        key = (cfg.bootstrap_servers, cfg.delivery_timeout_ms, tuple(sorted(cfg.producer.items())))
        sink = self._sinks.get(key)
        if sink is None:
            sink = self._sinks[key] = self._sink_factory(cfg)
        return sink

    def _writer_for(self, cfg: TopicConfig) -> StorageWriter:
        """The storage writer of ``cfg``: one per distinct storage config, shared by the
        topics that use it (a boto3 client per topic would cost megabytes each)."""
        key = cfg.storage.model_dump_json()
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers[key] = self._writer_factory(cfg, self.config.cluster)
            if hasattr(writer, "retry_listener"):
                counter = self.metrics.storage_retries.labels(writer.name)
                writer.retry_listener = lambda _e: counter.inc()
        return writer

    async def add_topic(self, cfg: TopicConfig) -> TopicProcessor:
        """Start writing a topic (idempotent); ensures its notification topic exists."""
        if cfg.name in self.processors:
            return self.processors[cfg.name]
        need = buffer_bytes(cfg.batch.max_bytes, cfg.batch.max_blocks)
        if need > self.pool.limit:
            raise InvalidRequestError(
                f"cannot start topic {cfg.name!r}: one batch buffer ({need} bytes) exceeds "
                f"memory_limit_bytes ({self.pool.limit}): lower batch.bytes or raise the limit"
            )
        loop = asyncio.get_running_loop()
        # Clients are built with this broker's own secrets (a clustered topic's config,
        # from ZooKeeper, holds none); the processor keeps the config as given.
        live = cfg.with_secrets_from(self.config.topic_defaults)
        sink = self.sink_for(live.notification)
        ensure = getattr(sink, "ensure_topic", None)
        if ensure is not None:  # with this topic's partitions and retention (not the sink's)
            await loop.run_in_executor(
                self.executor,
                functools.partial(
                    ensure,
                    cfg.notification_topic(self.config.cluster),
                    live.notification,
                    cfg.retention.notification_ms,
                ),
            )
        learn = getattr(sink, "learn_partitions", None)
        if learn is not None:  # notification.partitions may have grown since the last start
            await loop.run_in_executor(
                self.executor,
                learn,
                cfg.notification_topic(self.config.cluster),
                live.notification.partitions,
            )
        if cfg.name in self.processors:  # started meanwhile (while we awaited above)
            return self.processors[cfg.name]
        writer = self._writer_for(live)
        proc = TopicProcessor(
            cfg,
            cluster=self.config.cluster,
            broker_id=self.config.broker_id,
            writer=writer,
            sink=sink,
            executor=self.executor,
            metrics=self.metrics,
            throttle_timeout=self.config.throttle_timeout_ms / 1000,
            pool=self.pool,
        )
        self.processors[cfg.name] = proc
        log.info(
            "topic %s: writing to %s, notifying %s",
            cfg.name,
            cfg.storage.type,
            proc.notification_topic,
        )
        return proc

    async def remove_topic(self, name: str, trigger: str = "reassign") -> None:
        """Stop writing a topic: seal and upload its open batch, answer its waiters first."""
        proc = self.processors.get(name)
        if proc is None:
            return
        await proc.close(trigger, timeout=self.config.shutdown_timeout_s)
        if self.processors.get(name) is proc:
            del self.processors[name]

    def receive_buffer(self, n: int) -> memoryview | None:
        """A reused buffer of exactly ``n`` bytes for a large request, or None."""
        return self._receive.take(n)

    async def processor_for(self, topic: str) -> TopicProcessor:
        proc = self.processors.get(topic)
        if proc is not None:
            return proc
        pending = self._creating.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        if not self.ready and self.view.clustered:
            # Listening, but the topics are not read from ZooKeeper yet (a restart) or no
            # longer (stopping):
            # "unknown topic" would fail the producer's records for good.
            raise NotWriterError(
                f"broker {self.config.broker_id} is starting or stopping: it does not know its topics now"
            )
        if self.view.topic_config(topic) is not None or self.view.writers(topic):
            writers = self.view.writers(topic)
            raise NotWriterError(
                f"broker {self.config.broker_id} does not write topic {topic!r}; writers: "
                f"{', '.join(writers) if writers else 'none assigned yet'}",
                body=encode_msg(self.metadata(MetadataRequest(topics=[topic]))),
            )
        if not self.config.auto_create_topics:
            raise UnknownTopicError(
                f"topic {topic!r} does not exist on cluster {self.config.cluster!r}: create it "
                "(memq topic create) or enable auto_create_topics"
            )
        try:
            validate_name("topic", topic)
        except MemqError as e:
            raise InvalidRequestError(str(e)) from None
        if self.view.clustered:
            await self.view.create_topic(topic)
            raise NotWriterError(
                f"topic {topic!r} was created; the governor is assigning its writers: retry",
                body=encode_msg(self.metadata(MetadataRequest(topics=[topic]))),
            )
        fut: asyncio.Future[TopicProcessor] = asyncio.get_running_loop().create_future()
        self._creating[topic] = fut
        try:
            proc = await self.add_topic(self.config.topic_from_defaults(topic))
            fut.set_result(proc)
            return proc
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            raise
        finally:
            del self._creating[topic]

    async def admin(self, req: AdminRequest) -> AdminResponse:
        return await self.view.admin(req)

    @property
    def enforcing(self) -> bool:
        """Authentication on: every request is checked against the ACLs."""
        return self.config.auth is not None and self.config.auth.enabled

    def authorize(self, principal: str | None, op: Op, topic: str) -> None:
        if self.enforcing:
            self.acls.check(principal, op, topic)

    def metadata(self, req: MetadataRequest) -> ClusterMetadata:
        names = req.topics if req.topics is not None else self.view.topic_names()
        topics = {}
        for name in names:
            cfg = self.view.topic_config(name)
            if cfg is None:
                topics[name] = TopicMetadata(
                    name=name,
                    error=f"unknown topic {name!r} on cluster {self.config.cluster!r} (memq "
                    "topic list shows its topics; memq topic create makes one)",
                )
                continue
            topics[name] = TopicMetadata(
                name=name,
                writers=self.view.writers(name),
                storage=cfg.storage.public(),
                notification={
                    "bootstrap_servers": cfg.notification.bootstrap_servers,
                    "topic": cfg.notification_topic(self.config.cluster),
                    "partitions": cfg.notification.partitions,
                },
                max_block_bytes=cfg.block_limit,
                retention_ms=cfg.retention.ms,
            )
        return ClusterMetadata(
            cluster=self.config.cluster,
            broker=self.config.broker_id,
            brokers=self.view.brokers(),
            topics=topics,
            governor=self.view.governor_id(),
        )

    def shutting_down_error(self) -> BrokerShuttingDownError:
        return BrokerShuttingDownError(
            f"broker {self.config.broker_id} is shutting down: retry on another broker"
        )

    async def shutdown(self) -> None:
        """Stop accepting, seal and upload open batches, answer every pending request."""
        if self.draining:
            await self._stopped.wait()
            return
        self.draining = True
        self.ready = False
        log.info("broker %s draining: sealing open batches", self.config.broker_id)
        # Leave the cluster first (deregister): the governor moves our topics away.
        await self.view.leave()
        if self._server is not None:
            self._server.close()
        if self.kafka is not None:
            self.kafka.stop_accepting()
        await asyncio.gather(
            *(p.close("shutdown", self.config.shutdown_timeout_s) for p in self.processors.values())
        )
        loop = asyncio.get_running_loop()
        for sink in self._sinks.values():
            close = getattr(sink, "close", None)
            if close is not None:
                await loop.run_in_executor(None, close)
        for w in self._writers.values():
            w.close()
        if self.audit is not None:  # the records of the batches just stored, bounded
            await loop.run_in_executor(
                None, self.audit.sink.close, min(AUDIT_CLOSE_S, self.config.shutdown_timeout_s)
            )
        # Responses were written by the upload callbacks; closing flushes them first.
        for conn in list(self.connections):
            conn.close()
        if self.kafka is not None:
            self.kafka.close_connections()
        if self._http is not None:
            await self._http.cleanup()
        self.executor.shutdown(wait=False)
        self._stopped.set()
        log.info("broker %s stopped", self.config.broker_id)

    async def serve_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal() -> None:
            if stop.is_set():  # a second signal: the operator wants out now
                log.warning("second signal during drain: exiting without draining")
                os._exit(1)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await stop.wait()
        await self.shutdown()


def _kafka_sink(cfg: NotificationConfig) -> NotificationSink:
    from memq.storage_handlers.kafka_sink import KafkaNotificationSink

    return KafkaNotificationSink(cfg)
