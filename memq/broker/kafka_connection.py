"""One connection of the Kafka listener (:mod:`memq.broker.kafka_listener`): requests
read and handled in order (as far as appending blocks to the topic processors),
responses written strictly in request order, Produce, InitProducerId and SASL/PLAIN."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import struct
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any, Literal

from memq.broker.auditing import encode_audited
from memq.broker.host import Flow, KafkaHost
from memq.broker.kafka_codec import (
    API_NAMES,
    API_VERSIONS,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    READS_UNSUPPORTED,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    KafkaError,
    KafkaRequest,
    UnsupportedApi,
    api_versions_response,
    build_response,
    decode_records,
    decode_request,
    encode_response,
    kafka_error,
    unsupported_response,
)
from memq.broker.kafka_stream import KafkaStream
from memq.errors import AuthenticationError, MemqError, MessageTooLargeError
from memq.formats.block import check_records_fit, decode_block_header
from memq.formats.compression import Compression
from memq.security import peer_principal, verify_token

__all__ = ["MAX_IN_FLIGHT", "KafkaConnection"]

log = logging.getLogger(__name__)

#: Responses a connection may owe before it stops reading requests.
MAX_IN_FLIGHT = 32
#: Uncompressed record sets up to this size are turned into a block on the event loop
#: (~0.6 ms per MiB, it holds the GIL either way: a thread hop cost more than it saved);
#: larger or compressed ones (whose size says little about the work) in a worker thread,
#: so the loop keeps serving other connections meanwhile.
INLINE_TRANSCODE_BYTES = 1 << 20
#: Requests an idempotent producer may have in flight per connection (Kafka's limit for
#: ``enable.idempotence``, librdkafka's and the Java client's): with that many waiting
#: for an answer it sends nothing more.
IDEMPOTENT_MAX_IN_FLIGHT = 5
#: SASL mechanisms served (both take a MemQ token as the secret).
SASL_MECHANISMS = ("PLAIN", "OAUTHBEARER")

PartitionResult = tuple[int, int, str | None]  # error code, base offset, message
#: The audit record's ``acks`` of each Kafka ``acks`` (-1: all).
_ACKS: dict[int, Literal["0", "1", "all"]] = {0: "0", 1: "1", -1: "all"}


def _produce_doc(topics: list[tuple[str, list[tuple[int, PartitionResult]]]]) -> dict[str, Any]:
    return {
        "topics": [
            {"topic": t, "partitions": [
                {"partition": p, "error_code": code, "offset": offset, "timestamp": -1,
                 "log_start_offset": -1, "record_errors": [], "error_message": msg}
                for p, (code, offset, msg) in parts
            ]}
            for t, parts in topics
        ],
        "throttle_time_ms": 0,
    }  # fmt: skip


def _compressed(data: bytes) -> bool:
    """Whether a record set's first batch is compressed (attributes, bytes 21-22)."""
    return len(data) < 23 or bool(data[22] & 0x07)


def _to_block(
    data: bytes,
    fallback: tuple[int, int],
    partition: int,
    crc: bool = False,
    block_limit: int | None = None,
) -> tuple[bytes, int, Any, int]:
    """(block, record count, (block id, transactional, idempotent), content CRC) of one
    partition's record set; the CRC of its payload (audit records) only with ``crc``,
    else 0. A record over ``block_limit`` less the framing is MessageTooLargeError, as
    from the producer and HTTP: checked one by one only when the set is compressed (an
    uncompressed block within the limit holds no larger record)."""
    recs = decode_records(data)
    if block_limit is not None and recs.compression != Compression.NONE:
        check_records_fit(recs.records, block_limit, "this topic")
    if recs.producer_id >= 0:  # idempotent: retries keep (pid, epoch, base sequence)
        bid = (
            recs.producer_id,
            max(recs.producer_epoch, 0),
            (partition << 32) | recs.base_sequence,
        )
    else:
        bid = (fallback[0], 0, fallback[1])
    block, content_crc = encode_audited(
        recs.records, crc=crc, producer_id=bid[0], epoch=bid[1], sequence=bid[2],
        compression=recs.compression,
    )  # fmt: skip
    return block, len(recs.records), (bid, recs.transactional, recs.producer_id >= 0), content_crc


class KafkaConnection(KafkaStream):
    """One client connection: requests handled in order, responses written in order
    (received by :class:`KafkaStream`, handled one by one by :meth:`run`)."""

    def __init__(self, listener: KafkaHost) -> None:
        super().__init__(listener.server.config.max_frame_bytes, listener.server.receive_buffer)
        self.listener = listener
        self.server = listener.server
        self._pending: deque[asyncio.Future[bytes | None]] = deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Records of non-idempotent producers: one MemQ producer id per connection.
        self._pid = random.getrandbits(63)
        self._seq = itertools.count()
        #: acks=-1 Produce requests not answered yet, and whether the producer is
        #: idempotent (its record batches carry a producer id).
        self._unanswered = 0
        self._idempotent = False
        self.principal: str | None = None
        self._expires: float | None = None
        #: The SASL mechanism of the last SaslHandshake (None: none pending).
        self._mechanism: str | None = None
        self._raw_sasl = False
        self._run_task: asyncio.Task[None] | None = None
        self.host = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer)
        #: The client's address without its port (a key of the listener's bounded logs).
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        if not self.listener.opened(self):
            self._closed = True
            transport.abort()
            return
        auth = self.server.config.auth
        if auth is not None and auth.mtls_identity:
            self.principal = peer_principal(transport.get_extra_info("ssl_object"))
        self._run_task = asyncio.get_running_loop().create_task(self.run())

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        cfg = self.server.config
        assert self.transport is not None
        try:
            while not self._closed:
                frame = await self.read_frame(cfg.idle_timeout_s)
                if frame is None:
                    break
                await self._handle(frame)
                while len(self._pending) >= MAX_IN_FLIGHT and not self._closed:
                    await asyncio.wait({self._pending[0]})
                if self.transport.get_write_buffer_size() > 1 << 20:
                    await self._drain()
            # The peer is gone or we close: answer what is owed while we can (bounded).
            if self._pending and not self._closing():
                await asyncio.wait(set(self._pending), timeout=cfg.shutdown_timeout_s)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("kafka connection %s failed; closing it", self.peer)
        finally:
            try:
                self._flush()
                self.close()
            finally:
                self.listener.closed(self)

    def _drop(self, what: str, kind: str) -> None:
        super()._drop(what, kind)
        log.warning("kafka listener: closing %s: %s", self.peer, what)
        self.server.metrics.errors.labels(kind).inc()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        for t in self._tasks:
            t.cancel()
        if not self._closing():
            assert self.transport is not None
            self.transport.close()

    # --- responses in order -------------------------------------------------------------

    def _queue(self, fut: asyncio.Future[bytes | None]) -> None:
        self._pending.append(fut)
        fut.add_done_callback(self._flush)

    def _answer(self, data: bytes) -> None:
        fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        fut.set_result(data)
        self._queue(fut)

    def _flush(self, _fut: object = None) -> None:
        while self._pending and self._pending[0].done():
            fut = self._pending.popleft()
            if fut.cancelled():
                continue
            err = fut.exception()
            if err is not None:  # a bug: later answers would be out of order, so close
                log.error("kafka listener: closing %s: answering failed: %r", self.peer, err)
                self.server.metrics.errors.labels("internal").inc()
                self.close()
                return
            data = fut.result()
            if data is not None and not self._closing():
                assert self.transport is not None
                self.transport.write(data)

    def _count(self, api: int, status: str) -> None:
        name = f"KAFKA_{API_NAMES.get(api, 'UNKNOWN').upper()}"
        self.server.metrics.requests.labels(name, status).inc()

    # --- dispatch -----------------------------------------------------------------------

    async def _handle(self, frame: memoryview) -> None:
        if self._raw_sasl:
            self._raw_authenticate(bytes(frame))
            return
        try:
            req = decode_request(frame, self.listener.supported)
        except UnsupportedApi as e:
            self._count(e.api_key, "UNSUPPORTED_VERSION")
            self._answer(unsupported_response(e, self.listener.advertised))
            if e.api_key != API_VERSIONS:  # the client cannot read this answer: close
                # (a client that reads retries this every second or so: a bounded log)
                self.listener.log_limited(
                    logging.WARNING, ("unsupported", e.api_key, self.host),
                    "kafka listener: closing %s: %s", self.peer, e,
                )  # fmt: skip
                self._flush()
                self._closed = True
            return
        except MemqError as e:
            self._drop(str(e), "corrupt")
            return
        if not self._authenticated() and req.api_key not in (
            API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE,
        ):  # fmt: skip
            self._count(req.api_key, "UNAUTHENTICATED")
            self._drop(f"{API_NAMES[req.api_key]} before SASL authentication", "auth_failed")
            return
        key, v, cid = req.api_key, req.api_version, req.correlation_id
        if key == API_VERSIONS:
            self._answer(
                encode_response(cid, api_versions_response(v, 0, self.listener.advertised))
            )
        elif key == METADATA:
            self._answer(encode_response(cid, await self.listener.metadata(req, self.principal)))
        elif key == INIT_PRODUCER_ID:
            self._answer(encode_response(cid, self._init_producer_id(req)))
        elif key == FIND_COORDINATOR:
            self._answer(encode_response(cid, self._find_coordinator(req)))
            self._count(key, "INVALID_REQUEST")
            return
        elif key == SASL_HANDSHAKE:
            self._answer(encode_response(cid, self._sasl_handshake(req)))
        elif key == SASL_AUTHENTICATE:
            self._answer(encode_response(cid, self._sasl_authenticate(req)))
        elif key == PRODUCE:
            await self._produce(req)
            return
        self._count(key, "OK")

    def _find_coordinator(self, req: KafkaRequest) -> Any:
        """No group or transaction coordinator here: an error the client shows (v1+
        carries the text; librdkafka hands it to the application once and asks again
        about every second, on the same connection)."""
        body, v = req.body, req.api_version
        key = body.consumer_group if v == 0 else body.coordinator_key
        txn = v >= 1 and body.coordinator_type == 1
        text = (
            "MemQ's Kafka port has no transactions: produce without a transactional.id"
            if txn
            else READS_UNSUPPORTED
        )
        self.listener.log_limited(
            logging.INFO, ("find_coordinator", self.host),
            "kafka listener: %s (client %r) asked for the %s coordinator of %r: %s",
            self.peer, req.client_id, "transaction" if txn else "group", key, text,
        )  # fmt: skip
        doc = {"throttle_time_ms": 0, "error_code": KafkaError.INVALID_REQUEST,
               "error_message": text, "coordinator_id": -1, "host": "", "port": -1}  # fmt: skip
        return build_response(FIND_COORDINATOR, v, doc)

    def _init_producer_id(self, req: KafkaRequest) -> Any:
        if req.body.transactional_id is not None:  # transactions need a coordinator
            error, pid, epoch = KafkaError.INVALID_REQUEST, -1, -1
        else:
            error, pid, epoch = KafkaError.NONE, self.listener.next_producer_id(), 0
        doc = {"throttle_time_ms": 0, "error_code": error, "producer_id": pid,
               "producer_epoch": epoch}  # fmt: skip
        return build_response(INIT_PRODUCER_ID, req.api_version, doc)

    # --- SASL/PLAIN with MemQ tokens ----------------------------------------------------

    def _authenticated(self) -> bool:
        if not self.server.enforcing:
            return True
        if self.principal is None:
            return False
        if self._expires is not None and self._expires <= time.time():
            self.principal = self._expires = None
            return False
        return True

    def _sasl_handshake(self, req: KafkaRequest) -> Any:
        ok = req.body.mechanism in SASL_MECHANISMS
        self._mechanism = req.body.mechanism if ok else None
        self._raw_sasl = ok and req.api_version == 0  # v0: raw SASL bytes come next
        code = KafkaError.NONE if ok else KafkaError.UNSUPPORTED_SASL_MECHANISM
        return build_response(SASL_HANDSHAKE, req.api_version,
                              {"error_code": code, "enabled_mechanisms": list(SASL_MECHANISMS)})  # fmt: skip

    def _authenticate(self, message: bytes) -> str:
        """Check a SASL message of the negotiated mechanism, whose secret is a MemQ
        token: PLAIN ``authzid NUL username NUL token`` or OAUTHBEARER (RFC 7628)
        ``gs2-header ^A auth=Bearer <token> ^A ... ^A ^A``. The expiry is kept, the
        principal returned."""
        secret, mechanism = self.server.token_secret, self._mechanism
        if mechanism is None or secret is None:
            raise AuthenticationError("SASL authentication before a SaslHandshake")
        self._mechanism = None
        if mechanism == "PLAIN":
            parts = message.split(b"\x00")
            if len(parts) != 3:
                raise AuthenticationError("malformed SASL/PLAIN message")
            token, user = parts[2], parts[1].decode("utf-8", "replace")
            what = "SASL username"
        else:
            token, user = _bearer(message)
            what = "SASL/OAUTHBEARER authorization id"
        principal, expires = verify_token(secret, token)
        if user and user != principal:
            raise AuthenticationError(f"{what} {user!r} is not the token's principal {principal!r}")
        self.principal, self._expires = principal, float(expires)
        log.info("kafka listener: %s authenticated as %r (%s)", self.peer, principal, mechanism)
        return principal

    def _auth_failed(self, e: AuthenticationError) -> str:
        self.server.metrics.errors.labels("auth_failed").inc()
        log.warning("kafka listener: authentication failed from %s: %s", self.peer, e)
        self._closed = True  # Kafka closes the connection after a failed authentication
        return f"{e} (the SASL secret is a MemQ token: memq token create)"

    def _sasl_authenticate(self, req: KafkaRequest) -> Any:
        doc: dict[str, Any] = {"error_code": 0, "error_message": None, "sasl_auth_bytes": b"",
                               "session_lifetime_ms": 0}  # fmt: skip
        try:
            self._authenticate(bytes(req.body.sasl_auth_bytes or b""))
        except AuthenticationError as e:
            doc["error_code"] = KafkaError.SASL_AUTHENTICATION_FAILED
            doc["error_message"] = self._auth_failed(e)
            return build_response(SASL_AUTHENTICATE, req.api_version, doc)
        assert self._expires is not None
        doc["session_lifetime_ms"] = max(int((self._expires - time.time()) * 1000), 1)
        return build_response(SASL_AUTHENTICATE, req.api_version, doc)

    def _raw_authenticate(self, frame: bytes) -> None:
        """SaslHandshake v0: the next frame is the bare SASL message; success is
        answered with an empty frame, failure by closing."""
        self._raw_sasl = False
        try:
            self._authenticate(frame)
        except AuthenticationError as e:
            self._auth_failed(e)
            return
        self._answer(struct.pack(">i", 0))

    # --- Produce ------------------------------------------------------------------------

    def _note_unanswered(self, delta: int) -> None:
        self._unanswered += delta
        if self._closed:  # (its flows are forgotten: answers of cancelled requests come later)
            return
        blocked = self._idempotent and self._unanswered >= IDEMPOTENT_MAX_IN_FLIGHT
        self.listener.connection_blocked(id(self), blocked, self._idempotent)

    def _answered_request(self, _task: object) -> None:
        self._note_unanswered(-1)

    async def _produce(self, req: KafkaRequest) -> None:
        body, v = req.body, req.api_version
        acks, timeout_ms = body.required_acks, body.timeout
        if acks == -1:  # (counted before its blocks are appended: seal_if_stalled reads it)
            self._note_unanswered(+1)
        try:
            task = await self._produce_parts(req, acks, timeout_ms, v)
        except BaseException:
            if acks == -1:
                self._note_unanswered(-1)
            raise
        if task is not None and acks == -1:
            task.add_done_callback(self._answered_request)
        elif acks == -1:
            self._note_unanswered(-1)

    async def _produce_parts(
        self, req: KafkaRequest, acks: int, timeout_ms: int, v: int
    ) -> asyncio.Task[bytes | None] | None:
        """Append every partition's records; the task answering the request (None:
        acks=0, no answer)."""
        body = req.body
        waits: list[tuple[str, list[tuple[int, Awaitable[PartitionResult]]]]] = []
        for topic, topic_parts in body.topics or []:
            out = []
            parts = topic_parts or []
            for i, (partition, data) in enumerate(parts):
                if acks not in (0, 1, -1):
                    res: Awaitable[PartitionResult] = _done(KafkaError.INVALID_REQUIRED_ACKS)
                elif body.transactional_id is not None:
                    res = _done(KafkaError.INVALID_REQUEST, "transactions are not supported")
                else:
                    last = i == len(parts) - 1  # (the batch is never sealed between them)
                    res = await self._append(topic, partition, data, acks, timeout_ms, v, last)
                out.append((partition, res))
            waits.append((topic, out))
        if acks == 0:
            self._count(PRODUCE, "OK")
            return None
        task = asyncio.get_running_loop().create_task(self._respond(req, waits))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._queue(task)
        return task

    async def _respond(
        self,
        req: KafkaRequest,
        waits: list[tuple[str, list[tuple[int, Awaitable[PartitionResult]]]]],
    ) -> bytes | None:
        topics = [(t, [(p, await w) for p, w in parts]) for t, parts in waits]
        worst = max((r[0] for _, parts in topics for _, r in parts), default=0)
        self._count(PRODUCE, "OK" if worst == 0 else f"ERROR_{worst}")
        return encode_response(req.correlation_id,
                               build_response(PRODUCE, req.api_version, _produce_doc(topics)))  # fmt: skip

    async def _append(
        self,
        topic: str,
        partition: int,
        data: bytes | None,
        acks: int,
        timeout_ms: int,
        v: int,
        last: bool = True,
    ) -> Awaitable[PartitionResult]:
        """Append one partition's records; an awaitable of its (error, offset, message).

        ``last``: the request's last partition of ``topic``; only then may the batch be
        sealed because nobody can add to it (the request's own partitions can)."""
        server, t0 = self.server, time.monotonic()
        try:
            server.authorize(self.principal, "produce", topic)
            if server.draining:
                raise server.shutting_down_error()
            proc = await server.processor_for(topic)
            if not 0 <= partition < self.listener.partitions(topic):
                return _done(KafkaError.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition}")
            if not data:
                return _done(KafkaError.INVALID_RECORD, "no records")
            fallback = (self._pid, next(self._seq))
            audit = server.audit
            if len(data) <= INLINE_TRANSCODE_BYTES and not _compressed(data):
                made = _to_block(
                    data, fallback, partition, audit is not None, proc.config.block_limit
                )
            else:
                work = functools.partial(
                    _to_block,
                    data,
                    fallback,
                    partition,
                    audit is not None,
                    proc.config.block_limit,
                )
                made = await asyncio.get_running_loop().run_in_executor(None, work)
            block, count, (bid, txn, idempotent), content_crc = made
            if idempotent and not self._idempotent:
                self._idempotent = True
                self._note_unanswered(0)
            if txn:
                return _done(KafkaError.INVALID_REQUEST, "transactions are not supported")
            limit = proc.config.block_limit
            if len(block) > limit:
                raise MessageTooLargeError(
                    f"{count} records make a {len(block)}-byte block, over the limit of "
                    f"topic {topic!r} ({limit} bytes): lower batch.size"
                )
            header = decode_block_header(block)  # (made here: no second CRC pass)
            batch, index, dup = await proc.append(memoryview(block), header, t0)
            if audit is not None and not dup:  # (a duplicate's first copy reports it)
                audit.watch(proc, batch, index, header, content_crc, _ACKS[acks], "kafka")
        except MemqError as e:
            code = kafka_error(e, v)
            self.server.metrics.errors.labels(f"kafka_{code}").inc()
            if code in (KafkaError.INVALID_RECORD, KafkaError.CORRUPT_MESSAGE):
                log.warning("kafka listener: %s from %s: %s", topic, self.peer, e)
            return _done(code, str(e))
        offset = self.listener.base_offset(topic, partition, bid, count)
        flow = self.listener.flow_sent(topic, id(self), partition, waits=acks == -1)
        if acks == -1 and not dup and not flow.pipelines:
            self.listener.hold(topic, id(self), batch)
        if acks == 1:
            if not dup:
                proc.note_ack1(batch, header.record_count)
            return _done(KafkaError.NONE, None, offset)
        task = asyncio.get_running_loop().create_task(
            self._await_stored(batch.done, topic, offset, timeout_ms, v, t0)
        )
        if acks == -1:
            task.add_done_callback(functools.partial(_answered, flow))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if last:
            self.listener.seal_if_stalled(topic, proc, batch)
        return task

    async def _await_stored(
        self, done: asyncio.Future[Any], topic: str, offset: int, timeout_ms: int, v: int, t0: float
    ) -> PartitionResult:
        try:
            await asyncio.wait_for(
                asyncio.shield(done), timeout_ms / 1000 if timeout_ms > 0 else None
            )
        except MemqError as e:  # (first: a RequestTimeoutError is a TimeoutError too)
            return (kafka_error(e, v), -1, str(e))
        except TimeoutError:
            return (KafkaError.REQUEST_TIMED_OUT, -1, f"not stored within {timeout_ms} ms")
        except asyncio.CancelledError:
            if done.cancelled():  # the upload was cancelled (shutdown), not us
                return (KafkaError.NOT_LEADER_OR_FOLLOWER, -1, "the broker is shutting down")
            raise
        self.server.metrics.ack_seconds.labels(topic, "all").observe(time.monotonic() - t0)
        return (KafkaError.NONE, offset, None)


def _bearer(message: bytes) -> tuple[bytes, str]:
    """(token, authorization id or "") of an OAUTHBEARER client response (RFC 7628 3.1)."""
    gs2, sep, rest = message.partition(b"\x01")
    fields = gs2.split(b",")
    if (
        not sep or len(fields) != 3 or fields[0] != b"n" or fields[2]
        or (fields[1] and not fields[1].startswith(b"a="))
    ):  # fmt: skip
        raise AuthenticationError("malformed SASL/OAUTHBEARER message (no 'n,,' header)")
    if not rest.endswith(b"\x01\x01"):
        raise AuthenticationError("malformed SASL/OAUTHBEARER message (no closing ^A^A)")
    # saslname escapes (RFC 5801): =2C is ',' and =3D is '='
    authzid = fields[1][2:].replace(b"=2C", b",").replace(b"=3D", b"=").decode("utf-8", "replace")
    for kv in rest[:-2].split(b"\x01"):
        key, _, value = kv.partition(b"=")
        if key == b"auth":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() != b"bearer" or not token.strip():
                raise AuthenticationError("SASL/OAUTHBEARER auth is not 'Bearer <token>'")
            return token.strip(), authzid
    raise AuthenticationError("SASL/OAUTHBEARER message without auth=Bearer <token>")


def _answered(flow: Flow, _task: object) -> None:
    flow.outstanding -= 1
    flow.seen = time.monotonic()  # (idle from its last answer, not from its last send)


def _done(code: int, msg: str | None = None, offset: int = -1) -> Awaitable[PartitionResult]:
    fut: asyncio.Future[PartitionResult] = asyncio.get_running_loop().create_future()
    fut.set_result((code, offset, msg))
    return fut
