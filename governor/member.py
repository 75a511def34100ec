"""A broker's membership in a cluster: registration, assignments, topics, admin.

- Registers an ephemeral node with its address, capacity and rack. After a session is
  lost (expired), it re-registers as soon as the connection is back, so a broker never
  stays invisible (a known failure mode of the Java original). While SUSPENDED it keeps
  serving its current assignment.
- Watches the assignment and the topic configs; starts, reconfigures or stops topic
  processors on the broker's event loop (a processor being removed seals and uploads its
  open batch and answers its pending writes first).
- Serves metadata (writers, settings) from ZooKeeper and the admin requests behind
  ``memq topic ...`` and ``memq cluster status`` (their ZooKeeper work:
  :mod:`memq.governor.admin`).
- Runs a :class:`governor.governor.Governor` contender.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from memq.acl import AclEntry
from memq.broker.cluster import AdminResponse, TopicHost
from memq.config import BrokerConfig, TopicConfig
from memq.errors import ConfigError, CoordinationError
from memq.governor.acls import edit_acls, watch_acls
from memq.governor.admin import (
    cluster_status,
    create_topic,
    delete_topic,
    forget_topic,
    update_topic,
)
from memq.governor.governor import Governor
from memq.governor.metrics import ClusterMetrics
from memq.governor.zk import (
    AssignmentRecord,
    BrokerRecord,
    Layout,
    ZkClient,
    dumps,
    make_client,
    now_ms,
    read_json,
)
from memq.protocol import (
    AclAdd,
    AclList,
    AclListResponse,
    AclRemove,
    AdminRequest,
    BrokerInfo,
    ClusterStatus,
    TopicCreate,
    TopicDelete,
    TopicDeleted,
    TopicList,
    TopicListResponse,
    TopicUpdate,
)

__all__ = ["ClusterMember"]

log = logging.getLogger(__name__)


class ClusterMember:
    """The clustered part of one broker: a :class:`memq.broker.cluster.ClusterView`
    backed by ZooKeeper, following the governor's assignment for its
    :class:`memq.broker.cluster.TopicHost`."""

    clustered = True

    def __init__(self, config: BrokerConfig, metrics: ClusterMetrics | None = None) -> None:
        if config.zookeeper is None:
            raise ConfigError("a cluster member needs the broker's zookeeper settings")
        self.config = config
        self.zk_config = config.zookeeper
        self.metrics = metrics or ClusterMetrics()
        self.layout = Layout(self.zk_config.chroot)
        self.broker_id = config.broker_id
        self._host: TopicHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._zk: ZkClient | None = None
        self._governor: Governor | None = None
        self._started_at = now_ms()
        self._stop_reports = threading.Event()
        self._reporter: threading.Thread | None = None
        self._brokers: dict[str, BrokerRecord] = {}
        self._topics: dict[str, TopicConfig] = {}
        self._watched: set[str] = set()  # topics with a data watch installed
        self._assignment = AssignmentRecord()
        self._lock = threading.Lock()
        self._reregister = threading.Event()
        self._stopping = False
        self._reconciling: asyncio.Lock | None = None  # created on the broker's loop
        self.registrations = 0

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def host(self) -> TopicHost:
        if self._host is None:
            raise CoordinationError("this cluster member has not joined yet")
        return self._host

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise CoordinationError("this cluster member has not joined yet")
        return self._loop

    async def join(self, host: TopicHost) -> None:
        """Connect to ZooKeeper, register ``host``, follow assignments, run for governor."""
        self._host = host
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self.start)

    @property
    def zk(self) -> ZkClient:
        if self._zk is None:
            raise CoordinationError("this cluster member is not connected to ZooKeeper yet")
        return self._zk

    @property
    def governor(self) -> Governor:
        if self._governor is None:
            raise CoordinationError("this cluster member has not joined yet")
        return self._governor

    async def leave(self) -> None:
        if self._zk is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.stop)

    def start(self) -> None:
        self._zk = make_client(self.zk_config)
        metrics = self.metrics
        self._governor = Governor(
            self.zk,
            self.layout,
            self.broker_id,
            on_leadership=lambda leading: metrics.governor_leader.set(1 if leading else 0),
            algorithm=self.zk_config.assignment,
        )
        for path in (self.layout.brokers, self.layout.topics, self.layout.election):
            self.zk.ensure_path(path)
        self.zk.add_listener(self._on_state)
        self.register()
        self.zk.ChildrenWatch(self.layout.brokers, self._brokers_changed)
        self.zk.ChildrenWatch(self.layout.topics, self._topics_changed)
        self.zk.DataWatch(self.layout.assignments, self._assignment_changed)
        watch_acls(self.zk, self.layout.root, self._acls_changed)
        self.governor.start()
        self._reporter = threading.Thread(
            target=self._report_loop, name="memq-load-report", daemon=True
        )
        self._reporter.start()

    def _report_loop(self) -> None:
        """Publish measured per-topic ingest and free pool memory in this broker's node
        every ``load_report_ms`` (the governor plans with them on its next look)."""
        interval = self.zk_config.load_report_ms / 1000
        while not self._stop_reports.wait(interval):
            try:
                self._publish_record()
            except Exception as e:  # a disconnection: the next round tries again
                log.debug("load report not published: %s", e)

    def _publish_record(self) -> None:
        from kazoo.protocol.states import KazooState

        if self._stopping or self.zk.state != KazooState.CONNECTED:
            return
        path = self.layout.broker(self.broker_id)
        _, stat = self.zk.get(path)
        if stat.ephemeralOwner != self.zk.client_id[0]:
            return  # not ours (a re-registration is under way)
        self.zk.set(path, dumps(self.record()), version=stat.version)

    def _acls_changed(self, entries: list[AclEntry]) -> None:
        self.host.set_acls(entries)

    def record(self) -> BrokerRecord:
        info = self.host.info
        load = self.host.load_report()
        return BrokerRecord(
            id=self.broker_id,
            host=info.host,
            port=info.port,
            http_port=info.http_port,
            kafka_port=info.kafka_port,
            capacity_mbps=self.config.capacity_mbps,
            rack=info.rack,
            started_at=self._started_at,
            topic_mbps=load.topic_mbps,
            pool_limit_bytes=load.pool_limit_bytes,
            pool_free_bytes=load.pool_free_bytes,
            reported_at=now_ms(),
        )

    def register(self) -> None:
        """Create this broker's ephemeral node (replacing one left by a dead session)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = self.layout.broker(self.broker_id)
        data = dumps(self.record())
        for _ in range(10):
            try:
                self.zk.create(path, data, ephemeral=True)
                self.registrations += 1
                self.metrics.zk_registrations.inc()
                log.info("broker %s registered in ZooKeeper", self.broker_id)
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    return  # already ours
                # Left by this broker's previous session (a restart): take the id back.
                log.info("removing the stale registration of %s", self.broker_id)
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path, version=stat.version)
        raise CoordinationError(f"could not register broker {self.broker_id} in ZooKeeper")

    def _on_state(self, state: str) -> None:
        # Kazoo calls this on its own thread: never block here.
        if state == "LOST":
            log.warning(
                "ZooKeeper session of %s lost: will re-register on reconnect", self.broker_id
            )
            self._reregister.set()
        elif state == "SUSPENDED":
            log.warning("ZooKeeper connection suspended: serving the current assignment")
        elif state == "CONNECTED" and self._reregister.is_set() and not self._stopping:
            self._reregister.clear()
            threading.Thread(target=self._recover, name="memq-reregister", daemon=True).start()

    def _recover(self) -> None:
        try:
            self.register()
            self._refresh_topics()
            self._assignment_changed(*self.zk.get(self.layout.assignments))
        except Exception:
            log.exception(
                "re-registering %s failed; retrying on the next reconnect", self.broker_id
            )
            self._reregister.set()

    def stop(self) -> None:
        """Deregister first (writers move away at once), then leave the election."""
        from kazoo.exceptions import NoNodeError
        from kazoo.protocol.states import KazooState

        self._stopping = True
        # Bounded: with ZooKeeper unreachable a plain delete() waits for a reconnect that may
        # never come. Skipping it is safe: the ephemeral node dies with the session anyway.
        if self.zk.state == KazooState.CONNECTED:
            try:
                self.zk.delete_async(self.layout.broker(self.broker_id)).get(timeout=5.0)
            except (NoNodeError, Exception) as e:
                log.debug("deregistering: %s", e)
        else:
            log.warning("ZooKeeper is %s: leaving without deregistering", self.zk.state)
        self._stop_reports.set()
        self.governor.stop()
        self.zk.remove_listener(self._on_state)
        self.zk.stop()
        self.zk.close()

    # --- watches (kazoo threads) ------------------------------------------------------

    def _brokers_changed(self, children: list[str]) -> bool:
        found: dict[str, BrokerRecord] = {}
        try:
            for bid in children:
                data, _ = read_json(self.zk, self.layout.broker(bid))
                if data:
                    found[bid] = BrokerRecord.model_validate(data)
        except Exception as e:  # connection loss: the watch fires again once reconnected
            log.debug("reading brokers: %s", e)
            return not self._stopping
        with self._lock:
            self._brokers = found
        return not self._stopping

    def _topics_changed(self, children: list[str]) -> bool:
        if self._stopping:
            return False
        for name in children:
            if name not in self._watched:
                try:
                    self.zk.DataWatch(self.layout.topic(name), self._topic_watch(name))
                    self._watched.add(name)
                except Exception as e:
                    log.debug("watching topic %s: %s", name, e)
        with self._lock:
            for gone in set(self._topics) - set(children):
                del self._topics[gone]
        self._apply()
        return not self._stopping

    def _refresh_topics(self) -> None:
        self._topics_changed(self.zk.get_children(self.layout.topics))

    def _topic_watch(self, name: str) -> Any:
        def changed(data: bytes | None, _stat: Any, *_event: Any) -> bool:
            if data is None:  # deleted
                with self._lock:
                    self._topics.pop(name, None)
                    self._watched.discard(name)
                self._apply()
                return False
            try:
                import json

                cfg = TopicConfig.model_validate(json.loads(data))
            except Exception as e:
                log.error("topic %s has an invalid config in ZooKeeper (%s): ignoring it", name, e)
                return not self._stopping
            with self._lock:
                self._topics[name] = cfg
            self._apply()
            return not self._stopping

        return changed

    def _assignment_changed(self, data: bytes | None, _stat: Any, *_event: Any) -> bool:
        import json

        rec = AssignmentRecord.model_validate(json.loads(data)) if data else AssignmentRecord()
        with self._lock:
            previous = self._assignment
            self._assignment = rec
        m = self.metrics
        m.assignment_version.set(rec.version)
        for topic in set(previous.shortfall) - set(rec.shortfall):
            m.shortfall.labels(topic).set(0)
        for topic, mbps in rec.shortfall.items():
            m.shortfall.labels(topic).set(mbps)
        for topic in set(previous.unplaced) - set(rec.unplaced):
            m.unplaced.labels(topic).set(0)
        for topic, n in rec.unplaced.items():
            m.unplaced.labels(topic).set(n)
        self._apply()
        return not self._stopping

    def _apply(self) -> None:
        """Make the broker's processors match its assignment (on the broker's loop)."""
        if self._stopping or self.loop.is_closed():
            return
        with self._lock:
            mine = {
                t: self._topics[t]
                for t, ws in self._assignment.writers.items()
                if self.broker_id in ws and t in self._topics
            }
        asyncio.run_coroutine_threadsafe(self._reconcile(mine), self.loop)

    async def _reconcile(self, mine: dict[str, TopicConfig]) -> None:
        # One reconciliation at a time: watch events may fire in quick succession.
        if self._reconciling is None:
            self._reconciling = asyncio.Lock()
        async with self._reconciling:
            await self._reconcile_once(mine)

    async def _reconcile_once(self, mine: dict[str, TopicConfig]) -> None:
        host = self.host
        if host.draining:
            return
        for name, running in host.hosted_topics().items():
            cfg = mine.get(name)
            if cfg is None or cfg != running:
                log.info(
                    "broker %s stops writing %s (%s)",
                    self.broker_id,
                    name,
                    "reassigned" if cfg is None else "reconfigured",
                )
                await host.stop_topic(name, "reassign")
        hosted = host.hosted_topics()
        for name, cfg in mine.items():
            if name not in hosted:
                try:
                    await host.start_topic(cfg)
                    log.info("broker %s now writes %s", self.broker_id, name)
                except Exception:
                    log.exception("starting topic %s failed", name)

    # --- ClusterView --------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        with self._lock:
            recs = list(self._brokers.values())
        return [
            BrokerInfo(
                id=r.id,
                host=r.host,
                port=r.port,
                http_port=r.http_port,
                rack=r.rack,
                kafka_port=r.kafka_port,
            )
            for r in sorted(recs, key=lambda r: r.id)
        ]

    def writers(self, topic: str) -> list[str]:
        with self._lock:
            return [w for w in self._assignment.writers.get(topic, []) if w in self._brokers]

    def governor_id(self) -> str | None:
        c = self.governor.contenders()
        return c[0] if c else None

    def topic_config(self, topic: str) -> TopicConfig | None:
        with self._lock:
            return self._topics.get(topic)

    def topic_names(self) -> list[str]:
        with self._lock:
            return sorted(self._topics)

    async def create_topic(
        self, name: str, settings: dict[str, Any] | None = None, if_not_exists: bool = True
    ) -> TopicConfig:
        cfg: TopicConfig = await self._blocking(self._create, name, settings or {}, if_not_exists)
        return cfg

    # --- admin --------------------------------------------------------------------------

    async def _blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _create(self, name: str, settings: dict[str, Any], if_not_exists: bool) -> TopicConfig:
        cfg, created = create_topic(
            self.zk, self.layout, self.config, name, settings, if_not_exists
        )
        return self._remember(name, cfg) if created else cfg

    def _remember(self, name: str, cfg: TopicConfig) -> TopicConfig:
        """Read your writes: this broker's answers (metadata, describe) show a topic it
        just created or changed at once, before ZooKeeper's watch reports it."""
        with self._lock:
            self._topics[name] = cfg
        return cfg

    def _update(self, name: str, settings: dict[str, Any]) -> TopicConfig:
        return self._remember(name, update_topic(self.zk, self.layout, self.config, name, settings))

    def status(self) -> dict[str, Any]:
        with self._lock:
            brokers = dict(self._brokers)
            a = self._assignment
            topics = dict(self._topics)
        return cluster_status(
            self.config.cluster, self.zk_config.assignment, self.governor_id(), brokers, a, topics
        )

    async def admin(self, req: AdminRequest) -> AdminResponse:
        match req:
            case AclList():
                entries = await self._blocking(edit_acls, self.zk, self.layout.root, "list", None)
                return AclListResponse(entries=entries)
            case AclAdd() | AclRemove():
                op = "add" if isinstance(req, AclAdd) else "remove"
                entries = await self._blocking(edit_acls, self.zk, self.layout.root, op, req.entry)
                return AclListResponse(entries=entries)
            case TopicCreate():
                cfg = await self._blocking(self._create, req.name, req.nested(), req.if_not_exists)
                return cfg.model_dump(mode="json", by_alias=True)
            case TopicUpdate():
                cfg = await self._blocking(self._update, req.name, req.nested())
                return cfg.model_dump(mode="json", by_alias=True)
            case TopicDelete(forget=True):
                await self._blocking(forget_topic, self.zk, self.layout, req.name)
                return TopicDeleted(deleted=req.name)
            case TopicDelete():
                left = await self._blocking(delete_topic, self.zk, self.layout, req.name)
                return TopicDeleted(deleted=req.name, leftovers=left)
            case TopicList():
                return TopicListResponse(topics=self.topic_names())
            case _:
                return ClusterStatus.model_validate(self.status())
