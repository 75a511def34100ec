"""Typed errors of the ``memq`` data source (all subclasses of :class:`memq.MemqError`).

A corrupt object is :class:`memq.errors.CorruptObjectError` (built by
:func:`corrupt_object`, its message names the object and the way to skip it).
"""

from __future__ import annotations

from memq.errors import CorruptObjectError, MemqError, ObjectNotFoundError

__all__ = ["SKIP_HINT", "BackfillError", "MissingObjectError", "corrupt_object"]

SKIP_HINT = (
    'to skip such objects and count them instead, read with .option("on_corrupt", "skip") '
    "(memq backfill --on-corrupt skip)"
)


def corrupt_object(bucket: str, key: str, cause: BaseException) -> CorruptObjectError:
    """A listed batch object whose bytes do not decode (CRC mismatch, truncation, ...)."""
    return CorruptObjectError(
        f"corrupt MemQ batch object s3://{bucket}/{key}: {type(cause).__name__}: {cause}; "
        f"{SKIP_HINT}",
        key=key,
        bucket=bucket,
    )


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
