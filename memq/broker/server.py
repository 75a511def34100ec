"""The broker: TCP server, topic processors, metadata, HTTP side port, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack

from memq.acl import AclTable, Op
from memq.broker.connection import BrokerConnection
from memq.broker.metrics import BrokerMetrics
from memq.broker.processor import NotificationSink, TopicProcessor
from memq.config import BrokerConfig, NotificationConfig, TopicConfig
from memq.errors import (
    BrokerShuttingDownError,
    InvalidRequestError,
    MemqError,
    NotWriterError,
    UnknownTopicError,
)
from memq.formats.frames import RequestType
from memq.formats.keys import validate_name
from memq.protocol import (
    BrokerInfo,
    ClusterMetadata,
    MetadataRequest,
    TopicMetadata,
    encode_msg,
)
from memq.security import server_context
from memq.storage_handlers.base import StorageWriter
from memq.storage_handlers.registry import make_writer

__all__ = ["BrokerServer", "ClusterView"]

log = logging.getLogger(__name__)

SinkFactory = Callable[[NotificationConfig], Any]


class ClusterView:
    """Who writes what. Standalone: this broker writes every topic it has.

    A clustered broker replaces it with :class:`governor.member.ClusterMember`
    (ZooKeeper-backed, same methods).
    """

    clustered = False

    def __init__(self, server: BrokerServer) -> None:
        self.server = server

    def brokers(self) -> list[BrokerInfo]:
        return [self.server.info]

    def writers(self, topic: str) -> list[str]:
        return [self.server.config.broker_id] if topic in self.server.processors else []

    def governor_id(self) -> str | None:
        return None

    def topic_config(self, topic: str) -> TopicConfig | None:
        p = self.server.processors.get(topic)
        return p.config if p else None

    def topic_names(self) -> list[str]:
        return sorted(self.server.processors)

    async def create_topic(
        self, name: str, settings: dict[str, Any] | None = None, if_not_exists: bool = True
    ) -> TopicConfig:
        raise InvalidRequestError(
            "this broker is standalone: its topics come from its config file (add the topic "
            "there and restart), or run brokers clustered with zookeeper configured"
        )

    async def admin(self, req_type: int, body: bytes) -> bytes:
        if req_type == RequestType.ACL_LIST:
            out: Any = {"entries": [e.model_dump(mode="json") for e in self.server.acls.entries]}
        elif req_type in (RequestType.ACL_ADD, RequestType.ACL_REMOVE):
            raise InvalidRequestError(
                "this broker is standalone: its ACLs come from auth.acls in its config file "
                "(edit it and restart), or run brokers clustered with zookeeper configured"
            )
        elif req_type == RequestType.TOPIC_LIST:
            out = {"topics": self.topic_names()}
        elif req_type == RequestType.CLUSTER_STATUS:
            s = self.server
            out = {
                "cluster": s.config.cluster,
                "governor": None,
                "standalone": True,
                "brokers": [
                    {
                        **s.info.model_dump(),
                        "capacity_mbps": s.config.capacity_mbps,
                        "topics": self.topic_names(),
                    }
                ],
                "topics": {t: {"writers": [s.config.broker_id]} for t in self.topic_names()},
            }
        else:
            await self.create_topic("")  # raises the standalone explanation
        packed: bytes = msgpack.packb(out, use_bin_type=True)
        return packed


class BrokerServer:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        writer_factory: Callable[[TopicConfig, str], StorageWriter] | None = None,
        sink_factory: SinkFactory | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or BrokerMetrics()
        self.processors: dict[str, TopicProcessor] = {}
        self.connections: set[BrokerConnection] = set()
        self.view: ClusterView = ClusterView(self)
        self.executor = ThreadPoolExecutor(config.upload_threads, thread_name_prefix="memq-upload")
        self.draining = False
        self.ready = False
        self.port = config.port
        self.http_port: int | None = None
        self.admin_types: set[int] = {
            int(RequestType.TOPIC_CREATE),
            int(RequestType.TOPIC_UPDATE),
            int(RequestType.TOPIC_DELETE),
            int(RequestType.TOPIC_LIST),
            int(RequestType.CLUSTER_STATUS),
            int(RequestType.ACL_LIST),
            int(RequestType.ACL_ADD),
            int(RequestType.ACL_REMOVE),
        }
        self.member: Any = None
        self.ssl_context = server_context(config.tls) if config.tls is not None else None
        auth = config.auth
        #: ACLs in force (auth.acls standalone; ZooKeeper's when clustered).
        self.acls = AclTable(auth.acls if auth else (), auth.superusers if auth else ())
        self.token_secret = (
            config.auth.secret() if config.auth is not None and config.auth.enabled else None
        )
        self._writer_factory = writer_factory or (lambda t, c: make_writer(t.storage, c))
        self._sink_factory = sink_factory or _kafka_sink
        self._sinks: dict[tuple[Any, ...], NotificationSink] = {}
        self._creating: dict[str, asyncio.Future[TopicProcessor]] = {}
        self._server: asyncio.Server | None = None
        self._http: Any = None
        self._stopped = asyncio.Event()

    # --- identity -----------------------------------------------------------------------

    @property
    def info(self) -> BrokerInfo:
        c = self.config
        return BrokerInfo(
            id=c.broker_id, host=c.advertised, port=self.port, http_port=self.http_port, rack=c.rack
        )

    @property
    def address(self) -> str:
        return f"{self.config.advertised}:{self.port}"

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.zookeeper is None:
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
        if self.config.zookeeper is not None:
            await self._join_cluster(loop)
        self.ready = True
        log.info(
            "broker %s serving %s (http %s)", self.config.broker_id, self.address, self.http_port
        )

    async def _join_cluster(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register in ZooKeeper, follow the governor's assignments (clustered mode)."""
        from memq.governor.member import ClusterMember

        member = ClusterMember(self, loop)
        await loop.run_in_executor(None, member.start)
        self.member = member
        for t in self.config.topics:  # topics in the config file exist in the cluster
            settings = t.model_dump(mode="json", by_alias=True, exclude={"name"})
            await member.create_topic(t.name, settings, if_not_exists=True)

    def sink_for(self, cfg: NotificationConfig) -> NotificationSink:
        key = (cfg.bootstrap_servers, cfg.delivery_timeout_ms, tuple(sorted(cfg.producer.items())))
        sink = self._sinks.get(key)
        if sink is None:
            sink = self._sinks[key] = self._sink_factory(cfg)
        return sink

    async def add_topic(self, cfg: TopicConfig) -> TopicProcessor:
        """Start writing a topic (idempotent); ensures its notification topic exists."""
        if cfg.name in self.processors:
            return self.processors[cfg.name]
        used = sum(p.config.memory_bytes for p in self.processors.values())
        if used + cfg.memory_bytes > self.config.memory_limit_bytes:
            raise InvalidRequestError(
                f"cannot start topic {cfg.name!r}: its ring ({cfg.memory_bytes} bytes) would take "
                f"broker memory past memory_limit_bytes ({self.config.memory_limit_bytes}); "
                "raise the limit, lower ring_size/batch.bytes, or add brokers"
            )
        loop = asyncio.get_running_loop()
        sink = self.sink_for(cfg.notification)
        ensure = getattr(sink, "ensure_topic", None)
        if ensure is not None:
            await loop.run_in_executor(
                self.executor, ensure, cfg.notification_topic(self.config.cluster)
            )
        if cfg.name in self.processors:  # started meanwhile (while we awaited above)
            return self.processors[cfg.name]
        writer = self._writer_factory(cfg, self.config.cluster)
        if hasattr(writer, "retry_listener"):
            counter = self.metrics.storage_retries.labels(writer.name)
            writer.retry_listener = lambda _e: counter.inc()
        proc = TopicProcessor(
            cfg,
            cluster=self.config.cluster,
            broker_id=self.config.broker_id,
            writer=writer,
            sink=sink,
            executor=self.executor,
            metrics=self.metrics,
            throttle_timeout=self.config.throttle_timeout_ms / 1000,
        )
        self.processors[cfg.name] = proc
        self.metrics.buffer_bytes.set(sum(p.memory_bytes for p in self.processors.values()))
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
        proc.writer.close()
        self.metrics.buffer_bytes.set(sum(p.memory_bytes for p in self.processors.values()))

    async def processor_for(self, topic: str) -> TopicProcessor:
        proc = self.processors.get(topic)
        if proc is not None:
            return proc
        pending = self._creating.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
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

    async def admin(self, req_type: int, body: bytes) -> bytes:
        return await self.view.admin(req_type, body)

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
                topics[name] = TopicMetadata(name=name, error=f"unknown topic {name!r}")
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
        if self.member is not None:  # deregister first: the governor moves our topics away
            await asyncio.get_running_loop().run_in_executor(None, self.member.stop)
        if self._server is not None:
            self._server.close()
        await asyncio.gather(
            *(p.close("shutdown", self.config.shutdown_timeout_s) for p in self.processors.values())
        )
        loop = asyncio.get_running_loop()
        for sink in self._sinks.values():
            close = getattr(sink, "close", None)
            if close is not None:
                await loop.run_in_executor(None, close)
        for p in self.processors.values():
            p.writer.close()
        # Responses were written by the upload callbacks; closing flushes them first.
        for conn in list(self.connections):
            conn.close()
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
