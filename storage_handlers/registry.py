"""Named storage handlers: build writers from config and readers from public settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memq.config import FilesystemConfig, S3Config, StorageConfig
from memq.errors import ConfigError
from memq.storage_handlers.base import StorageReader, StorageWriter

__all__ = ["HANDLERS", "make_reader", "make_writer"]

HANDLERS = ("s3", "filesystem", "devnull")


def make_writer(cfg: StorageConfig, cluster: str) -> StorageWriter:
    """The writer for a topic's storage config (clients are created lazily)."""
    if cfg.type == "s3" and cfg.s3 is not None:
        from memq.storage_handlers.s3 import S3Writer

        return S3Writer(cfg.s3, cluster)
    if cfg.type == "filesystem" and cfg.filesystem is not None:
        from memq.storage_handlers.filesystem import FilesystemWriter

        return FilesystemWriter(cfg.filesystem, cluster)
    if cfg.type == "devnull":
        from memq.storage_handlers.devnull import DevNullWriter

        return DevNullWriter(cluster)
    raise ConfigError(f"unknown storage type {cfg.type!r}: use one of {', '.join(HANDLERS)}")


def make_reader(
    storage: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> StorageReader:
    """A reader for the public storage settings a broker advertises (``StorageConfig.public``).

    ``overrides`` replace advertised fields (e.g. an ``endpoint_url`` reachable from
    this client, or a ``root`` where the filesystem is mounted here).
    """
    s = {**storage, **(overrides or {})}
    kind = s.get("type")
    if kind == "s3":
        from memq.storage_handlers.s3 import S3Reader

        fields = {k: s[k] for k in ("bucket", "region", "endpoint_url", "profile") if s.get(k)}
        fields.setdefault("bucket", "unknown-bucket")
        extra = {k: v for k, v in s.items() if k in S3Config.model_fields and k not in fields}
        extra.pop("type", None)
        return S3Reader(S3Config.model_validate({**extra, **fields}))
    if kind == "filesystem":
        from memq.storage_handlers.filesystem import FilesystemReader

        root = s.get("root")
        return FilesystemReader(FilesystemConfig(root=str(root)) if root else None)
    raise ConfigError(
        f"cannot read storage type {kind!r}: readers exist for s3 and filesystem "
        "(devnull keeps nothing to read)"
    )
