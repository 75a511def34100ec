"""MemQ-py: object-store micro-batching pub/sub.

Producers send blocks of records to brokers; brokers pack blocks into immutable
batch objects in S3 and publish a pointer per object to a Kafka notification topic;
consumers read the pointers and fetch the objects straight from S3.

The front door: ``from memq import Producer, Consumer, AdminClient``. Everything lives
under this one namespace (``memq.consumer``, ``memq.governor``, ``memq.spark``,
``memq.storage_handlers``); the names below are loaded on first use, so ``import
memq.formats`` (e.g. on a Spark worker) does not pull in the clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memq.errors import MemqError, MemqFormatError

if TYPE_CHECKING:
    from memq.client.admin import AdminClient
    from memq.consumer import Consumer, ConsumerConfig, Message, MessageId
    from memq.producer import BufferFullError, Producer, ProducerConfig, RecordMetadata

__version__ = "0.1.0"

_LAZY = {
    "AdminClient": "memq.client.admin",
    "BufferFullError": "memq.producer",
    "Consumer": "memq.consumer",
    "ConsumerConfig": "memq.consumer",
    "Message": "memq.consumer",
    "MessageId": "memq.consumer",
    "Producer": "memq.producer",
    "ProducerConfig": "memq.producer",
    "RecordMetadata": "memq.producer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memq' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AdminClient",
    "BufferFullError",
    "Consumer",
    "ConsumerConfig",
    "MemqError",
    "MemqFormatError",
    "Message",
    "MessageId",
    "Producer",
    "ProducerConfig",
    "RecordMetadata",
    "__version__",
]
