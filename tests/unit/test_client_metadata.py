"""The client's metadata cache: batched requests, stale metadata served while refreshed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from memq.client.pool import ConnectionPool, MetadataCache
from memq.errors import ConnectionLostError, UnknownTopicError
from memq.protocol import ClusterMetadata, TopicMetadata


class Brokers(MetadataCache):
    """A MetadataCache whose requests are answered here: records each request's topics."""

    def __init__(self, known: set[str], max_age: float = 30.0) -> None:
        pool = ConnectionPool(connect_timeout=1, max_frame_size=1 << 20)
        super().__init__(["127.0.0.1:1"], pool, max_age=max_age, timeout=1)
        self.known = known
        self.requests: list[list[str]] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.version = 0

    async def fetch(self, topics: list[str] | None) -> ClusterMetadata:
        self.requests.append(list(topics or []))
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        meta = ClusterMetadata(
            cluster="c",
            broker="b1",
            topics={
                t: TopicMetadata(name=t, writers=[f"w{self.version}"])
                for t in topics or []
                if t in self.known
            },
        )
        self.update(meta)
        return meta


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_topics_asked_for_together_share_requests() -> None:
    async def main() -> tuple[list[list[str]], list[str]]:
        names = [f"t{i}" for i in range(500)]
        b = Brokers(set(names))
        b.gate = asyncio.Event()
        asks = [asyncio.ensure_future(b.topic(n)) for n in names]
        await asyncio.sleep(0)
        b.gate.set()
        got = await asyncio.gather(*asks)
        return b.requests, [m.name for m in got]

    requests, got = run(main())
    assert got == [f"t{i}" for i in range(500)]
    # One request for every topic asked for before it went out (500 one by one before).
    assert len(requests) == 1 and sorted(requests[0]) == sorted(got)


def test_stale_metadata_is_answered_at_once_and_refreshed_in_one_request() -> None:
    async def main() -> None:
        names = [f"t{i}" for i in range(1000)]
        b = Brokers(set(names), max_age=0.05)
        b.gate = asyncio.Event()
        b.gate.set()
        await asyncio.gather(*(b.topic(n) for n in names))
        first = len(b.requests)
        await asyncio.sleep(0.06)  # past max_age: every topic is stale (a clock, not sync)
        b.version = 1
        b.gate.clear()  # the refresh is held: nobody may wait for it
        got = [await asyncio.wait_for(b.topic(n), 0.5) for n in names]
        assert [m.writers for m in got] == [["w0"]] * 1000  # the known metadata, at once
        assert len(b.requests) == first + 1 and sorted(b.requests[-1]) == sorted(names)
        b.gate.set()
        await asyncio.sleep(0.01)
        assert (await b.topic("t7")).writers == ["w1"]  # refreshed
        assert len(b.requests) == first + 1

    run(main())


def test_a_failed_background_refresh_keeps_the_metadata_and_waits_a_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        b = Brokers({"a"}, max_age=0.01)
        await b.topic("a")
        await asyncio.sleep(0.02)
        b.fail = ConnectionLostError("no broker answered")
        with caplog.at_level(logging.WARNING, logger="memq.client.pool"):
            for _ in range(50):  # many calls while failing: one request, not fifty
                assert (await b.topic("a")).writers == ["w0"]
                await asyncio.sleep(0.001)
        assert len(b.requests) == 2
        assert "background metadata refresh failed" in caplog.text

    run(main())


def test_unknown_topics_and_errors_reach_every_waiter() -> None:
    async def main() -> None:
        b = Brokers({"a"})
        with pytest.raises(UnknownTopicError, match="'nope'"):
            await b.topic("nope")
        b.fail = ConnectionLostError("no broker answered")
        b.gate = asyncio.Event()
        asks = [asyncio.ensure_future(b.topic(n)) for n in ("x", "y")]
        await asyncio.sleep(0)
        b.gate.set()
        results = await asyncio.gather(*asks, return_exceptions=True)
        assert all(isinstance(r, ConnectionLostError) for r in results)

    run(main())


def test_a_cancelled_waiter_does_not_cancel_the_request() -> None:
    async def main() -> None:
        b = Brokers({"a"})
        b.gate = asyncio.Event()
        first = asyncio.ensure_future(b.topic("a"))
        second = asyncio.ensure_future(b.topic("a"))
        await asyncio.sleep(0)
        first.cancel()
        b.gate.set()
        assert (await second).name == "a"

    run(main())
