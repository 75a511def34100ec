"""``memq audit serve``: ingest the audit topic into SQLite, serve the API and dashboard.

Two parts in one process:

- the **ingest thread** reads every partition of the audit topic with a plain Kafka
  consumer (``assign``, no group: the offsets live in the SQLite file, written in the
  same transaction as the rows they produced, so a restart neither loses nor double
  counts), decodes each record (undecodable ones are counted and skipped) and applies
  them in batches; it also prunes rows older than the retention;
- the **HTTP side** (aiohttp, on an asyncio loop) serves the dashboard at ``/``, its
  assets under ``/static/``, the JSON API under ``/api/``, ``/healthz`` and Prometheus
  ``/metrics``. Queries run on a thread pool (SQLite WAL readers), never on the loop.

API (all ``GET``, JSON; ``since`` is a duration back from now such as ``10m``, an
ISO-8601 time or epoch ms, default ``1h``; ``grace_s`` overrides the grace period):

- ``/api/summary?since=&topic=&group=&grace_s=&strict=``: per topic and group figures
  (``strict=1``: every block of the window must be consumed, see :mod:`memq.audit.store`);
- ``/api/timeseries?topic=&since=&group=&grace_s=``: per-minute series;
- ``/api/missing?topic=&group=&since=&limit=&grace_s=``: missing blocks with the
  object keys that should hold them;
- ``/api/anomalies?topic=&group=&since=&limit=``: duplicated and mismatched blocks;
- ``/api/status``: ingest counters, offsets, configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from memq.audit.config import AuditorConfig
from memq.audit.store import AuditStore, Ingest
from memq.audit.window import parse_duration_s, parse_since
from memq.devstack.procs import announce_ready
from memq.errors import AuthenticationError, ConfigError, MemqError, MemqFormatError
from memq.formats.audit import decode_audit
from memq.security import server_context, verify_token

__all__ = ["READY_MARKER", "Auditor", "AuditorThread", "run_auditor"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Printed (with a JSON object) once the auditor serves; the dev stack waits for it.
READY_MARKER = "memq auditor ready"
STATIC = Path(__file__).parent / "static"
PRUNE_EVERY_S = 600.0
REFRESH_PARTITIONS_S = 10.0


def now_ms() -> int:
    return int(time.time() * 1000)


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter("memq_audit_records", "Audit records applied", ["kind"], registry=r)
        self.rejected = Counter(
            "memq_audit_rejected_records", "Audit records that failed to decode", registry=r
        )
        self.ingest_errors = Counter(
            "memq_audit_ingest_errors", "Failed ingest loop iterations", registry=r
        )
        labels = ["topic", "group"]
        self.missing_blocks = Gauge(
            "memq_audit_missing_blocks", "Blocks acked but not consumed past the grace period",
            labels, registry=r,
        )  # fmt: skip
        self.missing_records = Gauge(
            "memq_audit_missing_records", "Records of the missing blocks", labels, registry=r
        )
        self.pending_records = Gauge(
            "memq_audit_pending_records", "Records acked, not consumed yet, within the grace",
            labels, registry=r,
        )  # fmt: skip
        self.duplicate_blocks = Gauge(
            "memq_audit_duplicate_blocks", "Blocks consumed more than once", labels, registry=r
        )
        self.mismatches = Gauge(
            "memq_audit_mismatched_blocks", "Blocks whose consumer content CRC differs",
            labels, registry=r,
        )  # fmt: skip
        self.consumed_records = Gauge(
            "memq_audit_consumed_records", "Records consumed (metrics window)", labels, registry=r
        )
        self.produced_records = Gauge(
            "memq_audit_produced_records", "Records acked (metrics window)", ["topic"], registry=r
        )
        self.latency_p99 = Gauge(
            "memq_audit_latency_p99_seconds", "End-to-end latency p99 (metrics window)",
            labels, registry=r,
        )  # fmt: skip
        self.last_ingest = Gauge(
            "memq_audit_last_ingest_timestamp_seconds", "When the ingest loop last ran",
            registry=r,
        )  # fmt: skip


class Auditor:
    """The auditor: call :meth:`start` on an event loop, :meth:`shutdown` to stop."""

    def __init__(self, config: AuditorConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock = clock
        self.store = AuditStore(config.db_path)
        self.metrics = _Metrics()
        self.executor = ThreadPoolExecutor(4, thread_name_prefix="memq-audit-query")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._refresher: asyncio.Task[None] | None = None
        self.port = 0
        self.last_loop = time.monotonic()
        self.ingest_error: str | None = None
        self.assigned: set[int] = set()

    @property
    def url(self) -> str:
        host = self.config.http_host
        host = "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host
        return f"{'https' if self.config.tls else 'http'}://{host}:{self.port}"

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._thread = threading.Thread(target=self._ingest, name="memq-audit-ingest", daemon=True)
        self._thread.start()
        self._runner = web.AppRunner(self._app(), access_log=None)
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
        log.info("auditor serving %s (audit topic %s)", self.url, self.config.audit_topic)

    async def shutdown(self) -> None:
        self._stop.set()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        if self._runner is not None:
            await self._runner.cleanup()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 15)
        self.executor.shutdown(wait=False)
        self.store.close()

    async def serve_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.shutdown()

    # --- ingest (thread) ----------------------------------------------------------------

    def _kafka_consumer(self) -> Any:
        from confluent_kafka import Consumer

        k = self.config.kafka
        return Consumer(
            {
                "bootstrap.servers": k.bootstrap_servers,
                "group.id": "memq-auditor",  # required by librdkafka; offsets are in SQLite
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "socket.keepalive.enable": True,
                **k.consumer,
            }
        )

    def _ingest(self) -> None:
        from memq.storage_handlers.kafka_sink import ensure_topic

        cfg = self.config
        while not self._stop.is_set():  # the audit topic must exist before we assign it
            try:
                ensure_topic(
                    cfg.kafka.bootstrap_servers, cfg.audit_topic, 1,
                    extra=dict(cfg.kafka.consumer), what="audit topic",
                )  # fmt: skip
                break
            except Exception as e:
                self.ingest_error = f"waiting for Kafka: {e}"
                log.warning("auditor: %s", self.ingest_error)
                self.last_loop = time.monotonic()
                self._stop.wait(2.0)
        consumer = self._kafka_consumer()
        next_refresh = 0.0
        next_prune = time.monotonic() + 5.0
        try:
            while not self._stop.is_set():
                self.last_loop = time.monotonic()
                self.metrics.last_ingest.set(time.time())
                try:
                    if self.last_loop >= next_refresh:
                        self._assign_new_partitions(consumer)
                        next_refresh = self.last_loop + REFRESH_PARTITIONS_S
                    if self.last_loop >= next_prune:
                        cutoff = self.clock() - int(cfg.retention_hours * 3600 * 1000)
                        pruned = self.store.prune(cutoff)
                        if pruned:
                            log.info("pruned %d audit rows older than the retention", pruned)
                        next_prune = self.last_loop + PRUNE_EVERY_S
                    if not self.assigned:
                        self._stop.wait(0.5)
                        continue
                    self._ingest_once(consumer)
                    self.ingest_error = None
                except Exception as e:  # keep serving: report it on /healthz and retry
                    self.ingest_error = f"{type(e).__name__}: {e}"
                    self.metrics.ingest_errors.inc()
                    log.exception("audit ingest failed; retrying")
                    self._stop.wait(1.0)
        finally:
            consumer.close()

    def _assign_new_partitions(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        topic = self.config.audit_topic
        meta = consumer.list_topics(timeout=10)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            return
        new = sorted(set(tmeta.partitions) - self.assigned)
        if not new:
            return
        stored = self.store.offsets(topic)
        consumer.incremental_assign(
            [TopicPartition(topic, p, stored.get(p, OFFSET_BEGINNING)) for p in new]
        )
        self.assigned.update(new)
        log.info("auditor reading %s partitions %s (stored offsets %s)", topic, new, stored)

    def _ingest_once(self, consumer: Any) -> None:
        msgs = consumer.consume(self.config.ingest_batch, 0.5)
        items: list[Ingest] = []
        rejected: list[tuple[str, int, int]] = []
        for m in msgs:
            if m.error() is not None:
                log.debug("audit topic: %s", m.error())
                continue
            where = (m.topic(), m.partition(), m.offset())
            try:
                items.append(Ingest(decode_audit(m.value() or b""), *where))
            except MemqFormatError as e:
                rejected.append(where)
                log.warning("skipping audit record %s/%d@%d: %s", *where, e)
        if not items and not rejected:
            return
        self.store.apply(items, rejected)
        for it in items:
            self.metrics.records.labels(it.record.kind).inc()
        if rejected:
            self.metrics.rejected.inc(len(rejected))

    # --- queries ------------------------------------------------------------------------

    @staticmethod
    def strict(query: Any) -> bool:
        return str(query.get("strict") or "").lower() in {"1", "true", "yes"}

    def window(self, query: Any) -> tuple[int, int, int]:
        """``(now_ms, since_ms, grace_ms)`` from request parameters."""
        now = self.clock()
        since = parse_since(query.get("since") or "1h", now)
        grace_s = query.get("grace_s")
        grace = parse_duration_s(grace_s) if grace_s else self.config.grace_period_s
        return now, since, int(grace * 1000)

    def summary(self, query: Any) -> dict[str, Any]:
        now, since, grace = self.window(query)
        topics = self.store.summary(
            now_ms=now,
            since_ms=since,
            grace_ms=grace,
            topic=query.get("topic") or None,
            group=query.get("group") or None,
            strict=self.strict(query),
        )
        return {
            "now_ms": now,
            "since_ms": since,
            "grace_period_s": grace / 1000,
            "strict": self.strict(query),
            "topics": [t.to_dict() for t in topics],
            "ingest": self.status()["ingest"],
        }

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
                "rejected_records": counters.get("rejected_records", 0),
                "partitions": sorted(self.assigned),
                "offsets": self.store.offsets(self.config.audit_topic),
                "seconds_since_loop": round(time.monotonic() - self.last_loop, 3),
                "error": self.ingest_error,
            },
        }

    def healthy(self) -> bool:
        alive = self._thread is not None and self._thread.is_alive()
        return alive and time.monotonic() - self.last_loop < 30.0

    async def _refresh_metrics(self) -> None:
        loop = asyncio.get_running_loop()
        m = self.metrics
        while True:
            try:
                window = {"since": f"{self.config.metrics_window_s}s"}
                doc = await loop.run_in_executor(self.executor, self.summary, window)
                for t in doc["topics"]:
                    m.produced_records.labels(t["topic"]).set(t["produced_records"])
                    for g in t["groups"]:
                        lab = (t["topic"], g["group"])
                        m.missing_blocks.labels(*lab).set(g["missing_blocks"])
                        m.missing_records.labels(*lab).set(g["missing_records"])
                        m.pending_records.labels(*lab).set(g["pending_records"])
                        m.duplicate_blocks.labels(*lab).set(g["duplicate_blocks"])
                        m.mismatches.labels(*lab).set(g["mismatches"])
                        m.consumed_records.labels(*lab).set(g["consumed_records"])
                        p99 = g["latency_p99_ms"]
                        m.latency_p99.labels(*lab).set(p99 / 1000 if p99 is not None else 0)
            except Exception:
                log.exception("refreshing audit metrics failed")
            await asyncio.sleep(self.config.metrics_interval_s)

    # --- HTTP ---------------------------------------------------------------------------

    def _auth_middleware(self) -> Any:
        """With ``auth.enabled``: every page but /healthz and /metrics needs a valid token,
        as ``Authorization: Bearer`` or the ``memq_token`` cookie; opening
        ``/?token=<token>`` once sets the cookie (HttpOnly, SameSite=Strict) for browsers."""
        auth = self.config.auth
        secret = auth.secret() if auth is not None and auth.enabled else None
        secure = self.config.tls is not None

        @web.middleware
        async def check(req: web.Request, handler: Any) -> web.StreamResponse:
            if secret is None or req.path in ("/healthz", "/metrics"):
                resp: web.StreamResponse = await handler(req)
                return resp
            given = req.query.get("token") if req.path == "/" else None
            header = req.headers.get("Authorization", "")
            token = given or (
                header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
            ) or req.cookies.get("memq_token")  # fmt: skip
            if not token:
                return web.json_response(
                    {"error": "authentication required: open /?token=<token> (memq token "
                              "create) or send Authorization: Bearer <token>"},
                    status=401, headers={"WWW-Authenticate": "Bearer"},
                )  # fmt: skip
            try:
                verify_token(secret, token)
            except AuthenticationError as e:
                return web.json_response({"error": str(e)}, status=401)
            if given:  # a browser arriving with ?token=: keep it in a cookie, clean the URL
                resp = web.Response(status=302, headers={"Location": "/"})
                resp.set_cookie("memq_token", given, httponly=True, samesite="Strict",
                                secure=secure, path="/")  # fmt: skip
                return resp
            out: web.StreamResponse = await handler(req)
            return out

        return check

    def _app(self) -> web.Application:
        def api(fn: Callable[[Any], Any]) -> Callable[[web.Request], Any]:
            async def handler(req: web.Request) -> web.Response:
                loop = asyncio.get_running_loop()
                try:
                    doc = await loop.run_in_executor(self.executor, fn, req.query)
                except (ConfigError, ValueError) as e:
                    return web.json_response({"error": str(e)}, status=400)
                except MemqError as e:
                    return web.json_response({"error": str(e)}, status=500)
                return web.json_response(doc, dumps=functools.partial(json.dumps, default=str))

            return handler

        def need(query: Any, name: str) -> str:
            value = query.get(name)
            if not value:
                raise ConfigError(f"query parameter {name!r} is required")
            return str(value)

        def timeseries(q: Any) -> dict[str, Any]:
            now, since, grace = self.window(q)
            if now - since > 7 * 86400 * 1000:
                raise ConfigError("timeseries windows are limited to 7 days (10080 minutes)")
            return self.store.timeseries(
                need(q, "topic"), now_ms=now, since_ms=since, grace_ms=grace,
                group=q.get("group") or None, strict=self.strict(q),
            )  # fmt: skip

        def limit(q: Any) -> int:
            n = int(q.get("limit") or 1000)
            if not 1 <= n <= 100_000:
                raise ConfigError("limit must be between 1 and 100000")
            return n

        def missing(q: Any) -> dict[str, Any]:
            now, since, grace = self.window(q)
            rows = self.store.missing(
                need(q, "topic"), need(q, "group"), now_ms=now, since_ms=since,
                grace_ms=grace, limit=limit(q), strict=self.strict(q),
            )  # fmt: skip
            return {"now_ms": now, "since_ms": since, "blocks": rows}

        def anomalies(q: Any) -> dict[str, Any]:
            now, since, _ = self.window(q)
            rows = self.store.anomalies(
                need(q, "topic"), need(q, "group"), now_ms=now, since_ms=since, limit=limit(q)
            )
            return {"now_ms": now, "since_ms": since, "blocks": rows}

        async def healthz(_req: web.Request) -> web.Response:
            ok = self.healthy()
            body = {"status": "ok" if ok else "unhealthy", "error": self.ingest_error}
            return web.json_response(body, status=200 if ok else 503)

        async def metrics(_req: web.Request) -> web.Response:
            body = generate_latest(self.metrics.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def index(_req: web.Request) -> web.StreamResponse:
            page = STATIC / "index.html"
            if not page.exists():
                return web.Response(status=500, text="dashboard assets are missing")
            return web.FileResponse(page, headers={"Cache-Control": "no-cache"})

        app = web.Application(middlewares=[self._auth_middleware()])
        app.router.add_get("/", index)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/api/summary", api(self.summary))
        app.router.add_get("/api/status", api(lambda _q: self.status()))
        app.router.add_get("/api/timeseries", api(timeseries))
        app.router.add_get("/api/missing", api(missing))
        app.router.add_get("/api/anomalies", api(anomalies))
        if STATIC.is_dir():
            app.router.add_static("/static/", STATIC, append_version=False)
        return app


def run_auditor(config: AuditorConfig, ready_file: Path | None = None) -> None:
    """Serve until SIGTERM/SIGINT."""

    async def main() -> None:
        auditor = Auditor(config)
        try:
            await auditor.start()
        except BaseException:
            await auditor.shutdown()
            raise
        info: dict[str, object] = {"url": auditor.url, "port": auditor.port}
        announce_ready(READY_MARKER, info, ready_file)
        await auditor.serve_until_signal()

    asyncio.run(main())


class AuditorThread:
    """An auditor on its own event loop in a daemon thread (tests, embedding)."""

    def __init__(self, config: AuditorConfig) -> None:
        self.config = config
        self.auditor: Auditor | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self, timeout: float = 30.0) -> Auditor:
        self._thread.start()
        self.auditor = Auditor(self.config)
        asyncio.run_coroutine_threadsafe(self.auditor.start(), self.loop).result(timeout)
        return self.auditor

    @property
    def url(self) -> str:
        assert self.auditor is not None
        return self.auditor.url

    def stop(self, timeout: float = 30.0) -> None:
        if self.auditor is not None:
            asyncio.run_coroutine_threadsafe(self.auditor.shutdown(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
