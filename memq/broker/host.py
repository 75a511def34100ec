"""What the broker's front ends need of the broker server, and a Kafka connection of its
listener.

The server (:mod:`memq.broker.server`) starts the front ends that accept producers (the
binary protocol's :mod:`~memq.broker.connection`, the :mod:`~memq.broker.http` side
port, the :mod:`~memq.broker.kafka_listener`) and hands itself to them; they see it only
through :class:`BrokerHost` (each front end declares, beside its code, the few more
members it uses), so none imports the server that imports it. A Kafka connection
(:mod:`~memq.broker.kafka_connection`) sees its listener as a :class:`KafkaHost`.

A leaf of memq.broker: it imports only config, errors, protocol models and the broker's
metrics, processor, auditing and Kafka codec modules.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from memq.acl import Op
from memq.broker.auditing import BlockAudit
from memq.broker.kafka_codec import KafkaRequest
from memq.broker.metrics import BrokerMetrics
from memq.broker.processor import Batch, TopicProcessor
from memq.config import BrokerConfig
from memq.errors import BrokerShuttingDownError

__all__ = ["BrokerHost", "Flow", "KafkaHost"]


class BrokerHost(Protocol):
    """The broker server, as every front end that accepts producers sees it."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    @property
    def audit(self) -> BlockAudit | None:
        """Reports the blocks the front end encodes itself (None: broker audit off)."""
        ...

    @property
    def token_secret(self) -> bytes | None:
        """The secret bearer tokens are signed with (None: no tokens)."""
        ...

    @property
    def draining(self) -> bool:
        """Shutting down: writes are refused with :meth:`shutting_down_error`."""
        ...

    @property
    def enforcing(self) -> bool:
        """Authentication on: every request is checked against the ACLs."""
        ...

    def authorize(self, principal: str | None, op: Op, topic: str) -> None:
        """Raise unless ``principal`` may ``op`` on ``topic`` (when enforcing)."""
        ...

    def shutting_down_error(self) -> BrokerShuttingDownError: ...

    async def processor_for(self, topic: str) -> TopicProcessor:
        """The processor writing ``topic`` on this broker (auto-created where allowed)."""
        ...

    def receive_buffer(self, n: int) -> memoryview | None:
        """A reused buffer of exactly ``n`` bytes to receive a large request into, or
        None (the connection then takes fresh memory)."""
        ...


@dataclass(slots=True)
class Flow:
    """One connection's writes to one partition of a topic."""

    #: When it last sent a request or was answered (monotonic seconds).
    seen: float
    #: ``acks=-1`` requests not answered yet.
    outstanding: int = 0
    #: Sent a request while another was outstanding (or writes with ``acks`` 0/1): it
    #: may send more before an answer, so a batch is never sealed early on its account.
    pipelines: bool = False
    #: Wrote with ``acks`` 0/1: it never waits for answers, so no quiet moment says it
    #: has nothing more to send.
    unacked: bool = False


class KafkaHost(Protocol):
    """The Kafka listener, as each of its connections sees it."""

    @property
    def server(self) -> BrokerHost: ...

    @property
    def supported(self) -> dict[int, tuple[int, int]]:
        """API key -> (lowest, highest) version served."""
        ...

    @property
    def advertised(self) -> dict[int, tuple[int, int]]:
        """API key -> (lowest, highest) version listed by ApiVersions."""
        ...

    async def metadata(self, req: KafkaRequest, principal: str | None) -> Any: ...

    def log_limited(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        """Log unless ``key`` was logged recently (one line per cause and client)."""
        ...

    def next_producer_id(self) -> int: ...

    def opened(self, conn: Any) -> bool:
        """Admit a new connection (False: refused)."""
        ...

    def closed(self, conn: Any) -> None:
        """A connection is done: forget it and its flows."""
        ...

    def partitions(self, topic: str) -> int: ...

    def base_offset(self, topic: str, partition: int, bid: tuple[int, int, int], n: int) -> int:
        """This broker's offset of a block in a partition; a duplicate gets its first one."""
        ...

    def flow_sent(self, topic: str, conn: int, partition: int, waits: bool) -> Flow:
        """Note a Produce of connection ``conn`` to ``partition``."""
        ...

    def connection_blocked(self, conn: int, blocked: bool, idempotent: bool) -> None:
        """Connection ``conn`` can send no request before an answer (or can again);
        ``idempotent``: it has at most Kafka's 5 requests in flight."""
        ...

    def hold(self, topic: str, conn: int, batch: Batch) -> None:
        """Note that a flow of ``conn`` waits for the open ``batch`` of ``topic``."""
        ...

    def seal_if_stalled(self, topic: str, proc: TopicProcessor, batch: Batch) -> None:
        """Seal the open ``batch`` now when no Kafka producer of the topic can add to it."""
        ...
