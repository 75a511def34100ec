"""Connections to brokers by address, and cluster metadata with refresh."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING

from memq.client.connection import ClientConnection
from memq.errors import ConnectionLostError, MemqError, UnknownTopicError
from memq.formats.frames import RequestType
from memq.protocol import ClusterMetadata, MetadataRequest, TopicMetadata, decode_msg, encode_msg

if TYPE_CHECKING:
    from memq.security import ClientSecurity

__all__ = ["ConnectionPool", "MetadataCache"]

log = logging.getLogger(__name__)


class ConnectionPool:
    """One connection per broker address, reopened after it fails."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_frame_size: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.security = security
        self._conns: dict[str, ClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, address: str) -> ClientConnection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(address, asyncio.Lock())
        async with lock:
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                conn = await ClientConnection.open(
                    address,
                    timeout=self.connect_timeout,
                    max_frame_size=self.max_frame_size,
                    security=self.security,
                )
                self._conns[address] = conn
        return conn

    def drop(self, address: str) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for addr in list(self._conns):
            self.drop(addr)


class MetadataCache:
    """Topic metadata from any bootstrap broker, cached for ``max_age`` seconds."""

    def __init__(
        self, bootstrap: list[str], pool: ConnectionPool, *, max_age: float, timeout: float
    ) -> None:
        if not bootstrap:
            raise MemqError("no bootstrap brokers given: set bootstrap.servers (host:port,...)")
        self.bootstrap = bootstrap
        self.pool = pool
        self.max_age = max_age
        self.timeout = timeout
        self._topics: dict[str, tuple[float, TopicMetadata]] = {}
        self.cluster: ClusterMetadata | None = None
        self._rr = itertools.count()
        #: Topics for the next metadata request, and the future it resolves.
        self._batch: tuple[list[str], asyncio.Future[None]] | None = None
        self._runner: asyncio.Task[None] | None = None
        #: No background refresh before this (monotonic): one failed, or one is queued.
        self._refresh_after = 0.0

    def _candidates(self) -> list[str]:
        known = [b.address for b in self.cluster.brokers] if self.cluster else []
        seen: dict[str, None] = dict.fromkeys(known + self.bootstrap)
        addrs = list(seen)
        start = next(self._rr) % len(addrs)
        return addrs[start:] + addrs[:start]

    async def fetch(self, topics: list[str] | None) -> ClusterMetadata:
        """Ask brokers in turn until one answers."""
        errors: list[str] = []
        final: list[MemqError] = []  # non-retriable failures (e.g. authentication)
        for addr in self._candidates():
            try:
                conn = await self.pool.get(addr)
                resp = await conn.request(
                    RequestType.METADATA,
                    encode_msg(MetadataRequest(topics=topics)),
                    timeout=self.timeout,
                )
            except MemqError as e:
                if isinstance(e, ConnectionLostError):
                    self.pool.drop(addr)
                errors.append(f"{addr}: {e}")
                if not e.retriable:
                    final.append(e)
                continue
            meta = decode_msg(ClusterMetadata, resp.body, "METADATA response")
            self.update(meta)
            return meta
        text = "no broker answered a metadata request: " + "; ".join(errors)
        if final and len(final) == len(errors):  # retrying cannot help: say why, typed
            raise type(final[0])(text)
        raise ConnectionLostError(text)

    def update(self, meta: ClusterMetadata) -> None:
        self.cluster = meta
        now = time.monotonic()
        for name, t in meta.topics.items():
            self._topics[name] = (now, t)

    def cached(self, topic: str) -> TopicMetadata | None:
        """The last metadata seen for ``topic`` (however old), without asking."""
        entry = self._topics.get(topic)
        return entry[1] if entry else None

    def invalidate(self, topic: str) -> None:
        self._topics.pop(topic, None)

    async def topic(self, topic: str, *, refresh: bool = False) -> TopicMetadata:
        """``topic``'s metadata. Known metadata is answered at once, however old: past
        ``max_age`` it is refreshed in the background, in one request with every other
        stale topic (a client of 1,000 topics once asked for them one by one, in turn,
        while its sends waited: a 20-40 s stall every ``max_age``). Unknown topics, and
        ``refresh`` (the broker said this metadata is wrong), wait for the next request,
        which carries every topic asked for meanwhile."""
        entry = self._topics.get(topic)
        if entry is not None and not refresh:
            if time.monotonic() - entry[0] > self.max_age:
                self._refresh_stale()
            return entry[1]
        await asyncio.shield(self._request([topic]))  # (a cancelled waiter, not the request)
        entry = self._topics.get(topic)
        if entry is None:
            raise UnknownTopicError(f"no metadata for topic {topic!r}")
        return entry[1]

    def _request(self, topics: list[str]) -> asyncio.Future[None]:
        """The future of the next metadata request, with ``topics`` added to it."""
        if self._batch is None:
            self._batch = ([], asyncio.get_running_loop().create_future())
        batch, fut = self._batch
        batch.extend(t for t in topics if t not in batch)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())
        return fut

    async def _run(self) -> None:
        """Send the queued requests one at a time; each resolves its waiters."""
        while self._batch is not None:
            topics, fut = self._batch
            self._batch = None
            try:
                await self.fetch(topics)
            except Exception as e:
                fut.set_exception(e)
            else:
                fut.set_result(None)

    def _refresh_stale(self) -> None:
        """Queue one background request for every topic past ``max_age`` (at most one a
        second, and none while one is queued): sends go on with the metadata known."""
        now = time.monotonic()
        if now < self._refresh_after:
            return
        stale = [t for t, (at, _) in self._topics.items() if now - at > self.max_age]
        if not stale:
            return
        self._refresh_after = now + 1.0
        self._request(stale).add_done_callback(self._refreshed)

    def _refreshed(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            return
        if (e := fut.exception()) is not None:  # the metadata known is kept, and used
            log.warning("background metadata refresh failed (kept the last known): %s", e)

    def address_of(self, broker_id: str) -> str | None:
        if self.cluster is None:
            return None
        return next((b.address for b in self.cluster.brokers if b.id == broker_id), None)
