"""Running a broker: in the foreground (``memq broker``) or in a background thread (tests).

The composition root of a broker: with ``zookeeper`` configured, the server gets a
:class:`memq.governor.member.ClusterMember` as its cluster view (its metrics on the
broker's registry); without, it serves standalone.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from memq.audit.client import RoutedAudit
from memq.broker.metrics import BrokerMetrics
from memq.broker.server import BrokerServer
from memq.config import BrokerConfig
from memq.errors import MemqError
from memq.run.ready import announce_ready

__all__ = [
    "READY_MARKER",
    "BrokerThread",
    "broker_audit",
    "build_broker",
    "run_broker",
    "tune_gc",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Printed (with a JSON object) once the broker serves; the dev stack waits for it.
READY_MARKER = "memq broker ready"
#: librdkafka settings of how to reach a Kafka (what the audit producer takes from the
#: notification producer's).
_SECURITY = ("security.", "sasl.", "ssl.")


def build_broker(config: BrokerConfig, **server_kwargs: Any) -> BrokerServer:
    """A broker server wired for its config: clustered through ZooKeeper, or standalone;
    with an ``audit`` section, reporting the blocks it encodes to the audit topic."""
    metrics = server_kwargs.pop("metrics", None) or BrokerMetrics()
    cluster = None
    if config.zookeeper is not None:
        from memq.governor.member import ClusterMember
        from memq.governor.metrics import ClusterMetrics

        cluster = ClusterMember(config, ClusterMetrics(metrics.registry))
    if "audit" not in server_kwargs:
        server_kwargs["audit"] = broker_audit(config)
    return BrokerServer(config, metrics=metrics, cluster=cluster, **server_kwargs)


def broker_audit(config: BrokerConfig) -> RoutedAudit | None:
    """The audit producer of ``config.audit`` (None: off). Without its own Kafka it
    follows the notifications, with the security settings of the broker's own
    ``topic_defaults.notification.producer`` (its secrets are there) under
    ``audit.kafka``."""
    audit = config.audit
    if audit is None:
        return None
    kafka: dict[str, Any] = {}
    if audit.bootstrap_servers is None and config.topic_defaults is not None:
        producer = config.topic_defaults.notification.producer
        kafka.update({k: v for k, v in producer.items() if k.startswith(_SECURITY)})
    kafka.update(audit.kafka)
    return RoutedAudit(
        client=f"memq-broker {config.broker_id}",
        bootstrap=audit.bootstrap_servers,
        topic=audit.topic,
        queue_max=audit.queue_max,
        kafka=kafka,
        setting="audit.bootstrap_servers in the broker config",
    )


def process_metrics(registry: CollectorRegistry) -> None:
    """Add the process's own collectors (``process_*``, ``python_gc_*``, ``python_info``)."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)


def tune_gc(config: BrokerConfig) -> None:
    """Apply ``gc_thresholds`` (process-wide: only ``memq broker`` calls this, not an
    embedding application's :class:`BrokerThread`)."""
    if config.gc_thresholds is not None:
        gc.set_threshold(*config.gc_thresholds)


def run_broker(config: BrokerConfig, ready_file: Path | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then drain: seal, upload, answer everything, return."""

    tune_gc(config)

    async def main() -> None:
        metrics = BrokerMetrics()
        # This process is the broker: its CPU, memory, file descriptors and garbage
        # collections (python_gc_*) go on /metrics too.
        process_metrics(metrics.registry)
        server = build_broker(config, metrics=metrics)
        try:
            await server.start()
        except BaseException:
            await server.shutdown()
            raise
        info: dict[str, object] = {
            "broker": config.broker_id,
            "port": server.port,
            "http_port": server.http_port,
            "kafka_port": server.kafka_port,
        }
        # What exists now (modules, config, clients) lives as long as the process: out of
        # every later collection's way.
        gc.freeze()
        announce_ready(READY_MARKER, info, ready_file)
        await server.serve_until_signal()

    asyncio.run(main())


class BrokerThread:
    """A broker on its own event loop in a daemon thread (tests, embedding)."""

    def __init__(self, config: BrokerConfig, **server_kwargs: Any) -> None:
        self.config = config
        self._kwargs = server_kwargs
        self.loop = asyncio.new_event_loop()
        self.server: BrokerServer | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"broker-{config.broker_id}", daemon=True
        )
        self._started: Future[BrokerServer] = Future()
        self._stopped = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.server = build_broker(self.config, **self._kwargs)
            self.loop.run_until_complete(self.server.start())
        except BaseException as e:
            self._started.set_exception(e)
            self.loop.close()
            self._stopped.set()
            return
        self._started.set_result(self.server)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()
            self._stopped.set()

    def start(self, timeout: float = 60.0) -> BrokerServer:
        self._thread.start()
        return self._started.result(timeout)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 120.0) -> None:
        if self.server is not None and not self._stopped.is_set():
            try:
                self.call(self.server.shutdown(), timeout)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout)
        if self._thread.is_alive():
            raise MemqError(f"broker thread {self.config.broker_id} did not stop in {timeout} s")

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    def __enter__(self) -> BrokerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
