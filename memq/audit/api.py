"""The auditor's HTTP side: the aiohttp application and its routes.

It serves the dashboard at ``/``, its assets under ``/static/``, the JSON API under
``/api/``, ``/healthz`` and Prometheus ``/metrics``. Queries run on a thread pool (SQLite
WAL readers), never on the loop. With ``auth.enabled`` every page but ``/healthz`` and
``/metrics`` needs a token (see :func:`auth_middleware`).

API (all ``GET``, JSON; ``since`` is a duration back from now such as ``10m``, an
ISO-8601 time or epoch ms, default ``1h``; ``grace_s`` overrides the grace period;
every answer's fields, with examples, in docs/audit.md):

- ``/api/summary?since=&topic=&group=&grace_s=&strict=``: per topic and group figures
  (``strict=1``: every block of the window must be consumed, see :mod:`memq.audit.figures`),
  among them ``duplicate_blocks``/``duplicate_records`` (handed out more than once),
  ``dropped_duplicate_blocks``/``dropped_duplicate_records`` (copies the consumer dropped),
  ``unaudited_blocks``/``unaudited_records`` and the ``status`` with its ``reason``;
- ``/api/timeseries?topic=&since=&group=&grace_s=``: per-minute series;
- ``/api/missing?topic=&group=&since=&limit=&grace_s=``: missing blocks with the
  object keys that should hold them;
- ``/api/anomalies?topic=&group=&since=&limit=``: duplicated and mismatched blocks;
- ``/api/status``: ingest counters, offsets, configuration;
- ``/api/lag``: the last consumer-group lag measurement, one entry per group and topic
  (lag in objects, records and seconds, committed and end offsets, per partition too),
  with ``enabled``, ``measured_ms`` and ``error`` (see :mod:`memq.audit.lag`).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from memq.audit.store import AuditStore
from memq.errors import AuthenticationError, ConfigError, MemqError
from memq.security import AuthConfig, verify_token

__all__ = [
    "STATIC",
    "AuditQueries",
    "Query",
    "anomalies",
    "auth_middleware",
    "build_app",
    "is_strict",
    "missing",
    "timeseries",
]

#: Request parameters (``request.query``, or a plain dict when called directly).
Query = Mapping[str, Any]
STATIC = Path(__file__).parent / "static"


class AuditQueries(Protocol):
    """What the HTTP side needs from the auditor (:class:`memq.audit.service.Auditor`)."""

    @property
    def store(self) -> AuditStore: ...

    @property
    def ingest_error(self) -> str | None: ...

    def window(self, query: Query) -> tuple[int, int, int]: ...

    def summary(self, query: Query) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def lag_status(self) -> dict[str, Any]: ...

    def healthy(self) -> bool: ...


# --- query helpers (run on the executor) ----------------------------------------------


def is_strict(query: Query) -> bool:
    return str(query.get("strict") or "").lower() in {"1", "true", "yes"}


def _need(query: Query, name: str) -> str:
    value = query.get(name)
    if not value:
        raise ConfigError(f"query parameter {name!r} is required")
    return str(value)


def _limit(query: Query) -> int:
    n = int(query.get("limit") or 1000)
    if not 1 <= n <= 100_000:
        raise ConfigError("limit must be between 1 and 100000")
    return n


def timeseries(auditor: AuditQueries, q: Query) -> dict[str, Any]:
    now, since, grace = auditor.window(q)
    if now - since > 7 * 86400 * 1000:
        raise ConfigError("timeseries windows are limited to 7 days (10080 minutes)")
    return auditor.store.timeseries(
        _need(q, "topic"), now_ms=now, since_ms=since, grace_ms=grace,
        group=q.get("group") or None, strict=is_strict(q),
    )  # fmt: skip


def missing(auditor: AuditQueries, q: Query) -> dict[str, Any]:
    now, since, grace = auditor.window(q)
    rows = auditor.store.missing(
        _need(q, "topic"), _need(q, "group"), now_ms=now, since_ms=since,
        grace_ms=grace, limit=_limit(q), strict=is_strict(q),
    )  # fmt: skip
    return {"now_ms": now, "since_ms": since, "blocks": rows}


def anomalies(auditor: AuditQueries, q: Query) -> dict[str, Any]:
    now, since, _ = auditor.window(q)
    rows = auditor.store.anomalies(
        _need(q, "topic"), _need(q, "group"), now_ms=now, since_ms=since, limit=_limit(q)
    )
    return {"now_ms": now, "since_ms": since, "blocks": rows}


# --- HTTP -----------------------------------------------------------------------------


def auth_middleware(auth: AuthConfig | None, *, secure: bool) -> Middleware:
    """With ``auth.enabled``: every page but /healthz and /metrics needs a valid token,
    as ``Authorization: Bearer`` or the ``memq_token`` cookie; opening
    ``/?token=<token>`` once sets the cookie (HttpOnly, SameSite=Strict, Secure with
    ``secure``) for browsers."""
    secret = auth.secret() if auth is not None and auth.enabled else None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if secret is None or request.path in ("/healthz", "/metrics"):
            return await handler(request)
        given = request.query.get("token") if request.path == "/" else None
        header = request.headers.get("Authorization", "")
        token = given or (
            header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
        ) or request.cookies.get("memq_token")  # fmt: skip
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
        return await handler(request)

    return check


def build_app(
    auditor: AuditQueries,
    *,
    executor: Executor,
    registry: CollectorRegistry,
    auth: AuthConfig | None,
    secure: bool,
) -> web.Application:
    """The auditor's application: routes over ``auditor``, queries run on ``executor``,
    ``/metrics`` from ``registry``; ``auth``/``secure`` as in :func:`auth_middleware`."""

    def api(fn: Callable[[Query], Any]) -> Handler:
        async def handler(req: web.Request) -> web.StreamResponse:
            loop = asyncio.get_running_loop()
            try:
                doc = await loop.run_in_executor(executor, fn, req.query)
            except (ConfigError, ValueError) as e:
                return web.json_response({"error": str(e)}, status=400)
            except MemqError as e:
                return web.json_response({"error": str(e)}, status=500)
            return web.json_response(doc, dumps=functools.partial(json.dumps, default=str))

        return handler

    async def healthz(_req: web.Request) -> web.Response:
        ok = auditor.healthy()
        body = {"status": "ok" if ok else "unhealthy", "error": auditor.ingest_error}
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(_req: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def index(_req: web.Request) -> web.StreamResponse:
        page = STATIC / "index.html"
        if not page.exists():
            return web.Response(status=500, text="dashboard assets are missing")
        return web.FileResponse(page, headers={"Cache-Control": "no-cache"})

    app = web.Application(middlewares=[auth_middleware(auth, secure=secure)])
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/summary", api(auditor.summary))
    app.router.add_get("/api/status", api(lambda _q: auditor.status()))
    app.router.add_get("/api/lag", api(lambda _q: auditor.lag_status()))
    app.router.add_get("/api/timeseries", api(functools.partial(timeseries, auditor)))
    app.router.add_get("/api/missing", api(functools.partial(missing, auditor)))
    app.router.add_get("/api/anomalies", api(functools.partial(anomalies, auditor)))
    if STATIC.is_dir():
        app.router.add_static("/static/", STATIC, append_version=False)
    return app
