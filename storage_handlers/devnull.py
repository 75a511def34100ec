"""devnull storage: accepts and discards every object (benchmarks of the broker itself)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from memq.formats.keys import object_key, validate_name
from memq.storage_handlers.base import (
    StorageHandler,
    StorageReader,
    StorageWriter,
    StoredObject,
    unreadable,
)

if TYPE_CHECKING:
    from memq.config import StorageConfig

__all__ = ["DevNullHandler", "DevNullWriter"]


class DevNullWriter(StorageWriter):
    name: ClassVar[str] = "devnull"

    def __init__(self, cluster: str) -> None:
        self.cluster = validate_name("cluster", cluster)

    def store(
        self, topic: str, batch_id: str, created_ms: int, data: bytes | bytearray | memoryview
    ) -> StoredObject:
        key = object_key(self.cluster, topic, batch_id, created_ms)
        return StoredObject(self.name, "", key, len(data))


class DevNullHandler(StorageHandler):
    """Writes nowhere; has no reader (there is nothing to read back)."""

    name: ClassVar[str] = "devnull"
    config_model: ClassVar[type[BaseModel] | None] = None

    @classmethod
    def writer(cls, cfg: StorageConfig, cluster: str) -> StorageWriter:
        return DevNullWriter(cluster)

    @classmethod
    def reader(
        cls, public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> StorageReader:
        raise unreadable(cls.name)
