"""A consumer's progress in its group: per-partition done offsets and the commits of them.

Progress is, per notification partition, the offset after the last object fully handed
to the application (or skipped), or where a seek restarted it. Only that is ever
committed, so a crash re-delivers the objects in progress and never loses one. A commit
is sent for a partition only when it differs from the last one sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["GroupOffsets", "GroupSource"]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)


class GroupSource(Protocol):
    """What the bookkeeping needs of the group member (a ``NotificationSource``)."""

    def commit(self, offsets: dict[TP, int], *, asynchronous: bool) -> None: ...

    def committed(self, parts: list[TP], timeout: float) -> dict[TP, int | None]: ...

    def assignment(self) -> list[TP]: ...


class GroupOffsets:
    """Done offsets per partition, commits (explicit and automatic), and forgetting on revoke.

    ``source`` is attached once the consumer has subscribed; before that nothing is sent.
    """

    def __init__(
        self,
        *,
        auto_commit: bool,
        auto_commit_interval: float,
        on_commit_error: Callable[[Exception], None] = lambda e: None,
    ) -> None:
        self.source: GroupSource | None = None
        self._auto_commit = auto_commit
        self._interval = auto_commit_interval
        self._on_commit_error = on_commit_error
        self._done: dict[TP, int] = {}  # next offset to commit, per partition
        self._sent: dict[TP, int] = {}  # last offset sent in a commit, per partition
        self._last_commit = time.monotonic()

    def object_done(self, tp: TP, offset: int) -> None:
        """The object at ``offset`` was fully handed out (or skipped): commit past it."""
        self._done[tp] = offset + 1

    def restart(self, tp: TP, offset: int) -> None:
        """``tp`` continues from ``offset`` (a seek or a reset on assignment)."""
        self._done[tp] = offset

    def _send(self, offsets: dict[TP, int], *, asynchronous: bool) -> dict[TP, int]:
        todo = {tp: o for tp, o in offsets.items() if self._sent.get(tp) != o}
        if todo and self.source is not None:
            self.source.commit(todo, asynchronous=asynchronous)
            self._sent.update(todo)
        return todo

    def commit(self, *, asynchronous: bool) -> dict[TP, int]:
        """Commit every partition's done offset; what was sent (unchanged ones are not)."""
        done = self._send(dict(self._done), asynchronous=asynchronous)
        self._last_commit = time.monotonic()
        return done

    def maybe_auto_commit(self) -> None:
        """With auto-commit, commit (asynchronously) once the interval has passed.

        Never raises: it runs after records were taken for the application, which must
        get them; a failed commit is reported to ``on_commit_error`` and tried again
        at the next interval.
        """
        if self._auto_commit and time.monotonic() - self._last_commit >= self._interval:
            self._last_commit = time.monotonic()
            try:
                self._send(dict(self._done), asynchronous=True)
            except Exception as e:
                log.warning("auto-commit failed (retried next interval): %s", e)
                self._on_commit_error(e)

    def commit_revoked(self, parts: set[TP]) -> None:
        """With auto-commit, commit the progress of ``parts`` (being revoked; may raise)."""
        if self._auto_commit:
            self._send({tp: o for tp, o in self._done.items() if tp in parts}, asynchronous=False)

    def forget(self, parts: set[TP]) -> dict[TP, int]:
        """``parts`` left this member: forget their progress; returns it (done offsets)."""
        for tp in parts:
            self._sent.pop(tp, None)
        return {tp: self._done.pop(tp) for tp in parts if tp in self._done}

    def close(self) -> None:
        """Final synchronous commit of everything done (auto-commit, once subscribed)."""
        if self._auto_commit and self.source is not None:
            self._send(dict(self._done), asynchronous=False)

    def assignment(self) -> list[TP]:
        assert self.source is not None
        return self.source.assignment()

    def committed(self, timeout: float) -> dict[TP, int | None]:
        """The group's committed offsets for the assigned partitions."""
        assert self.source is not None
        return self.source.committed(self.source.assignment(), timeout)

    def position(self, current: tuple[TP, int] | None) -> dict[TP, int | None]:
        """Per assigned partition, the offset of the next object to finish.

        ``current``: (partition, offset) of the object being handed out, if any.
        """
        assert self.source is not None
        out: dict[TP, int | None] = {}
        for tp in self.source.assignment():
            out[tp] = current[1] if current is not None and current[0] == tp else self._done.get(tp)
        return out
