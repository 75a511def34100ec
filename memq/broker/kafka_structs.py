"""Kafka request/response versions aiokafka does not declare, in aiokafka's own schema
types: Metadata v6-v8, InitProducerId v1 and FindCoordinator v2 (the later versions add
fields only, or none)."""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.coordination import FindCoordinatorRequest_v1, FindCoordinatorResponse_v1
from aiokafka.protocol.metadata import MetadataRequest_v5, MetadataResponse_v5
from aiokafka.protocol.transaction import InitProducerIdRequest_v0, InitProducerIdResponse_v0
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Schema, String

__all__ = [
    "FindCoordinatorRequest_v2",
    "FindCoordinatorResponse_v2",
    "InitProducerIdRequest_v1",
    "InitProducerIdResponse_v1",
    "MetadataRequest_v6",
    "MetadataRequest_v7",
    "MetadataRequest_v8",
    "MetadataResponse_v6",
    "MetadataResponse_v7",
    "MetadataResponse_v8",
]

_PARTITION_V7 = (
    ("error_code", Int16),
    ("partition", Int32),
    ("leader", Int32),
    ("leader_epoch", Int32),
    ("replicas", Array(Int32)),
    ("isr", Array(Int32)),
    ("offline_replicas", Array(Int32)),
)
_BROKERS = (
    "brokers",
    Array(
        ("node_id", Int32), ("host", String("utf-8")), ("port", Int32), ("rack", String("utf-8"))
    ),
)


class MetadataResponse_v6(Response):  # noqa: N801 (aiokafka's naming)
    API_KEY = 3
    API_VERSION = 6
    SCHEMA = MetadataResponse_v5.SCHEMA


class MetadataResponse_v7(Response):  # noqa: N801
    API_KEY = 3
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        _BROKERS,
        ("cluster_id", String("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("topic", String("utf-8")),
                ("is_internal", Boolean),
                ("partitions", Array(*_PARTITION_V7)),
            ),
        ),
    )


class MetadataResponse_v8(Response):  # noqa: N801
    API_KEY = 3
    API_VERSION = 8
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        _BROKERS,
        ("cluster_id", String("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("topic", String("utf-8")),
                ("is_internal", Boolean),
                ("partitions", Array(*_PARTITION_V7)),
                ("topic_authorized_operations", Int32),
            ),
        ),
        ("cluster_authorized_operations", Int32),
    )


class MetadataRequest_v6(RequestStruct):  # noqa: N801
    API_KEY = 3
    API_VERSION = 6
    RESPONSE_TYPE = MetadataResponse_v6
    SCHEMA = MetadataRequest_v5.SCHEMA


class MetadataRequest_v7(RequestStruct):  # noqa: N801
    API_KEY = 3
    API_VERSION = 7
    RESPONSE_TYPE = MetadataResponse_v7
    SCHEMA = MetadataRequest_v5.SCHEMA


class MetadataRequest_v8(RequestStruct):  # noqa: N801
    API_KEY = 3
    API_VERSION = 8
    RESPONSE_TYPE = MetadataResponse_v8
    SCHEMA = Schema(
        ("topics", Array(String("utf-8"))),
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
    )


class InitProducerIdResponse_v1(Response):  # noqa: N801
    API_KEY = 22
    API_VERSION = 1
    SCHEMA = InitProducerIdResponse_v0.SCHEMA


class InitProducerIdRequest_v1(RequestStruct):  # noqa: N801
    API_KEY = 22
    API_VERSION = 1
    RESPONSE_TYPE = InitProducerIdResponse_v1
    SCHEMA = InitProducerIdRequest_v0.SCHEMA


class FindCoordinatorResponse_v2(Response):  # noqa: N801
    API_KEY = 10
    API_VERSION = 2
    SCHEMA = FindCoordinatorResponse_v1.SCHEMA


class FindCoordinatorRequest_v2(RequestStruct):  # noqa: N801
    API_KEY = 10
    API_VERSION = 2
    RESPONSE_TYPE = FindCoordinatorResponse_v2
    SCHEMA = FindCoordinatorRequest_v1.SCHEMA
