"""StorageReader.exists(): a cheap existence check (seek_to_beginning steps over objects
retention deleted with it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from memq.errors import ObjectNotFoundError
from memq.storage_handlers.base import ObjectInfo, StorageReader
from memq.storage_handlers.filesystem import FilesystemReader


def test_filesystem_exists(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "obj").write_bytes(b"x")
    reader = FilesystemReader()
    assert reader.exists(str(tmp_path), "a/obj")
    assert not reader.exists(str(tmp_path), "a/gone")
    assert not reader.exists(str(tmp_path), "a")  # a directory is no object


def test_the_default_reads_one_byte() -> None:
    class Reader(StorageReader):
        name = "test"

        def __init__(self) -> None:
            self.asked: list[tuple[str, int, int | None]] = []

        def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
            self.asked.append((key, start, end))
            if key != "here":
                raise ObjectNotFoundError(key)
            return b"x"

        def list_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
            return iter(())

        def list_dirs(self, bucket: str, prefix: str) -> list[str]:
            return []

    r = Reader()
    assert r.exists("b", "here") and not r.exists("b", "gone")
    assert r.asked == [("here", 0, 1), ("gone", 0, 1)]
