"""The storage interface: a small writer side and a small reader side.

Writers store one sealed batch object and return where it went (and delete objects:
an orphan, or many at once for retention); readers read a byte range and list a prefix. Implementations are synchronous and thread-safe; the
broker calls writers from a thread pool so uploads never block its event loop.
A :class:`StorageHandler` names one implementation and builds its two sides
(:mod:`memq.storage_handlers.registry` picks it by the ``storage.type`` name).
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from memq.errors import ConfigError, ObjectNotFoundError

if TYPE_CHECKING:
    from memq.config import StorageConfig
    from memq.storage_handlers.receive import ReceiveBuffers

__all__ = [
    "DeleteResult",
    "ObjectInfo",
    "StorageHandler",
    "StorageReader",
    "StorageWriter",
    "StoredObject",
    "ViewReader",
    "unreadable",
]


@dataclass(frozen=True, slots=True)
class StoredObject:
    """Where a batch object was stored: enough for a reader to fetch it back."""

    storage: str
    bucket: str
    key: str
    size: int


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    #: When the object was stored (ms since the epoch), when the storage says.
    modified_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What a :meth:`StorageWriter.delete_many` call removed, and what it could not."""

    deleted: tuple[str, ...] = ()
    #: key -> why it was not deleted.
    failed: tuple[tuple[str, str], ...] = ()


class StorageWriter(ABC):
    """Stores sealed batch objects under the MemQ key layout."""

    name: ClassVar[str]

    @abstractmethod
    def store(
        self, topic: str, batch_id: str, created_ms: int, data: bytes | bytearray | memoryview
    ) -> StoredObject:
        """Store ``data`` as one immutable object; raises :class:`memq.errors.StorageError`."""

    def delete(self, key: str) -> None:  # noqa: B027 - optional hook
        """Remove an object this writer stored (an orphan whose notification failed)."""

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        """Remove many objects (retention, purge); a missing one counts as deleted.

        Never raises for a single object: failures are reported per key. The default
        deletes one at a time; handlers override it with a batched call.
        """
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        for key in keys:
            try:
                self.delete(key)
                deleted.append(key)
            except Exception as e:
                failed.append((key, str(e)))
        return DeleteResult(tuple(deleted), tuple(failed))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads."""


class StorageReader(ABC):
    """Reads objects back by (bucket, key)."""

    name: ClassVar[str]

    @abstractmethod
    def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of an object (``end=None``: to the end).

        Raises :class:`memq.errors.ObjectNotFoundError` when it does not exist.
        """

    def read_whole(
        self, bucket: str, key: str, size: int, buffers: ReceiveBuffers | None = None
    ) -> bytes | memoryview:
        """A whole object its notification says is ``size`` bytes: received into one of
        ``buffers`` (a read-only view) where this reader can (S3, filesystem), else as
        :meth:`read` gives it. An object of another size comes back whole as ``bytes``
        (the caller's checks then say what is wrong with it)."""
        into = buffers.take(size) if buffers is not None else None
        got = self.receive(bucket, key, into) if into is not None else None
        return self.read(bucket, key) if got is None else got

    def receive(self, bucket: str, key: str, into: memoryview) -> bytes | memoryview | None:
        """The whole object received into ``into`` (then returned read-only), or its
        bytes read some other way; ``None`` where this reader cannot receive into a
        buffer (this default) or the object is not ``len(into)`` bytes."""
        return None

    def exists(self, bucket: str, key: str) -> bool:
        """Whether the object exists (a cheap check: readers override it with a HEAD or a
        stat; this default reads its first byte)."""
        try:
            self.read(bucket, key, 0, 1)
        except ObjectNotFoundError:
            return False
        return True

    @abstractmethod
    def list_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, in key order."""

    @abstractmethod
    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        """The next path level under ``prefix`` (S3 common prefixes, ending in ``/``)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads."""


class StorageHandler(ABC):
    """A named storage plugin: builds a writer from config and a reader from public settings.

    ``name`` is the ``storage.type`` that selects it; ``config_model`` is the model of
    its ``storage.<name>`` section (None: it takes no settings). Handlers never create
    clients when built: connections (and heavy imports like boto3) wait for first use.
    """

    name: ClassVar[str]
    config_model: ClassVar[type[BaseModel] | None]

    @classmethod
    @abstractmethod
    def writer(cls, cfg: StorageConfig, cluster: str) -> StorageWriter:
        """The writer for a topic's storage config (``cfg.type == name``)."""

    @classmethod
    @abstractmethod
    def reader(
        cls, public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> StorageReader:
        """A reader for the settings a broker advertises (``StorageConfig.public``).

        ``overrides`` replace advertised fields (e.g. an ``endpoint_url`` reachable from
        this client, or a ``root`` where the filesystem is mounted here).
        """

    @classmethod
    def deleter(
        cls,
        public_settings: Mapping[str, Any],
        cluster: str,
        overrides: Mapping[str, Any] | None = None,
    ) -> StorageWriter:
        """A writer for the storage a broker advertises, used to delete objects (retention,
        purge): the same settings and ``overrides`` as :meth:`reader`."""
        raise unreadable(cls.name)


def unreadable(kind: object) -> ConfigError:
    """The error for a storage type that has no reader."""
    return ConfigError(
        f"cannot read storage type {kind!r}: readers exist for s3 and filesystem "
        "(devnull keeps nothing to read)"
    )


class ViewReader(io.RawIOBase):
    """A seekable file over a memoryview, so uploads read the batch buffer without a copy.

    ``read`` returns memoryview slices (zero-copy) of at least ``min_chunk`` bytes when
    that much is left, even if a smaller size is asked for: HTTP libraries read request
    bodies in 8-16 KiB blocks, which costs ~500 Python round trips per 8 MiB batch; the
    socket accepts any buffer, so larger slices just mean fewer, larger writes.
    """

    def __init__(self, data: bytes | bytearray | memoryview, min_chunk: int = 1 << 20) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._pos = 0
        self.min_chunk = min_chunk

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(b), len(self._view) - self._pos)
        memoryview(b).cast("B")[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> memoryview:
        left = len(self._view) - self._pos
        n = left if size is None or size < 0 else min(left, max(size, self.min_chunk))
        out = self._view[self._pos : self._pos + n]
        self._pos += n
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def __len__(self) -> int:
        return len(self._view)
