"""Admin requests to any broker: topics and cluster status (``memq topic``, ``memq cluster``)."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack

from memq.client.bootstrap import resolve_bootstrap, with_local_stack_security
from memq.client.connection import ClientConnection
from memq.config import SecureClientConfig
from memq.errors import ConnectionLostError, MemqError
from memq.formats.frames import RequestType
from memq.security import ClientSecurity

__all__ = ["AdminClient"]


class AdminClient:
    """Synchronous admin calls; each asks the bootstrap brokers in turn until one answers."""

    def __init__(
        self,
        bootstrap: list[str] | str | None = None,
        timeout: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        if isinstance(bootstrap, str):
            bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.bootstrap = resolve_bootstrap(bootstrap or [])
        self.timeout = timeout
        if security is None:  # MEMQ_SSL_CA_LOCATION / MEMQ_AUTH_TOKEN, else the local stack's
            env = {
                k: os.environ[v]
                for k, v in (("ssl.ca.location", "MEMQ_SSL_CA_LOCATION"),
                             ("auth.token", "MEMQ_AUTH_TOKEN"))
                if os.environ.get(v)
            }  # fmt: skip
            local = with_local_stack_security(
                SecureClientConfig.from_mapping(env), uses_local_stack=not bootstrap and not env
            )
            security = local.security()
        self.security = security

    def _call(self, req_type: RequestType, body: dict[str, Any]) -> Any:
        payload: bytes = msgpack.packb(body, use_bin_type=True)

        async def go() -> Any:
            errors = []
            for addr in self.bootstrap:
                try:
                    conn = await ClientConnection.open(
                        addr, timeout=self.timeout, security=self.security
                    )
                except ConnectionLostError as e:
                    errors.append(str(e))
                    continue
                try:
                    resp = await conn.request(req_type, payload, timeout=self.timeout)
                finally:
                    conn.close()
                return msgpack.unpackb(bytes(resp.body), raw=False)
            raise ConnectionLostError("no broker answered: " + "; ".join(errors))

        with ThreadPoolExecutor(1, thread_name_prefix="memq-admin") as ex:
            return ex.submit(asyncio.run, go()).result(self.timeout * 2)

    def create_topic(
        self, name: str, settings: dict[str, Any] | None = None, *, if_not_exists: bool = False
    ) -> dict[str, Any]:
        """Create a topic from the cluster's topic defaults plus ``settings`` (dotted keys)."""
        out: dict[str, Any] = self._call(
            RequestType.TOPIC_CREATE,
            {"name": name, "settings": settings or {}, "if_not_exists": if_not_exists},
        )
        return out

    def update_topic(self, name: str, settings: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._call(
            RequestType.TOPIC_UPDATE, {"name": name, "settings": settings}
        )
        return out

    def delete_topic(self, name: str) -> None:
        self._call(RequestType.TOPIC_DELETE, {"name": name})

    def list_topics(self) -> list[str]:
        return list(self._call(RequestType.TOPIC_LIST, {})["topics"])

    def cluster_status(self) -> dict[str, Any]:
        out: dict[str, Any] = self._call(RequestType.CLUSTER_STATUS, {})
        return out

    def list_acls(self) -> list[dict[str, Any]]:
        return list(self._call(RequestType.ACL_LIST, {})["entries"])

    def add_acl(self, principal: str, topic: str, ops: list[str]) -> list[dict[str, Any]]:
        entry = {"principal": principal, "topic": topic, "ops": ops}
        return list(self._call(RequestType.ACL_ADD, {"entry": entry})["entries"])

    def remove_acl(self, principal: str, topic: str, ops: list[str]) -> list[dict[str, Any]]:
        entry = {"principal": principal, "topic": topic, "ops": ops}
        return list(self._call(RequestType.ACL_REMOVE, {"entry": entry})["entries"])

    def describe_topic(self, name: str) -> dict[str, Any]:
        from memq.client.bootstrap import fetch_metadata

        meta = fetch_metadata(self.bootstrap, [name], timeout=self.timeout)
        t = meta.topics.get(name)
        if t is None or t.error:
            raise MemqError(f"topic {name!r}: {t.error if t else 'unknown'}")
        status = self.cluster_status().get("topics", {}).get(name, {})
        return {**t.model_dump(mode="json"), **status, "cluster": meta.cluster}
