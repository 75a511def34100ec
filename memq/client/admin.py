"""Admin requests to any broker: topics and cluster status (``memq topic``, ``memq cluster``)."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
from pydantic import ValidationError

from memq.acl import AclEntry
from memq.client.bootstrap import resolve_client, split_servers
from memq.client.connection import ClientConnection
from memq.config import SecureClientConfig
from memq.errors import (
    AuthorizationError,
    ConnectionLostError,
    InvalidRequestError,
    MemqError,
    UnknownTopicError,
)
from memq.protocol import (
    AclAdd,
    AclList,
    AclRemove,
    AdminRequest,
    ClusterStatusRequest,
    TopicCreate,
    TopicDelete,
    TopicList,
    TopicUpdate,
    encode_msg,
)
from memq.security import ClientSecurity

__all__ = ["AdminClient"]


def _entry(principal: str, topic: str, ops: list[str]) -> AclEntry:
    try:
        return AclEntry.model_validate({"principal": principal, "topic": topic, "ops": ops})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequestError(f"acl entry: {where}: {first['msg']}") from None


class AdminClient:
    """Synchronous admin calls; each asks the bootstrap brokers in turn until one answers."""

    def __init__(
        self,
        bootstrap: list[str] | str | None = None,
        timeout: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        if isinstance(bootstrap, str):
            bootstrap = split_servers(bootstrap)
        # Security: MEMQ_SSL_CA_LOCATION / MEMQ_AUTH_TOKEN, else the local stack's.
        env = {
            k: os.environ[v]
            for k, v in (("ssl.ca.location", "MEMQ_SSL_CA_LOCATION"),
                         ("auth.token", "MEMQ_AUTH_TOKEN"))
            if os.environ.get(v)
        }  # fmt: skip
        cfg, endpoints = resolve_client(SecureClientConfig.from_mapping(env), bootstrap or [])
        self.bootstrap = endpoints.bootstrap
        self.timeout = timeout
        self.security = security if security is not None else cfg.security()

    def _call(self, req: AdminRequest) -> Any:
        req_type, payload = req.type, encode_msg(req)

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
            TopicCreate(name=name, settings=settings or {}, if_not_exists=if_not_exists)
        )
        return out

    def placement(self, name: str, timeout: float = 30.0) -> dict[str, Any] | None:
        """``name``'s entry of the cluster status (writers, shortfall_mbps,
        unplaced_writers, ...) once the governor has placed it: writers assigned, or what
        it could not place; None if it has not within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            t = self.cluster_status().get("topics", {}).get(name)
            if t and (t.get("writers") or t.get("shortfall_mbps") or t.get("unplaced_writers")):
                return dict(t)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)  # the governor assigns on ZooKeeper's watch: soon

    def update_topic(self, name: str, settings: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._call(TopicUpdate(name=name, settings=settings))
        return out

    def delete_topic(self, name: str) -> dict[str, Any] | None:
        """Delete topic ``name`` (or, deleted before, find it again); returns its config
        (where its data is) when the brokers say, until :meth:`forget_topic`."""
        left: dict[str, Any] | None = self._call(TopicDelete(name=name)).get("leftovers")
        return left

    def forget_topic(self, name: str) -> None:
        """The deleted topic's data is purged: free its name (a new topic may take it)."""
        self._call(TopicDelete(name=name, forget=True))

    def list_topics(self) -> list[str]:
        return list(self._call(TopicList())["topics"])

    def cluster_status(self) -> dict[str, Any]:
        out: dict[str, Any] = self._call(ClusterStatusRequest())
        return out

    def list_acls(self) -> list[dict[str, Any]]:
        return list(self._call(AclList())["entries"])

    def add_acl(self, principal: str, topic: str, ops: list[str]) -> list[dict[str, Any]]:
        return list(self._call(AclAdd(entry=_entry(principal, topic, ops)))["entries"])

    def remove_acl(self, principal: str, topic: str, ops: list[str]) -> list[dict[str, Any]]:
        return list(self._call(AclRemove(entry=_entry(principal, topic, ops)))["entries"])

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Metadata, assignment and (on a cluster) ``settings``: the topic's own settings
        except storage and notification (metadata shows their public part)."""
        from memq.client.bootstrap import fetch_metadata

        meta = fetch_metadata(self.bootstrap, [name], timeout=self.timeout, security=self.security)
        t = meta.topics.get(name)
        if t is None or t.error:
            raise UnknownTopicError(t.error if t and t.error else f"unknown topic {name!r}")
        try:
            status = self.cluster_status().get("topics", {}).get(name, {})
        except AuthorizationError:  # a topic admin: the cluster's placement is not theirs
            status = {}
        out = {**t.model_dump(mode="json"), **status, "cluster": meta.cluster}
        settings = self._topic_settings(name)
        if settings is not None:
            out["settings"] = settings
        return out

    def _topic_settings(self, name: str) -> dict[str, Any] | None:
        """The stored settings of an existing topic, None when the brokers cannot say
        (standalone, or not authorised). The admin protocol has no read request: a create
        with ``if_not_exists`` of a topic the cluster lists answers its stored settings
        and changes nothing."""
        try:
            if name not in self.list_topics():
                return None
            cfg = self.create_topic(name, {}, if_not_exists=True)
        except MemqError:
            return None
        return {k: v for k, v in cfg.items() if k not in {"name", "storage", "notification"}}
