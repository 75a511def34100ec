"""The broker's HTTP side port: Prometheus ``/metrics``, ``/healthz``, ``/readyz``,
``/status``, HTTP ingest ``POST /v1/topics/{topic}/records`` (:mod:`memq.broker.ingest`)
and its OpenAPI description ``/openapi.json``."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal, Protocol

import msgpack
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memq.broker.auditing import encode_audited
from memq.broker.host import BrokerHost
from memq.broker.ingest import (
    OPENAPI,
    body_fingerprint,
    decode_body,
    http_status,
    idempotent_id,
    parse_records,
)
from memq.broker.processor import TopicProcessor
from memq.errors import (
    AuthenticationError,
    AuthorizationError,
    IdempotencyKeyReusedError,
    InvalidRequestError,
    MemqError,
    MessageTooLargeError,
    NotWriterError,
    status_for_error,
)
from memq.formats.block import check_records_fit, decode_block_header
from memq.formats.compression import Compression
from memq.formats.keys import validate_name
from memq.protocol import Ack, ClusterMetadata, WriteAck, decode_msg, parse_ack
from memq.security import peer_principal, verify_token

__all__ = ["HttpHost", "start_http"]


class HttpHost(BrokerHost, Protocol):
    """The broker server, as its HTTP side port sees it (a ``BrokerServer``)."""

    @property
    def address(self) -> str: ...

    @property
    def ready(self) -> bool:
        """Started, and not draining."""
        ...

    @property
    def connections(self) -> Collection[object]:
        """The open client connections (counted in ``/status``)."""
        ...

    @property
    def processors(self) -> Mapping[str, TopicProcessor]:
        """The topics this broker writes, by name."""
        ...

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...

    @property
    def http_producer_id(self) -> int:
        """The producer id of blocks ingested without an Idempotency-Key."""
        ...

    def next_http_sequence(self) -> int: ...


#: The audit record's ``acks`` of each ack mode.
_ACKS: dict[Ack, Literal["0", "1", "all"]] = {Ack.NONE: "0", Ack.LEADER: "1", Ack.ALL: "all"}


#: How long a request waits for this broker to be given a topic it was not assigned yet
#: (just auto-created, or the governor's assignment not applied yet) before 421.
ASSIGN_WAIT_S = 10.0


async def _processor_once_assigned(server: HttpHost, topic: str) -> TopicProcessor:
    """The topic's processor here. HTTP clients (curl) do not retry a 421 as MemQ's and
    Kafka's clients do, so while no other broker writes the topic (a topic this request
    auto-created, or one being assigned) the request waits for its assignment, up to
    :data:`ASSIGN_WAIT_S`; a topic other brokers write is answered at once (421, with
    where to go)."""
    deadline = time.monotonic() + ASSIGN_WAIT_S
    while True:
        try:
            return await server.processor_for(topic)
        except NotWriterError as e:
            meta = decode_msg(ClusterMetadata, e.body, "metadata") if e.body else None
            t = meta.topics.get(topic) if meta is not None else None
            elsewhere = t is not None and any(w != server.config.broker_id for w in t.writers)
            if elsewhere or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.1)  # (the assignment arrives through ZooKeeper: no event here)


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own refusals under /v1/ (no such path, wrong method, a body it cannot
    decode) as the documented JSON error, like every other ingest error."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400 or not request.path.startswith("/v1/"):
            raise
        what = e.text if e.text and e.text != f"{e.status}: {e.reason}" else e.reason
        doc = {
            "error": f"{request.method} {request.path}: {what} (records are written with "
            "POST /v1/topics/{topic}/records)",
            "status": "INVALID_REQUEST",
        }
        headers = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
        return web.json_response(doc, status=e.status, headers=headers)


def _app(server: HttpHost) -> web.Application:
    async def metrics(_req: web.Request) -> web.Response:
        # Off the event loop: with 1,000 topics one scrape takes ~0.75 s of CPU, which
        # stalled every connection of the broker for that long (bench_topics' PING).
        body = await asyncio.get_running_loop().run_in_executor(
            None, generate_latest, server.metrics.registry
        )
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_req: web.Request) -> web.Response:
        # Answering at all proves the event loop is alive.
        return web.json_response({"status": "ok", "broker": server.config.broker_id})

    async def readyz(_req: web.Request) -> web.Response:
        ok = server.ready and not server.draining
        state = "ready" if ok else ("draining" if server.draining else "starting")
        return web.json_response({"status": state}, status=200 if ok else 503)

    async def status(req: web.Request) -> web.Response:
        """Every topic this broker writes: cluster admins only (token or client
        certificate, admin on ``*``) when the broker enforces auth."""
        try:
            who = principal_of(req)
            if server.enforcing:
                server.authorize(who, "admin", "*")
        except (AuthenticationError, AuthorizationError) as e:
            headers = {"WWW-Authenticate": "Bearer"} if isinstance(e, AuthenticationError) else None
            return web.json_response(
                {"error": str(e), "status": e.status.name}, status=http_status(e), headers=headers
            )
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

    def principal_of(req: web.Request) -> str | None:
        """Who sends a request: a bearer token's subject, or a client certificate's CN;
        AuthenticationError when the broker enforces auth and neither is there."""
        if not server.enforcing:
            return None
        header = req.headers.get("Authorization", "")
        if header.startswith("Bearer ") and server.token_secret is not None:
            return verify_token(server.token_secret, header.removeprefix("Bearer ").strip())[0]
        auth = server.config.auth
        if auth is not None and auth.mtls_identity and req.transport is not None:
            who = peer_principal(req.transport.get_extra_info("ssl_object"))
            if who:
                return who
        raise AuthenticationError(
            "authentication required: send Authorization: Bearer <token> (memq token create)"
        )

    async def ingest(req: web.Request) -> web.Response:
        """One request, one block: stored whole or not at all."""
        t0 = time.monotonic()
        topic = req.match_info["topic"]
        m = server.metrics
        try:
            principal = principal_of(req)
            ack = parse_ack(req.query.get("acks", "all"))
            try:
                validate_name("topic", topic)
            except MemqError as e:
                raise InvalidRequestError(str(e)) from None
            server.authorize(principal, "produce", topic)
            if server.draining:
                raise server.shutting_down_error()
            proc = await _processor_once_assigned(server, topic)
            try:
                body = await req.read()
            except web.HTTPRequestEntityTooLarge:
                raise MessageTooLargeError(
                    f"request body over the broker's limit of {server.config.max_frame_bytes} "
                    "bytes (max_frame_bytes): split the records over several requests"
                ) from None
            body = decode_body(
                body, req.headers.get("Content-Encoding"), server.config.max_frame_bytes
            )
            records = parse_records(body, req.content_type)
            check_records_fit(records, proc.config.block_limit, f"topic {topic!r}")
            key = req.headers.get("Idempotency-Key")
            fingerprint = None
            if key is not None:
                pid, seq = idempotent_id(principal, key), 0
                fingerprint = body_fingerprint(body, req.content_type)
            else:
                pid, seq = server.http_producer_id, server.next_http_sequence()
            loop = asyncio.get_running_loop()
            audit = server.audit
            block, content_crc = await loop.run_in_executor(
                None,
                functools.partial(
                    encode_audited, records, crc=audit is not None, producer_id=pid, epoch=0,
                    sequence=seq, compression=Compression.ZSTD,
                ),
            )  # fmt: skip
            limit = proc.config.block_limit
            if len(block) > limit:
                raise MessageTooLargeError(
                    f"these {len(records)} records make a {len(block)}-byte block, over the "
                    f"limit of topic {topic!r} ({limit} bytes): split the request"
                )
            header = decode_block_header(block)  # (made here: no second CRC pass)
            try:
                batch, index, dup = await proc.append(
                    memoryview(block), header, t0, fingerprint=fingerprint
                )
            except IdempotencyKeyReusedError:
                raise IdempotencyKeyReusedError(
                    f"Idempotency-Key {key!r} was used within the broker's dedup window for a "
                    "request with another body: a retry must send the same body; use a new "
                    "key for new records"
                ) from None
            if audit is not None and not dup:  # (a duplicate's first copy reports it)
                audit.watch(proc, batch, index, header, content_crc, _ACKS[ack], "http")
            answer: dict[str, Any] = {"topic": topic, "records": len(records),
                                      "producer_id": pid, "sequence": seq}  # fmt: skip
            if ack == Ack.NONE:
                m.requests.labels("HTTP_WRITE", "OK").inc()
                return web.json_response({**answer, "acks": "0"}, status=202)
            if ack == Ack.LEADER:
                if not dup:
                    proc.note_ack1(batch, header.record_count)
                m.requests.labels("HTTP_WRITE", "OK").inc()
                return web.json_response({**answer, "acks": "1", "duplicate": dup})
            stored = await asyncio.shield(batch.done)
            ok = WriteAck(bucket=stored.bucket, key=stored.key, block=index, duplicate=dup)
            m.requests.labels("HTTP_WRITE", "OK").inc()
            m.ack_seconds.labels(topic, "all").observe(time.monotonic() - t0)
            return web.json_response({**answer, "acks": "all", "stored": ok.model_dump()})
        except MemqError as e:
            status = status_for_error(e)
            m.requests.labels("HTTP_WRITE", status.name).inc()
            doc: dict[str, Any] = {"error": str(e), "status": status.name}
            if e.body:  # NOT_WRITER: where to go instead
                doc["metadata"] = msgpack.unpackb(e.body, raw=False)
            return web.json_response(doc, status=http_status(e))

    async def openapi(_req: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    # Bodies up to a frame: one request is one block (the topic's limit is checked too).
    app = web.Application(client_max_size=server.config.max_frame_bytes, middlewares=[_json_errors])
    app.router.add_post("/v1/topics/{topic}/records", ingest)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    return app


class _NoRequestEcho(logging.Filter):
    """aiohttp logs a request it cannot parse (a header line over 8 KB, ...) with a
    traceback quoting the line: an ``Authorization: Bearer`` token went to the broker log.
    Such a record becomes one line naming the error, without the request's bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args = (
                "bad HTTP request refused: %s (%s)",
                (
                    type(exc).__name__,
                    exc.code,
                ),
            )
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_NO_REQUEST_ECHO = _NoRequestEcho()


async def start_http(server: HttpHost, host: str, port: int) -> tuple[web.AppRunner, int]:
    logging.getLogger("aiohttp.server").addFilter(_NO_REQUEST_ECHO)
    # Bodies are decoded by the ingest handler (decode_body): its errors are JSON, its
    # output is capped, and zstd works without aiohttp's optional decoders.
    runner = web.AppRunner(_app(server), access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=server.ssl_context)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)
