"""Where clients find brokers and metadata when they are not told."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from memq.client.pool import ConnectionPool, MetadataCache
from memq.errors import MemqError
from memq.protocol import ClusterMetadata

__all__ = ["dev_stack_bootstrap", "fetch_metadata", "resolve_bootstrap"]


def dev_stack_bootstrap() -> list[str]:
    """Broker addresses of the running local stack, or a clear error."""
    from memq.devstack import DevStack

    stack = DevStack()
    state = stack.load()
    brokers = state.extra.get("brokers", []) if state else []
    addrs = [b["endpoint"] for b in brokers if b.get("endpoint")]
    if not addrs or state is None:
        raise MemqError(
            "no bootstrap.servers given and no local stack with brokers under "
            f"{stack.state_dir}: run `memq dev up` or set bootstrap.servers"
        )
    # Readers fetch objects from the stack's S3 (moto): hand them its throwaway
    # credentials unless the environment already has some.
    for k, v in state.aws_env().items():
        os.environ.setdefault(k, v)
    return addrs


def resolve_bootstrap(configured: list[str]) -> list[str]:
    return configured or dev_stack_bootstrap()


def fetch_metadata(
    bootstrap: list[str], topics: list[str] | None, *, timeout: float = 10.0
) -> ClusterMetadata:
    """Ask the brokers for metadata from synchronous code (safe inside a running loop)."""

    async def go() -> ClusterMetadata:
        pool = ConnectionPool(connect_timeout=timeout, max_frame_size=16 << 20)
        try:
            return await MetadataCache(bootstrap, pool, max_age=0, timeout=timeout).fetch(topics)
        finally:
            pool.close()

    with ThreadPoolExecutor(1, thread_name_prefix="memq-metadata") as ex:
        return ex.submit(asyncio.run, go()).result(timeout * 3)
