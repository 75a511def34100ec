"""devnull storage: accepts and discards every object (benchmarks of the broker itself)."""

from __future__ import annotations

from typing import ClassVar

from memq.formats.keys import object_key, validate_name
from memq.storage_handlers.base import StorageWriter, StoredObject

__all__ = ["DevNullWriter"]


class DevNullWriter(StorageWriter):
    name: ClassVar[str] = "devnull"

    def __init__(self, cluster: str) -> None:
        self.cluster = validate_name("cluster", cluster)

    def store(
        self, topic: str, batch_id: str, created_ms: int, data: bytes | bytearray | memoryview
    ) -> StoredObject:
        key = object_key(self.cluster, topic, batch_id, created_ms)
        return StoredObject(self.name, "", key, len(data))
