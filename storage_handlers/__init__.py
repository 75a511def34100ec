"""Storage handlers (S3, filesystem, devnull) and the Kafka notification sink.

Writers and readers are separate, small interfaces (:mod:`storage_handlers.base`).
Heavy client libraries (boto3, confluent-kafka) load only when a handler is built.
"""

from memq.storage_handlers.base import ObjectInfo, StorageReader, StorageWriter, StoredObject

__all__ = ["ObjectInfo", "StorageReader", "StorageWriter", "StoredObject"]
