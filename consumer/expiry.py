"""Objects past their topic's retention (decisions, no I/O of their own).

Retention (``memq retention run``, S3 lifecycle rules) deletes a topic's objects once
they are older than its ``retention.ms``, while the notification topic keeps their
notifications a day longer (so a pointer never expires before its object). A consumer
meeting such a notification finds its object gone: that object *expired*, it is not
missing. :func:`is_expired` tells the two apart by the notification's age;
``missing.object.policy`` says what to do with an expired one (skip, by default), and
:func:`oldest_present` finds where a partition's readable data begins
(``Consumer.seek_to_beginning``).
"""

from __future__ import annotations

from collections.abc import Callable

from memq.errors import MemqFormatError, ObjectNotFoundError
from memq.formats.notification import Notification

__all__ = ["ObjectExpiredError", "expired_error", "is_expired", "oldest_present"]


class ObjectExpiredError(ObjectNotFoundError):
    """An object deleted past its topic's retention (its notification is older than
    ``retention.ms``): raised with ``missing.object.policy=fail``, given to ``on_skip``
    with ``skip``."""


def is_expired(note: Notification, retention_ms: int | None, now_ms: int) -> bool:
    """Whether retention may have deleted ``note``'s object: the notification is older
    than the topic's ``retention.ms`` (None: kept forever, never expired)."""
    return retention_ms is not None and now_ms - note.created_at >= retention_ms


def expired_error(note: Notification, retention_ms: int, now_ms: int) -> ObjectExpiredError:
    age_s = (now_ms - note.created_at) / 1000
    return ObjectExpiredError(
        f"object {note.key} expired: its notification is {age_s:,.0f} s old, past the "
        f"topic's retention.ms ({retention_ms})"
    )


def oldest_present(
    low: int,
    high: int,
    *,
    read: Callable[[int], Notification | None],
    exists: Callable[[Notification], bool],
    retention_ms: int | None,
    now_ms: int,
) -> int:
    """The first offset in ``[low, high)`` that is not an expired notification whose
    object is gone (``high`` when every one is).

    Retention deletes the oldest objects first, so the gone ones form a prefix: probe
    forward from ``low`` with doubling steps until an offset is not gone, then
    binary-search the boundary (a few dozen notification reads and HEAD-like ``exists``
    checks for a day of notifications). Only expired notifications count as gone: a
    missing object within retention stops the search (the consumer meets it, and its
    policy applies), as does a notification that does not decode.
    """
    if retention_ms is None or low >= high:
        return low

    def gone(offset: int) -> bool:
        try:
            note = read(offset)
        except MemqFormatError:
            return False
        return note is not None and is_expired(note, retention_ms, now_ms) and not exists(note)

    if not gone(low):
        return low
    last_gone, step = low, 1
    while True:
        probe = low + step
        if probe >= high:
            hi = high
            break
        if not gone(probe):
            hi = probe
            break
        last_gone, step = probe, step * 2
    lo = last_gone + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if gone(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo
