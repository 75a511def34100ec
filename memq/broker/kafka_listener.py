"""The broker's Kafka-protocol listener: any Kafka producer writes to MemQ.

Its own port (``kafka_listener`` in the broker config). Implements ApiVersions, Metadata,
Produce and InitProducerId (plus SaslHandshake/SaslAuthenticate with PLAIN when the
broker enforces auth); FindCoordinator is answered with an error naming MemQ's consumer
(a Kafka consumer shows it); every other request is answered UNSUPPORTED_VERSION and
the connection closed (logged at most once a minute per API and client). Codecs are in
:mod:`memq.broker.kafka_codec` (and :mod:`memq.broker.kafka_structs`), one connection's
handling in :mod:`memq.broker.kafka_connection`; this module is the port, the state its
connections share (producer ids, offsets) and Metadata:

- **Requests in order, responses in order.** A connection reads one request at a time
  and takes it as far as appending its blocks to the topic processors; ``acks=-1``
  responses wait for their batches meanwhile, and are written strictly in request
  order (a Kafka client pipelines up to ``max.in.flight`` requests).
- **Produce**: each partition's record batches become one MemQ block (the producer's
  compression, zstd for snappy), appended through the topic's processor exactly like a
  WRITE or an HTTP ingest request. ``acks=0``: no response (Kafka's meaning);
  ``acks=1``: the block is in the open batch; ``acks=-1``: the batch object is in storage
  and its notification acknowledged. Base offsets are a per-partition counter of this
  broker (MemQ has no partition log).
- **Node ids**: one per broker, with its own address: kafkajs (2.x) keys brokers by
  host and port, and with two node ids on one address it sent only one node's
  partitions yet reported every record sent (an earlier ``kafka_listener.nodes`` did
  this; it also raised no throughput, see docs/performance.md).
- **Idempotence**: a batch of an idempotent producer becomes block id
  ``(producer id, epoch, partition << 32 | base sequence)``, so a retry that reaches the
  same writer is answered from the processor's dedup window (and consumers drop any
  remaining copy). InitProducerId hands out ids from a range random per broker start.
- **Framing**: a length outside ``[8, max_frame_bytes]``, a truncated frame, a request
  that does not decode or an idle connection is closed (logged and counted), never a
  crash.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import ssl
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Protocol

from memq.acl import AclTable
from memq.broker.cluster import ClusterView
from memq.broker.host import BrokerHost, Flow
from memq.broker.kafka_codec import (
    ADVERTISED_ONLY,
    METADATA,
    SASL_APIS,
    SUPPORTED,
    KafkaError,
    KafkaRequest,
    build_response,
    kafka_error,
    node_id,
)
from memq.broker.kafka_connection import IDEMPOTENT_MAX_IN_FLIGHT, KafkaConnection
from memq.broker.loglimit import LogLimiter
from memq.broker.processor import Batch, TopicProcessor
from memq.errors import MemqError, NotWriterError
from memq.formats.keys import validate_name
from memq.protocol import BrokerInfo

__all__ = ["KafkaListener", "ListenerHost"]

log = logging.getLogger(__name__)

#: Authorized-operations fields of Metadata v8: "not requested".
_OPS_OMITTED = -(1 << 31)
#: Base offsets remembered to answer a duplicate with the original one.
_OFFSET_MEMORY = 65536
#: A flow with nothing outstanding for this long no longer holds a batch open.
_FLOW_IDLE_S = 1.0
#: A batch is sealed at half the producers' window only once it holds this share of
#: ``batch.bytes``: a smaller upload costs more per byte than overlapping it gains.
_SPLIT_SHARE = 8
#: With every flow waiting for an answer, no request for this long seals the batch
#: ("quiet"): a producer with more to send sends it within its linger.ms (5 ms by
#: default in the Java client and librdkafka), scheduling jitter on a loaded host added.
_QUIET_S = 0.025


class ListenerHost(BrokerHost, Protocol):
    """The broker server, as its Kafka listener sees it (a ``BrokerServer``)."""

    @property
    def view(self) -> ClusterView: ...

    @property
    def acls(self) -> AclTable: ...

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...


class KafkaListener:
    """The Kafka port of one broker: its connections, producer ids and offsets."""

    def __init__(self, server: ListenerHost) -> None:
        cfg = server.config.kafka_listener
        assert cfg is not None
        self.server = server
        self.config = cfg
        self.connections: set[KafkaConnection] = set()
        self.port: int = cfg.port
        self._server: asyncio.Server | None = None
        # Producer ids: the top 31 bits random per broker start, the low 32 a counter.
        self._pid_base = random.getrandbits(31) << 32
        self._pids = itertools.count(1)
        self._offsets: dict[tuple[str, int], int] = {}
        self._seen: OrderedDict[tuple[str, int, int, int, int], int] = OrderedDict()
        self._flows: dict[str, dict[tuple[int, int], Flow]] = {}
        #: Connections that can send no request before an answer (idempotent, at Kafka's
        #: limit of requests in flight): their flows cannot add to an open batch.
        self._blocked: set[int] = set()
        #: Connections of idempotent producers (at most 5 requests in flight).
        self._idempotent: set[int] = set()
        #: Per topic: the open batch (weakly: never keeps a sealed batch's buffer alive)
        #: and, per connection, the flows waiting on it.
        self._held: dict[str, tuple[weakref.ref[Batch], dict[int, int]]] = {}
        #: Per topic: when its last Produce was appended, and its quiet timer.
        self._last_sent: dict[str, float] = {}
        self._quiet: dict[str, asyncio.TimerHandle] = {}
        #: Lines about misdirected clients (readers, unsupported APIs), per cause and
        #: client address: they retry every second or so.
        self._log_limit = LogLimiter(interval=60.0)
        #: What ApiVersions lists; what is served is that minus ADVERTISED_ONLY.
        self.advertised = {**SUPPORTED, **ADVERTISED_ONLY}
        self.supported = dict(SUPPORTED)
        if server.token_secret is not None:
            self.supported.update(SASL_APIS)
            self.advertised.update(SASL_APIS)

    @property
    def advertised_port(self) -> int:
        return self.config.advertised_port or self.port

    async def start(self, host: str) -> int:
        ssl = self.server.ssl_context if self.config.tls else None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(self), host, self.config.port, reuse_address=True,
            ssl=ssl, ssl_handshake_timeout=10.0 if ssl else None,
        )  # fmt: skip
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    def close_connections(self) -> None:
        for conn in list(self.connections):
            conn.close()

    def log_limited(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        return self._log_limit.log(log, level, key, msg, *args)

    def opened(self, conn: KafkaConnection) -> bool:
        """Admit a new connection (False: refused, over max_connections)."""
        limit = self.server.config.max_connections
        if len(self.connections) >= limit:
            log.warning("kafka listener: refusing a connection, max_connections (%d)", limit)
            self.server.metrics.errors.labels("connection_limit").inc()
            return False
        self.connections.add(conn)
        return True

    def closed(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)
        self.forget_flows(id(conn))

    # --- shared state -------------------------------------------------------------------

    def next_producer_id(self) -> int:
        return self._pid_base | (next(self._pids) & 0xFFFFFFFF)

    def base_offset(self, topic: str, partition: int, bid: tuple[int, int, int], n: int) -> int:
        """This broker's offset of a block in a partition; a duplicate gets its first one."""
        key = (topic, partition, *bid)
        seen = self._seen.get(key)
        if seen is not None:
            return seen
        base = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = base + n
        self._seen[key] = base
        if len(self._seen) > _OFFSET_MEMORY:
            self._seen.popitem(last=False)
        return base

    # --- sealing a batch nobody can add to ---------------------------------------------

    def flow_sent(self, topic: str, conn: int, partition: int, waits: bool) -> Flow:
        """Note a Produce of connection ``conn`` to ``partition``; ``waits``: ``acks=-1``
        (the caller decrements ``outstanding`` once it is answered)."""
        flows = self._flows.setdefault(topic, {})
        flow = flows.get((conn, partition))
        now = time.monotonic()
        if flow is None:
            flow = flows[(conn, partition)] = Flow(now)
        flow.seen = now
        if not waits or flow.outstanding:
            flow.pipelines = True
        if not waits:
            flow.unacked = True
        if waits:
            flow.outstanding += 1
        return flow

    def connection_blocked(self, conn: int, blocked: bool, idempotent: bool) -> None:
        if blocked:
            self._blocked.add(conn)
        else:
            self._blocked.discard(conn)
        if idempotent:
            self._idempotent.add(conn)

    def hold(self, topic: str, conn: int, batch: Batch) -> None:
        """Note that a flow of ``conn`` waits for the open ``batch`` of ``topic``."""
        held = self._held.get(topic)
        if held is None or held[0]() is not batch:
            held = self._held[topic] = (weakref.ref(batch), {})
        held[1][conn] = held[1].get(conn, 0) + 1

    def forget_flows(self, conn: int) -> None:
        self._blocked.discard(conn)
        self._idempotent.discard(conn)
        for _batch, counts in self._held.values():
            counts.pop(conn, None)
        for flows in self._flows.values():
            for key in [k for k in flows if k[0] == conn]:
                del flows[key]

    def seal_if_stalled(self, topic: str, proc: TopicProcessor, batch: Batch) -> None:
        """Seal the open ``batch`` now when Kafka producers of the topic can add little
        more to it.

        A producer that keeps one request in flight per partition (librdkafka's
        idempotent producer does) sends nothing more until it is answered, and with
        ``acks=-1`` that answer waits for this batch; an idempotent producer has at most
        Kafka's limit of requests in flight (5) on a connection, whatever its other
        partitions hold, so a connection with 5 unanswered ("blocked") sends nothing
        either, even one that pipelines (the Java client does, as does librdkafka
        without idempotence). Each recent flow (connection, partition) that never
        pipelined is one request of the producers' window (capped at 5 per idempotent
        connection). The batch is sealed ("waiting") once half that window waits on it
        and it holds at least 1/8 of ``batch.bytes``: the other half carries the next
        batch while this one uploads (sealing only when the whole window waited left
        the producers idle during every upload: stop and wait); or when no flow can add
        to it (each waits for an answer it cannot pipeline past, or its connection is
        blocked). When every flow waits for an answer but some could pipeline more, the
        batch is sealed ("quiet") once no request has come for ``_QUIET_S``: a producer
        that has more sends it within its linger.ms (5 ms by default, Java and
        librdkafka), so waiting out ``batch.ms`` would only add latency. Never while an
        ``acks`` 0/1 or answered flow may still add, nor when the topic's uploads
        already hold its ring.
        """
        self._last_sent[topic] = time.monotonic()
        state = self._state(topic, proc)
        if state is None:
            return
        stalled, waiting_all, pipelined, per_conn = state
        if stalled:
            proc.seal_if_open(batch, "waiting")
            return
        if waiting_all:
            self._arm_quiet(topic, proc, batch, _QUIET_S)
        if pipelined:
            return
        held = self._held.get(topic)
        waiting = sum(held[1].values()) if held is not None and held[0]() is batch else 0
        window = sum(
            min(n, IDEMPOTENT_MAX_IN_FLIGHT) if c in self._idempotent else n
            for c, n in per_conn.items()
        )
        if (
            2 * waiting >= window
            and batch.builder.size * _SPLIT_SHARE >= proc.config.batch.max_bytes
        ):
            proc.seal_if_open(batch, "waiting")

    def _state(
        self, topic: str, proc: TopicProcessor
    ) -> tuple[bool, bool, bool, dict[int, int]] | None:
        """(no flow can add, every flow waits for an answer, some flow of a connection
        that is not blocked pipelines, recent flows per connection) of ``topic``'s
        recent flows; None: none, or the topic's ring is held by its uploads."""
        flows = self._flows.get(topic)
        if not flows or proc.in_flight + 1 >= proc.config.ring_size:
            return None
        now = time.monotonic()
        stalled = waiting_all = True
        pipelined = False
        per_conn: dict[int, int] = {}
        for key, flow in list(flows.items()):
            blocked = key[0] in self._blocked
            if flow.unacked and not blocked:
                waiting_all = False
            if flow.outstanding:
                stalled = stalled and (blocked or not flow.pipelines)
            elif now - flow.seen > _FLOW_IDLE_S:
                del flows[key]
                continue
            elif not blocked:
                stalled = waiting_all = False
            pipelined = pipelined or (flow.pipelines and not blocked)  # (acks 0/1 flows too)
            per_conn[key[0]] = per_conn.get(key[0], 0) + 1
        if not per_conn:
            return None
        return stalled, waiting_all, pipelined, per_conn

    def _arm_quiet(self, topic: str, proc: TopicProcessor, batch: Batch, delay: float) -> None:
        timer = self._quiet.get(topic)
        if timer is not None:
            timer.cancel()
        self._quiet[topic] = self._call_later(
            delay, self._seal_if_quiet, topic, proc, weakref.ref(batch)
        )

    def _seal_if_quiet(self, topic: str, proc: TopicProcessor, ref: weakref.ref[Batch]) -> None:
        """The quiet timer: seal the batch ("quiet") if no request came for ``_QUIET_S``
        and every flow of the topic still waits for an answer."""
        self._quiet.pop(topic, None)
        batch = ref()
        if batch is None or self.server.draining:
            return
        left = self._last_sent.get(topic, 0.0) + _QUIET_S - time.monotonic()
        if left > 0:  # (a request came meanwhile, from a flow that could not arm it)
            self._arm_quiet(topic, proc, batch, left)
            return
        state = self._state(topic, proc)
        if state is not None and state[1]:
            proc.seal_if_open(batch, "quiet")

    def _call_later(self, delay: float, fn: Any, *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, fn, *args)

    def partitions(self, topic: str) -> int:
        if self.config.partitions is not None:
            return self.config.partitions
        cfg = self.server.view.topic_config(topic)
        return cfg.notification.partitions if cfg is not None else 1

    # --- Metadata -----------------------------------------------------------------------

    async def metadata(self, req: KafkaRequest, principal: str | None) -> Any:
        server, view = self.server, self.server.view
        body, version = req.body, req.api_version
        topics: list[str] | None = list(body.topics) if body.topics is not None else None
        if version == 0 and not topics:
            topics = None  # v0: an empty list means every topic
        allow_create = bool(body.allow_auto_topic_creation) if version >= 4 else True
        brokers = [b for b in view.brokers() if b.kafka_port]
        kafka_ids = {b.id for b in brokers}
        listed = topics is None
        names = sorted(view.topic_names()) if topics is None else topics
        docs = []
        for name in names:
            if server.enforcing and not server.acls.allowed(principal, "produce", name):
                if not listed:
                    docs.append(_topic_doc(name, KafkaError.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                validate_name("topic", name)
            except MemqError:
                docs.append(_topic_doc(name, KafkaError.INVALID_TOPIC_EXCEPTION))
                continue
            if view.topic_config(name) is None and not view.writers(name):
                code = await self._create(name, allow_create)
                if code != KafkaError.NONE:
                    docs.append(_topic_doc(name, code))
                    continue
            leaders = [w for w in view.writers(name) if w in kafka_ids]
            if not leaders:
                docs.append(_topic_doc(name, KafkaError.LEADER_NOT_AVAILABLE))
                continue
            parts = []
            for p in range(self.partitions(name)):
                leader = node_id(leaders[p % len(leaders)])  # round robin over the writers
                parts.append({"error_code": 0, "partition": p, "leader": leader,
                              "leader_epoch": 0, "replicas": [leader], "isr": [leader],
                              "offline_replicas": []})  # fmt: skip
            docs.append(_topic_doc(name, KafkaError.NONE, parts))
        doc = {
            "throttle_time_ms": 0,
            "brokers": [_broker_doc(b) for b in brokers],
            "cluster_id": server.config.cluster,
            "controller_id": node_id(server.config.broker_id),
            "topics": docs,
            "cluster_authorized_operations": _OPS_OMITTED,
        }
        return build_response(METADATA, version, doc)

    async def _create(self, name: str, allowed: bool) -> int:
        """Auto-create an unknown topic where the broker allows it: the error code."""
        if not (allowed and self.server.config.auto_create_topics) or self.server.draining:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        try:
            await self.server.processor_for(name)
        except NotWriterError:  # clustered: created, writers not assigned yet
            return KafkaError.LEADER_NOT_AVAILABLE
        except MemqError as e:
            return kafka_error(e)
        return KafkaError.NONE


def _topic_doc(name: str, error: int, partitions: list[dict[str, Any]] | None = None) -> Any:
    return {"error_code": error, "topic": name, "is_internal": False,
            "partitions": partitions or [], "topic_authorized_operations": _OPS_OMITTED}  # fmt: skip


def _broker_doc(b: BrokerInfo) -> dict[str, Any]:
    return {"node_id": node_id(b.id), "host": b.host, "port": b.kafka_port,
            "rack": b.rack}  # fmt: skip
