"""Named storage handlers: build writers from config and readers from public settings.

``HANDLERS`` maps a ``storage.type`` name to its :class:`StorageHandler`. Importing a
handler module is cheap: boto3 loads only when an S3 client is first used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memq.config import StorageConfig
from memq.errors import ConfigError
from memq.storage_handlers.base import StorageHandler, StorageReader, StorageWriter, unreadable
from memq.storage_handlers.devnull import DevNullHandler
from memq.storage_handlers.filesystem import FilesystemHandler
from memq.storage_handlers.s3 import S3Handler

__all__ = ["HANDLERS", "make_deleter", "make_reader", "make_writer"]

HANDLERS: dict[str, type[StorageHandler]] = {
    h.name: h for h in (S3Handler, FilesystemHandler, DevNullHandler)
}


def make_writer(cfg: StorageConfig, cluster: str) -> StorageWriter:
    """The writer for a topic's storage config (clients are created lazily)."""
    handler = HANDLERS.get(cfg.type)
    if handler is None:
        raise ConfigError(f"unknown storage type {cfg.type!r}: use one of {', '.join(HANDLERS)}")
    return handler.writer(cfg, cluster)


def make_reader(
    storage: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> StorageReader:
    """A reader for the public storage settings a broker advertises (``StorageConfig.public``).

    ``overrides`` replace advertised fields (e.g. an ``endpoint_url`` reachable from
    this client, or a ``root`` where the filesystem is mounted here).
    """
    kind = {**storage, **(overrides or {})}.get("type")
    handler = HANDLERS.get(kind) if isinstance(kind, str) else None
    if handler is None:
        raise unreadable(kind)
    return handler.reader(storage, overrides)


def make_deleter(
    storage: Mapping[str, Any], cluster: str, overrides: Mapping[str, Any] | None = None
) -> StorageWriter:
    """A writer that deletes objects of the storage a broker advertises (retention, purge);
    settings as for :func:`make_reader`."""
    kind = {**storage, **(overrides or {})}.get("type")
    handler = HANDLERS.get(kind) if isinstance(kind, str) else None
    if handler is None:
        raise unreadable(kind)
    return handler.deleter(storage, cluster, overrides)
