"""MemQ-py: object-store micro-batching pub/sub.

Producers send blocks of records to brokers; brokers pack blocks into immutable
batch objects in S3 and publish a pointer per object to a Kafka notification topic;
consumers read the pointers and fetch the objects straight from S3.
"""

from memq.errors import MemqError, MemqFormatError
from memq.producer import BufferFullError, Producer, ProducerConfig, RecordMetadata

__version__ = "0.1.0"

__all__ = [
    "BufferFullError",
    "MemqError",
    "MemqFormatError",
    "Producer",
    "ProducerConfig",
    "RecordMetadata",
    "__version__",
]
