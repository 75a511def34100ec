"""The MemQ producer."""

from memq.producer.config import ProducerConfig
from memq.producer.futures import RecordFuture, RecordMetadata
from memq.producer.producer import BufferFullError, Producer

__all__ = ["BufferFullError", "Producer", "ProducerConfig", "RecordFuture", "RecordMetadata"]
