"""Typed errors of the ``memq`` data source (all subclasses of :class:`memq.MemqError`)."""

from __future__ import annotations

from memq.errors import MemqError, MemqFormatError, ObjectNotFoundError

__all__ = ["SKIP_HINT", "BackfillError", "CorruptObjectError", "MissingObjectError"]

SKIP_HINT = (
    'to skip such objects and count them instead, read with .option("on_corrupt", "skip") '
    "(memq backfill --on-corrupt skip)"
)


class CorruptObjectError(MemqFormatError):
    """A listed batch object whose bytes do not decode (CRC mismatch, truncation, ...)."""

    def __init__(self, bucket: str, key: str, cause: BaseException) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(
            f"corrupt MemQ batch object s3://{bucket}/{key}: {type(cause).__name__}: {cause}; "
            f"{SKIP_HINT}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args))


class MissingObjectError(ObjectNotFoundError):
    """A batch object that was listed when the query was planned but is gone when read."""

    def __init__(self, bucket: str, key: str, cause: BaseException) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(
            f"MemQ batch object s3://{bucket}/{key} was listed but is missing now "
            f"(deleted or expired by a lifecycle rule?): {cause}; {SKIP_HINT}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args))


class BackfillError(MemqError):
    """The backfill job could not run or finish (bad arguments, output exists, Spark failed)."""


def _rebuild(cls: type[Exception], args: tuple[object, ...]) -> Exception:
    """Unpickle an error by its message alone (Spark ships errors between processes)."""
    err = Exception.__new__(cls)
    err.args = args
    return err
