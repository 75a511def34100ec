"""Where clients find brokers and metadata when they are not told."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memq.client.pool import ConnectionPool, MetadataCache
from memq.errors import MemqError
from memq.protocol import ClusterMetadata

if TYPE_CHECKING:
    from memq.security import ClientSecurity

from memq.config import SecureClientConfig

C = TypeVar("C", bound=SecureClientConfig)

__all__ = [
    "dev_stack_bootstrap",
    "dev_stack_security",
    "fetch_metadata",
    "resolve_bootstrap",
    "with_local_stack_security",
]


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


def dev_stack_security() -> dict[str, Any]:
    """Client settings (field names) for the local stack's TLS and token, if it has them."""
    from pydantic import SecretStr

    from memq.devstack import DevStack

    state = DevStack().load()
    tls = state.extra.get("tls") if state else None
    if not tls:
        return {}
    return {
        "security_protocol": "ssl",
        "ssl_ca_location": Path(tls["ca_file"]),
        "auth_token": SecretStr(Path(tls["token_file"]).read_text().strip()),
    }


def with_local_stack_security(cfg: C, *, uses_local_stack: bool) -> C:
    """``cfg`` with the local stack's TLS and token when it uses the local stack (no
    bootstrap.servers) and sets no security of its own."""
    if not uses_local_stack or cfg.security_protocol != "plaintext" or cfg.auth_token:
        return cfg
    extra = dev_stack_security()
    return cfg.model_copy(update=extra) if extra else cfg


def resolve_bootstrap(configured: list[str]) -> list[str]:
    return configured or dev_stack_bootstrap()


def fetch_metadata(
    bootstrap: list[str],
    topics: list[str] | None,
    *,
    timeout: float = 10.0,
    security: ClientSecurity | None = None,
) -> ClusterMetadata:
    """Ask the brokers for metadata from synchronous code (safe inside a running loop)."""

    async def go() -> ClusterMetadata:
        pool = ConnectionPool(connect_timeout=timeout, max_frame_size=16 << 20, security=security)
        try:
            return await MetadataCache(bootstrap, pool, max_age=0, timeout=timeout).fetch(topics)
        finally:
            pool.close()

    with ThreadPoolExecutor(1, thread_name_prefix="memq-metadata") as ex:
        return ex.submit(asyncio.run, go()).result(timeout * 3)
