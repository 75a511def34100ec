"""Request and response bodies carried by wire frames (pure, no I/O).

WRITE is the hot path and binary; control requests (METADATA, admin) are msgpack
maps, validated into typed models. Layouts are documented in ``docs/formats.md``.
Admin requests have one model per request type (:data:`ADMIN_REQUESTS`) and one
decoder (:func:`decode_admin`): the broker parses an admin request once, checks its
ACL target, and hands the typed request to its cluster view.

WRITE request body::

    0  1  ack        0 = none, 1 = leader (in the open batch), 2 = all (stored + notified)
    1  1  flags      0 (reserved)
    2  2  topic_len  u16
    4  n  topic      UTF-8
    .  .  block      one producer block, to the end of the frame
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, ClassVar, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memq.acl import AclEntry
from memq.errors import InvalidRequestError, MalformedError
from memq.formats.frames import RequestType

__all__ = [
    "ADMIN_REQUESTS",
    "WRITE_KEYED",
    "Ack",
    "AclAdd",
    "AclList",
    "AclListResponse",
    "AclRemove",
    "AdminRequest",
    "AuthResult",
    "BrokerInfo",
    "ClusterMetadata",
    "ClusterStatus",
    "ClusterStatusRequest",
    "MetadataRequest",
    "TopicCreate",
    "TopicDelete",
    "TopicDeleted",
    "TopicList",
    "TopicListResponse",
    "TopicMetadata",
    "TopicUpdate",
    "WriteAck",
    "decode_admin",
    "decode_msg",
    "decode_write",
    "decode_write_request",
    "encode_msg",
    "encode_write_header",
    "parse_ack",
]

_WRITE = struct.Struct(">BBH")
#: WRITE flag: the block holds keyed records (one key lane of one producer).
WRITE_KEYED = 0x01
T = TypeVar("T", bound=BaseModel)


class Ack(IntEnum):
    """How much a producer waits for (wire constants)."""

    NONE = 0
    LEADER = 1
    ALL = 2


def parse_ack(value: str | int) -> Ack:
    """Kafka spellings: ``0``, ``1``, ``all`` / ``-1`` (an :class:`Ack` passes as is; the
    wire value 2 is not a setting: Kafka rejects ``acks=2``)."""
    if isinstance(value, Ack):
        return value
    v = str(value).strip().lower()
    if v in {"all", "-1"}:
        return Ack.ALL
    if v == "1":
        return Ack.LEADER
    if v == "0":
        return Ack.NONE
    raise InvalidRequestError(f"acks must be 0, 1 or all (-1 is all), got {value!r}")


def encode_write_header(topic: str, ack: Ack, *, keyed: bool = False) -> bytes:
    """The WRITE body bytes before the block (send ``header + block`` without copying).

    ``keyed``: the block holds a key lane's records (flag :data:`WRITE_KEYED`): the
    broker notifies its batch with a Kafka key, in seal order (docs/guarantees.md).
    """
    t = topic.encode("utf-8")
    if len(t) > 0xFFFF:
        raise InvalidRequestError("topic name too long")
    return _WRITE.pack(int(ack), WRITE_KEYED if keyed else 0, len(t)) + t


def decode_write(body: bytes | memoryview) -> tuple[Ack, str, memoryview]:
    """Split a WRITE body into (ack, topic, block view) without copying the block."""
    ack, topic, block, _keyed = decode_write_request(body)
    return ack, topic, block


def decode_write_request(body: bytes | memoryview) -> tuple[Ack, str, memoryview, bool]:
    """Split a WRITE body into (ack, topic, block view, keyed) without copying the block."""
    view = memoryview(body)
    if len(view) < _WRITE.size:
        raise MalformedError("WRITE body shorter than its 4-byte header")
    ack, flags, tlen = _WRITE.unpack_from(view)
    if flags & ~WRITE_KEYED:
        raise MalformedError(
            f"reserved WRITE flags set: {flags:#04x} (only {WRITE_KEYED:#04x}, keyed, is "
            "defined): upgrade the broker or the producer so both speak the same protocol"
        )
    try:
        ack_mode = Ack(ack)
    except ValueError:
        raise InvalidRequestError(f"unknown ack mode {ack}: use 0, 1 or 2 (all)") from None
    end = _WRITE.size + tlen
    if len(view) < end:
        raise MalformedError("WRITE body ends inside its topic name")
    try:
        topic = bytes(view[_WRITE.size : end]).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError("WRITE topic is not valid UTF-8") from None
    return ack_mode, topic, view[end:], bool(flags & WRITE_KEYED)


# --- msgpack control messages -------------------------------------------------------------


def encode_msg(model: BaseModel) -> bytes:
    try:
        out: bytes = msgpack.packb(model.model_dump(mode="json"), use_bin_type=True)
    except OverflowError:
        raise InvalidRequestError(
            f"a number in the {type(model).__name__} request is out of range: integers "
            "must fit 64 bits (at most 9223372036854775807)"
        ) from None
    return out


def decode_msg(model: type[T], body: bytes | memoryview, what: str) -> T:
    """Decode a msgpack map into ``model``; any problem is an InvalidRequestError."""
    try:
        obj = msgpack.unpackb(bytes(body), raw=False, strict_map_key=True)
    except Exception as e:
        raise MalformedError(f"{what} body is not valid msgpack: {e}") from None
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or what
        raise InvalidRequestError(f"{what}: {where}: {first['msg']}") from None


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class AuthResult(_Msg):
    """Answer to AUTH: who the connection now is, until when (unix seconds)."""

    principal: str
    expires: int


class MetadataRequest(_Msg):
    #: Topics to describe; None = every topic the broker knows.
    topics: list[str] | None = None


class BrokerInfo(_Msg):
    id: str
    host: str
    port: int
    http_port: int | None = None
    rack: str | None = None
    #: Port of the broker's Kafka-protocol listener (None: it has none).
    kafka_port: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class TopicMetadata(_Msg):
    name: str
    #: Broker ids that accept writes for the topic.
    writers: list[str] = []
    storage: dict[str, Any] = {}
    notification: dict[str, Any] = {}
    max_block_bytes: int = 0
    #: The topic's retention.ms (None: forever).
    retention_ms: int | None = None
    error: str | None = None


class ClusterMetadata(_Msg):
    cluster: str
    broker: str
    brokers: list[BrokerInfo] = []
    topics: dict[str, TopicMetadata] = {}
    governor: str | None = None

    def writer_addresses(self, topic: str) -> list[str]:
        by_id = {b.id: b for b in self.brokers}
        t = self.topics.get(topic)
        if t is None:
            return []
        return [by_id[w].address for w in t.writers if w in by_id]


class WriteAck(_Msg):
    """Body of a successful ``ack=all`` WRITE response: where the block went."""

    bucket: str
    key: str
    block: int = Field(ge=0)
    duplicate: bool = False


# --- admin requests -----------------------------------------------------------------------


def nested_settings(pairs: dict[str, Any]) -> dict[str, Any]:
    """``{"batch.ms": 500}`` -> ``{"batch": {"ms": 500}}`` (dotted paths to nested maps)."""
    out: dict[str, Any] = {}
    for path, value in pairs.items():
        node = out
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise InvalidRequestError(f"setting {path!r} conflicts with another one")
        node[parts[-1]] = value
    return out


class AdminRequest(_Msg):
    """Base of admin requests. ``target`` is what the ACL check is about: the topic
    acted on, or ``*`` for cluster-wide requests (which need ``admin`` on ``*``)."""

    type: ClassVar[RequestType]

    @property
    def target(self) -> str:
        return "*"


class _TopicRequest(AdminRequest):
    #: The topic acted on.
    name: str = Field(min_length=1)

    @property
    def target(self) -> str:
        return self.name


def _names_endpoints(settings: dict[str, Any]) -> bool:
    """Whether ``settings`` say where a topic's data and pointers go (``storage.*``,
    ``notification.topic``/``bootstrap_servers``/``producer``): cluster admins only (ACL
    target ``*``), as a topic admin could otherwise read or write another topic's data
    (its notification topic), or have the broker send its Kafka credentials to a host
    of their choosing."""
    nested = nested_settings(settings)
    notification = nested.get("notification")
    return "storage" in nested or (
        isinstance(notification, dict)
        and any(k in notification for k in ("topic", "bootstrap_servers", "producer"))
    )


class TopicCreate(_TopicRequest):
    type = RequestType.TOPIC_CREATE
    #: Settings over the cluster's topic defaults, as dotted keys (``batch.ms``).
    settings: dict[str, Any] = {}
    #: Succeed (answering the existing topic's config) when it exists.
    if_not_exists: bool = False

    def nested(self) -> dict[str, Any]:
        return nested_settings(self.settings)

    @property
    def target(self) -> str:
        return "*" if _names_endpoints(self.settings) else self.name


class TopicUpdate(_TopicRequest):
    type = RequestType.TOPIC_UPDATE
    settings: dict[str, Any] = {}

    def nested(self) -> dict[str, Any]:
        return nested_settings(self.settings)

    @property
    def target(self) -> str:
        return "*" if _names_endpoints(self.settings) else self.name


class TopicDelete(_TopicRequest):
    """Delete a topic (its data stays, recorded, until purged: the name stays taken); a
    topic deleted before answers that record again. ``forget``: the data was purged,
    drop the record (the name is free again)."""

    type = RequestType.TOPIC_DELETE
    forget: bool = False


class TopicList(AdminRequest):
    type = RequestType.TOPIC_LIST


class ClusterStatusRequest(AdminRequest):
    type = RequestType.CLUSTER_STATUS


class AclList(AdminRequest):
    type = RequestType.ACL_LIST


class AclAdd(AdminRequest):
    type = RequestType.ACL_ADD
    entry: AclEntry


class AclRemove(AdminRequest):
    type = RequestType.ACL_REMOVE
    entry: AclEntry


#: Every admin request type and its model (one dispatch for broker and client).
ADMIN_REQUESTS: dict[int, type[AdminRequest]] = {
    int(m.type): m
    for m in (
        TopicCreate,
        TopicUpdate,
        TopicDelete,
        TopicList,
        ClusterStatusRequest,
        AclList,
        AclAdd,
        AclRemove,
    )
}


def decode_admin(req_type: int, body: bytes | memoryview) -> AdminRequest:
    """The typed admin request of a frame; InvalidRequestError/MalformedError otherwise."""
    model = ADMIN_REQUESTS.get(req_type)
    if model is None:
        raise InvalidRequestError(f"request type {req_type} is not an admin request")
    if not body:
        body = encode_msg(_Msg())
    return decode_msg(model, body, model.type.name)


class TopicListResponse(_Msg):
    topics: list[str]


class TopicDeleted(_Msg):
    deleted: str
    #: The deleted topic's config (without secrets): where its data is.
    leftovers: dict[str, Any] | None = None


class AclListResponse(_Msg):
    """The ACL entries in force (after an add or remove, too)."""

    entries: list[AclEntry]


class ClusterStatus(BaseModel):
    """``memq cluster status``: brokers with load and topics, the governor, the
    assignment, capacity and shortfall. Standalone brokers answer a subset."""

    model_config = ConfigDict(frozen=True, extra="allow")

    cluster: str
    governor: str | None = None
    standalone: bool = False
    assignment_version: int | None = None
    brokers: list[dict[str, Any]] = []
    topics: dict[str, dict[str, Any]] = {}
