"""The auditor (``memq audit serve``): ingest, figures, HTTP and metrics composed.

:class:`Auditor` owns the store (:mod:`memq.audit.store`), runs the ingest thread
(:mod:`memq.audit.ingest`), serves the application of :mod:`memq.audit.api` on the
running event loop, and refreshes the Prometheus gauges (:mod:`memq.audit.metrics`)
every ``metrics_interval_s``. It also answers the summary and status queries the API and
``memq audit report --db`` use. Given a lag source (:mod:`memq.audit.lag`), it measures
consumer-group lag every ``lag.interval_s`` for the dashboard, ``/api/lag`` and
``/metrics``. Running it as a process (ready line, signals, a thread for tests, the lag
source from the configuration) is :mod:`memq.run.auditor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from aiohttp import web
from prometheus_client.registry import Collector

from memq.audit.api import Query, build_app, is_strict
from memq.audit.config import AuditorConfig
from memq.audit.ingest import Ingester
from memq.audit.lag import LagSource, lag_document, measure_until
from memq.audit.metrics import AuditorMetrics
from memq.audit.store import AuditStore, TopicFigures
from memq.audit.window import parse_duration_s, parse_since
from memq.errors import ConfigError
from memq.security import server_context

__all__ = ["HTTP_STOP_S", "THREADS_STOP_S", "Auditor", "now_ms"]

log = logging.getLogger(__name__)

#: At shutdown, how long a dashboard or API request under way may take to finish.
HTTP_STOP_S = 2.0
#: At shutdown, how long the ingest and lag threads get (together) to finish their
#: current step; one still in a Kafka request then is not waited for.
THREADS_STOP_S = 3.0


def now_ms() -> int:
    return int(time.time() * 1000)


def _last_record_ms(t: TopicFigures) -> int:
    """When ``t``'s newest block was acked or handed out (-1: never)."""
    times = [t.last_produced_ms, *(g.last_consumed_ms for g in t.groups)]
    return max((ms for ms in times if ms is not None), default=-1)


class Auditor:
    """The auditor: call :meth:`start` on an event loop, :meth:`shutdown` to stop."""

    def __init__(
        self,
        config: AuditorConfig,
        clock: Callable[[], int] = now_ms,
        lag: LagSource | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.store = AuditStore(config.db_path)
        self.metrics = AuditorMetrics()
        self.executor = ThreadPoolExecutor(4, thread_name_prefix="memq-audit-query")
        self.ingest = Ingester(config, self.store, self.metrics, clock)
        #: Consumer-group lag (None: not measured); measured on a thread of its own so a
        #: slow Kafka never holds up the dashboard's queries.
        self.lag = lag
        #: Every topic a listing of the cluster had (see :meth:`_existing`).
        self._listed_ever: set[str] = set()
        self._listed_lock = threading.Lock()
        self._lag_stop = threading.Event()
        self._lag_thread: threading.Thread | None = None
        if lag is not None:
            self.metrics.registry.register(cast(Collector, lag))
        self._runner: web.AppRunner | None = None
        self._refresher: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        host = self.config.http_host
        host = "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host
        return f"{'https' if self.config.tls else 'http'}://{host}:{self.port}"

    @property
    def ingest_error(self) -> str | None:
        return self.ingest.error

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        # (`memq audit report --db` reads the file with the serving auditor's grace)
        self.store.set_meta("grace_period_s", repr(self.config.grace_period_s))
        self.ingest.start()
        app = build_app(
            self,
            executor=self.executor,
            registry=self.metrics.registry,
            auth=self.config.auth,
            secure=self.config.tls is not None,
        )
        # (a request under way at shutdown gets a short grace, not aiohttp's 60 s)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=HTTP_STOP_S)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.config.http_host,
            self.config.http_port,
            reuse_address=True,
            ssl_context=server_context(self.config.tls) if self.config.tls else None,
        )
        try:
            await site.start()
        except OSError as e:
            raise ConfigError(
                f"auditor cannot listen on {self.config.http_host}:{self.config.http_port}: "
                f"{e.strerror or e}; pick another http_port"
            ) from None
        addrs = self._runner.addresses
        self.port = int(addrs[0][1]) if addrs else self.config.http_port
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_metrics())
        if self.lag is not None:
            self._lag_thread = threading.Thread(
                target=measure_until,
                args=(self.lag, self.config.lag, self._lag_stop, self.store.topics),
                name="memq-audit-lag",
                daemon=True,  # (never joined at exit: see shutdown())
            )
            self._lag_thread.start()
        log.info("auditor serving %s (audit topic %s)", self.url, self.config.audit_topic)

    async def shutdown(self) -> None:
        """Stop serving, ingesting and measuring, in at most about :data:`HTTP_STOP_S`
        plus :data:`THREADS_STOP_S`: the ingest and lag threads are daemons, and one
        still inside a request then (to Kafka or the brokers, each with its own deadline,
        up to tens of seconds) is left to end with the process rather than waited for."""
        self.ingest.stop()
        self._lag_stop.set()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        if self._runner is not None:
            await self._runner.cleanup()
        deadline = time.monotonic() + THREADS_STOP_S
        loop = asyncio.get_running_loop()
        waits: list[tuple[str, Callable[[float], None], Callable[[], bool]]] = [
            ("ingest", self.ingest.join, self.ingest.alive)
        ]
        if self._lag_thread is not None:
            waits.append(("consumer lag", self._lag_thread.join, self._lag_thread.is_alive))
        for name, join, alive in waits:
            await loop.run_in_executor(None, join, max(0.0, deadline - time.monotonic()))
            if alive():
                log.warning(
                    "auditor stopping: its %s thread is still in a request (to Kafka or the "
                    "brokers, each with its own deadline) after %.0f s; not waiting for it",
                    name, THREADS_STOP_S,
                )  # fmt: skip
        self.executor.shutdown(wait=False)
        self.store.close()

    async def serve_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.shutdown()

    # --- queries ------------------------------------------------------------------------

    def window(self, query: Query) -> tuple[int, int, int]:
        """``(now_ms, since_ms, grace_ms)`` from request parameters."""
        now = self.clock()
        since = parse_since(query.get("since") or "1h", now)
        grace_s = query.get("grace_s")
        grace = parse_duration_s(grace_s) if grace_s else self.config.grace_period_s
        return now, since, int(grace * 1000)

    def summary(self, query: Query) -> dict[str, Any]:
        now, since, grace = self.window(query)
        topics = self.store.summary(
            now_ms=now,
            since_ms=since,
            grace_ms=grace,
            topic=query.get("topic") or None,
            group=query.get("group") or None,
            strict=is_strict(query),
        )
        if not query.get("topic"):
            topics = self._existing(topics)
        return {
            "now_ms": now,
            "since_ms": since,
            "grace_period_s": grace / 1000,
            "strict": is_strict(query),
            "topics": [t.to_dict() for t in topics],
            "ingest": self.status()["ingest"],
        }

    def _existing(self, topics: list[TopicFigures]) -> list[TopicFigures]:
        """``topics`` without those the cluster no longer has (deleted or purged): listed
        by an earlier topic listing of the lag source, absent from its last one, and with
        no audit record since that was taken (a topic audited since may be new again).
        A topic no listing ever had stays (another cluster's, sharing the audit topic);
        without a lag source nothing is known and every topic stays."""
        listing = self.lag.listing() if self.lag is not None else None
        if listing is None:
            return topics
        names, listed_ms = listing
        with self._listed_lock:
            self._listed_ever |= names
            gone = {t.topic for t in topics if t.topic in self._listed_ever} - names
        return [t for t in topics if t.topic not in gone or _last_record_ms(t) >= listed_ms]

    def status(self) -> dict[str, Any]:
        counters = self.store.counters()
        return {
            "audit_topic": self.config.audit_topic,
            "kafka": self.config.kafka.bootstrap_servers,
            "db_path": str(self.config.db_path),
            "grace_period_s": self.config.grace_period_s,
            "retention_hours": self.config.retention_hours,
            "ingest": {
                "produced_records": counters.get("produced_records", 0),
                "consumed_records": counters.get("consumed_records", 0),
                "dropped_records": counters.get("dropped_records", 0),
                "rejected_records": counters.get("rejected_records", 0),
                "partitions": sorted(self.ingest.assigned),
                "offsets": self.store.offsets(self.config.audit_topic),
                "seconds_since_loop": round(time.monotonic() - self.ingest.last_loop, 3),
                "error": self.ingest.error,
            },
        }

    def lag_status(self) -> dict[str, Any]:
        """``/api/lag``: the last consumer-lag measurement (see :func:`lag_document`)."""
        return lag_document(self.lag, self.config.lag)

    def healthy(self) -> bool:
        return self.ingest.alive() and time.monotonic() - self.ingest.last_loop < 30.0

    async def _refresh_metrics(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                window = {"since": f"{self.config.metrics_window_s}s"}
                doc = await loop.run_in_executor(self.executor, self.summary, window)
                self.metrics.set_figures(doc["topics"])
            except Exception:
                log.exception("refreshing audit metrics failed")
            await asyncio.sleep(self.config.metrics_interval_s)
