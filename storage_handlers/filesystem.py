"""Filesystem storage: a directory tree with the S3 key layout (on-prem, NFS, benchmarks).

Writes go to a temp file in the target directory, are fsynced, then atomically
renamed, so a reader never sees a partial object. The ``bucket`` of a stored
object is the absolute root directory.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from memq.config import FilesystemConfig, StorageConfig
from memq.errors import ConfigError, ObjectNotFoundError, StorageError
from memq.formats.keys import object_key, validate_name
from memq.storage_handlers.base import (
    DeleteResult,
    ObjectInfo,
    StorageHandler,
    StorageReader,
    StorageWriter,
    StoredObject,
)

__all__ = ["FilesystemConfig", "FilesystemHandler", "FilesystemReader", "FilesystemWriter"]


def _safe_path(root: Path, key: str) -> Path:
    path = (root / key).resolve()
    if not path.is_relative_to(root.resolve()):
        raise StorageError(f"key {key!r} escapes the storage root {root}")
    return path


class FilesystemWriter(StorageWriter):
    name: ClassVar[str] = "filesystem"

    def __init__(self, cfg: FilesystemConfig, cluster: str) -> None:
        self.config = cfg
        self.cluster = validate_name("cluster", cluster)
        self.root = Path(cfg.root).resolve()

    def store(
        self, topic: str, batch_id: str, created_ms: int, data: bytes | bytearray | memoryview
    ) -> StoredObject:
        key = object_key(
            self.cluster, topic, batch_id, created_ms, use_hash_prefix=self.config.use_hash_prefix
        )
        path = _safe_path(self.root, key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if self.config.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if self.config.fsync:
                dfd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write {path}: {e}") from e
        return StoredObject(self.name, str(self.root), key, len(data))

    def delete(self, key: str) -> None:
        _safe_path(self.root, key).unlink(missing_ok=True)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        """Unlink each object, then remove the directories left empty (up to the root)."""
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        dirs: set[Path] = set()
        for key in keys:
            try:
                path = _safe_path(self.root, key)
                path.unlink(missing_ok=True)
            except (OSError, StorageError) as e:
                failed.append((key, str(e)))
                continue
            deleted.append(key)
            dirs.add(path.parent)
        for leaf in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            d = leaf
            while d != self.root and d.is_relative_to(self.root):
                try:
                    d.rmdir()  # only when empty
                except OSError:
                    break
                d = d.parent
        return DeleteResult(tuple(deleted), tuple(failed))


class FilesystemReader(StorageReader):
    name: ClassVar[str] = "filesystem"

    def __init__(self, cfg: FilesystemConfig | None = None) -> None:
        self.root_override = Path(cfg.root).resolve() if cfg is not None else None

    def _root(self, bucket: str) -> Path:
        return self.root_override or Path(bucket)

    @contextmanager
    def _reading(self, bucket: str, key: str) -> Iterator[io.BufferedReader]:
        """The object's file, open; a missing or unreadable one as a typed error."""
        path = _safe_path(self._root(bucket), key)
        try:
            with open(path, "rb") as f:
                yield f
        except FileNotFoundError:
            raise ObjectNotFoundError(
                f"{path} does not exist (deleted, or the wrong root?)"
            ) from None
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e}") from e

    def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        with self._reading(bucket, key) as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def receive(self, bucket: str, key: str, into: memoryview) -> memoryview | None:
        with self._reading(bucket, key) as f:
            if f.readinto(into) == len(into) and not f.read(1):
                return into.toreadonly()
        return None

    def exists(self, bucket: str, key: str) -> bool:
        return _safe_path(self._root(bucket), key).is_file()

    def list_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        root = self._root(bucket)
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = _safe_path(root, base) if base else root
        if not start.is_dir():
            return
        found = []
        for dirpath, _dirs, files in os.walk(start):
            for f in files:
                if f.startswith("."):
                    continue
                full = Path(dirpath) / f
                key = full.relative_to(root).as_posix()
                if key.startswith(prefix):
                    st = full.stat()
                    found.append(ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000))
        yield from sorted(found, key=lambda o: o.key)

    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        root = self._root(bucket)
        base, _, partial = prefix.rpartition("/")
        d = _safe_path(root, base) if base else root
        if not d.is_dir():
            return []
        head = f"{base}/" if base else ""
        return sorted(
            f"{head}{p.name}/" for p in d.iterdir() if p.is_dir() and p.name.startswith(partial)
        )


class FilesystemHandler(StorageHandler):
    """A directory tree (local disk or NFS) with the S3 key layout."""

    name: ClassVar[str] = "filesystem"
    config_model: ClassVar[type[BaseModel] | None] = FilesystemConfig

    @classmethod
    def writer(cls, cfg: StorageConfig, cluster: str) -> StorageWriter:
        if cfg.filesystem is None:
            raise ConfigError("storage type filesystem needs a `filesystem:` section with `root`")
        return FilesystemWriter(cfg.filesystem, cluster)

    @classmethod
    def reader(
        cls, public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> StorageReader:
        """Reads under ``root`` if given (where the filesystem is mounted here), else each
        object's ``bucket`` (the writer's absolute root)."""
        root = {**public_settings, **(overrides or {})}.get("root")
        return FilesystemReader(FilesystemConfig(root=str(root)) if root else None)

    @classmethod
    def deleter(
        cls,
        public_settings: Mapping[str, Any],
        cluster: str,
        overrides: Mapping[str, Any] | None = None,
    ) -> StorageWriter:
        s = {**public_settings, **(overrides or {})}
        if not s.get("root"):
            raise ConfigError("filesystem storage without a root: nothing to delete from")
        cfg = FilesystemConfig(root=str(s["root"]), use_hash_prefix=bool(s.get("use_hash_prefix")))
        return FilesystemWriter(cfg, cluster)
