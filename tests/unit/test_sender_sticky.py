"""A retried block sticks to the writer that may already hold it (issue 14).

``Sender`` runs against stub metadata (two writers, A and B) and a stub connection
pool that fails the first attempt with a chosen error: a lost answer or a failed batch
(the writer may hold the block) retries on the same writer, so its dedup window can
answer "duplicate"; a writer that refused the connection or no longer writes the topic
is left for the other one. No servers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from memq.errors import (
    BrokerShuttingDownError,
    BrokerUnreachableError,
    ConnectionLostError,
    MemqError,
    NotWriterError,
    RequestTimeoutError,
    StorageError,
)
from memq.producer.accumulator import OpenBlock
from memq.producer.config import ProducerConfig
from memq.producer.sender import Sender
from memq.protocol import TopicMetadata

WRITERS = ["A:1", "B:1"]


class _Meta:
    """Metadata with a fixed writer list; broker ids are their addresses."""

    def __init__(self, writers: list[str]) -> None:
        self.writers = writers
        self.cluster = None
        self.bootstrap = list(writers)

    async def topic(self, topic: str, *, refresh: bool = False) -> TopicMetadata:
        return TopicMetadata(name=topic, writers=list(self.writers))

    def address_of(self, broker_id: str) -> str | None:
        return broker_id

    def invalidate(self, topic: str) -> None:
        pass

    def update(self, meta: Any) -> None:
        pass


class _Pool:
    """Records the address of every attempt; the first attempt fails with ``error``
    (raised when connecting if ``on_connect``, else as the request's outcome)."""

    def __init__(self, error: MemqError, *, on_connect: bool = False) -> None:
        self.error: MemqError | None = error
        self.on_connect = on_connect
        self.attempts: list[str] = []

    def _fail(self) -> None:
        if self.error is not None:
            e, self.error = self.error, None
            raise e

    async def get(self, address: str) -> Any:
        if self.on_connect:
            self.attempts.append(address)
            self._fail()
        return _Conn(self, address)

    def drop(self, address: str) -> None:
        pass

    def close(self) -> None:
        pass


class _Conn:
    def __init__(self, pool: _Pool, address: str) -> None:
        self.pool = pool
        self.address = address

    async def request(self, *args: Any, timeout: float = 30.0) -> Any:
        if not self.pool.on_connect:
            self.pool.attempts.append(self.address)
            self.pool._fail()
        return SimpleNamespace(body=b"")


def _attempts(error: MemqError, *, on_connect: bool = False) -> list[str]:
    """Send one block whose first attempt fails with ``error``; the writers tried."""
    config = ProducerConfig.model_validate(
        {"bootstrap.servers": ",".join(WRITERS), "acks": 1, "retry.backoff.ms": 1}
    )
    done: list[MemqError | None] = []
    block = OpenBlock("t")
    assert block.try_add(1, None, b"v", None, 1, None) is not None
    with ThreadPoolExecutor(1) as encoder:
        sender = Sender(
            config,
            list(WRITERS),
            producer_id=1,
            epoch=0,
            encoder=encoder,
            finish=lambda b, err, meta: done.append(err),
        )
        pool = _Pool(error, on_connect=on_connect)
        sender.pool = pool  # type: ignore[assignment]
        sender.meta = _Meta(WRITERS)  # type: ignore[assignment]
        asyncio.run(asyncio.wait_for(sender.send(block.seal(0)), 10))
    assert done == [None]  # acknowledged on the retry
    assert sender.retries == 1
    return pool.attempts


@pytest.mark.parametrize(
    "error",
    [
        ConnectionLostError("connection dropped after the request was sent"),
        RequestTimeoutError("no answer in time"),
        StorageError("the batch holding the block failed to upload"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_writer_that_may_hold_the_block_gets_the_retry(error: MemqError) -> None:
    assert _attempts(error) == ["A:1", "A:1"]


@pytest.mark.parametrize(
    "error",
    [
        NotWriterError("not a writer of t"),
        BrokerUnreachableError("refused during the request"),
        BrokerShuttingDownError("shutting down"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_writer_that_cannot_hold_the_block_is_left_for_another(error: MemqError) -> None:
    assert _attempts(error) == ["A:1", "B:1"]


def test_a_refused_connection_moves_the_retry_to_another_writer() -> None:
    refused = BrokerUnreachableError("cannot connect to broker A:1: Connection refused")
    assert _attempts(refused, on_connect=True) == ["A:1", "B:1"]
