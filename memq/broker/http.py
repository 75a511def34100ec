"""The broker's HTTP side port: Prometheus ``/metrics``, ``/healthz``, ``/readyz``, ``/status``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memq.errors import AuthenticationError
from memq.security import verify_token

if TYPE_CHECKING:
    from memq.broker.server import BrokerServer

__all__ = ["start_http"]


def check_bearer(req: web.Request, secret: bytes | None) -> web.Response | None:
    """None when ``req`` may pass (no secret configured, or a valid bearer token)."""
    if secret is None:
        return None
    header = req.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return web.json_response(
            {"error": "authentication required: send Authorization: Bearer <token>"},
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        verify_token(secret, header.removeprefix("Bearer ").strip())
    except AuthenticationError as e:
        return web.json_response({"error": str(e)}, status=401)
    return None


def _app(server: BrokerServer) -> web.Application:
    async def metrics(_req: web.Request) -> web.Response:
        body = generate_latest(server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_req: web.Request) -> web.Response:
        # Answering at all proves the event loop is alive.
        return web.json_response({"status": "ok", "broker": server.config.broker_id})

    async def readyz(_req: web.Request) -> web.Response:
        ok = server.ready and not server.draining
        state = "ready" if ok else ("draining" if server.draining else "starting")
        return web.json_response({"status": state}, status=200 if ok else 503)

    async def status(req: web.Request) -> web.Response:
        denied = check_bearer(req, server.token_secret)
        if denied is not None:
            return denied
        doc: dict[str, Any] = {
            "broker": server.config.broker_id,
            "cluster": server.config.cluster,
            "address": server.address,
            "ready": server.ready,
            "draining": server.draining,
            "connections": len(server.connections),
            "topics": {
                name: {"uploads_in_flight": p.in_flight, "storage": p.config.storage.type}
                for name, p in server.processors.items()
            },
        }
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    return app


async def start_http(server: BrokerServer, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(_app(server), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=server.ssl_context)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)
