"""Where clients find brokers, and the settings that come with them.

:func:`resolve_client` is the one place a producer, consumer or admin client decides
which brokers it talks to:

1. ``bootstrap.servers`` when given;
2. else ``MEMQ_BOOTSTRAP`` (what ``memq`` commands and scripts may set);
3. else the local stack's client profile (``<MEMQ_STATE_DIR or .memq>/client.json``,
   written by ``memq dev up``; see :mod:`memq.client.profile`);
4. else a clear error.

When the brokers are the local stack's (by 3, or because 1/2 name the stack's brokers),
the profile also supplies what the stack needs: its TLS CA and token (unless the client
sets its own security) and its storage settings (endpoint and throwaway credentials of
the local S3), which clients hand to their storage readers. Nothing is written to
``os.environ``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr

from memq.client.pool import ConnectionPool, MetadataCache
from memq.client.profile import StackProfile, default_state_dir, load_profile
from memq.config import SecureClientConfig
from memq.errors import ConfigError
from memq.protocol import ClusterMetadata

if TYPE_CHECKING:
    from memq.security import ClientSecurity

C = TypeVar("C", bound=SecureClientConfig)

__all__ = ["Endpoints", "fetch_metadata", "resolve_client", "split_servers"]


def split_servers(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


@dataclass(frozen=True)
class Endpoints:
    """The brokers a client uses and what came with them."""

    bootstrap: list[str]
    #: Storage reader settings from the local stack's profile (endpoint, credentials).
    storage: dict[str, Any] = field(default_factory=dict)
    #: The brokers are a local stack's (auditing is on by default there).
    local: bool = False
    #: The local stack's profile, when it applies.
    profile: StackProfile | None = None


def resolve_client(cfg: C, configured: list[str]) -> tuple[C, Endpoints]:
    """``cfg`` (with the local stack's security when it applies) and the endpoints to use.

    ``configured`` is the client's ``bootstrap.servers`` as a list (may be empty).
    """
    brokers = configured or split_servers(os.environ.get("MEMQ_BOOTSTRAP"))
    profile = load_profile()
    if not brokers:
        if profile is None:
            raise ConfigError(
                "no bootstrap.servers given, MEMQ_BOOTSTRAP is not set, and no local stack "
                f"profile exists under {default_state_dir().absolute()}: set bootstrap.servers "
                "(host:port,...) or run `memq dev up`"
            )
        brokers = list(profile.bootstrap_servers)
    elif profile is not None and not profile.matches(brokers):
        profile = None
    if profile is None:
        return cfg, Endpoints(brokers)
    return _with_profile_security(cfg, profile), Endpoints(
        brokers, dict(profile.storage), local=True, profile=profile
    )


def _with_profile_security(cfg: C, profile: StackProfile) -> C:
    """The stack's TLS CA, unless the client configured TLS itself, and its token, unless
    the client has its own (a token of its own kept the CA out: it went in plaintext)."""
    own_tls = cfg.security_protocol != "plaintext" or cfg.ssl_ca_location
    if own_tls or profile.ssl_ca_location is None:
        return cfg
    update: dict[str, Any] = {
        "security_protocol": "ssl",
        "ssl_ca_location": Path(profile.ssl_ca_location),
    }
    token = profile.token()
    if token and not cfg.auth_token:
        update["auth_token"] = SecretStr(token)
    return cfg.model_copy(update=update)


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

    answer: Future[ClusterMetadata] = Future()

    def run() -> None:
        try:
            answer.set_result(asyncio.run(go()))
        except BaseException as e:  # (handed to the caller, whatever it is)
            answer.set_exception(e)

    # A daemon thread, not a pool's: a caller that stops waiting (at this deadline, or a
    # process exiting on SIGTERM) is not held up by a request still under way; a pool's
    # worker is joined when the pool (and the interpreter) shuts down.
    threading.Thread(target=run, name="memq-metadata", daemon=True).start()
    return answer.result(timeout * 3)
