"""MemQ-py: object-store micro-batching pub/sub.

Producers send blocks of records to brokers; brokers pack blocks into immutable
batch objects in S3 and publish a pointer per object to a Kafka notification topic;
consumers read the pointers and fetch the objects straight from S3.
"""

from typing import TYPE_CHECKING, Any

from memq.errors import MemqError, MemqFormatError
from memq.producer import BufferFullError, Producer, ProducerConfig, RecordMetadata

if TYPE_CHECKING:
    from consumer import Consumer, ConsumerConfig, Message, MessageId

__version__ = "0.1.0"

_CONSUMER = {"Consumer", "ConsumerConfig", "Message", "MessageId"}


def __getattr__(name: str) -> Any:
    # The consumer lives in the ``consumer`` package (which imports memq): load it lazily.
    if name in _CONSUMER:
        import consumer

        return getattr(consumer, name)
    raise AttributeError(f"module 'memq' has no attribute {name!r}")


__all__ = [
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
