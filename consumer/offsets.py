"""Committed offsets: per notification partition, the offset after the last object fully
handed to the application (or skipped), or where a seek restarted it, and, for an object
the application is in the middle of, that object's offset with the position of its next
record (``block:record``) in the Kafka commit metadata. Only that is ever committed, so a
crash re-delivers at most the records not handed out yet and never loses one. A commit
is sent for a partition only when it differs from the last one sent.

A Kafka that drops commit metadata (some Kafka-protocol brokers do) keeps only the object
offset: a restart then reads that object again, whole. :attr:`GroupOffsets.metadata_kept`
says which kind of Kafka this is, once a commit inside an object was read back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

from memq.consumer.fetcher import Start

__all__ = [
    "METADATA_DROPPED",
    "GroupOffsets",
    "GroupSource",
    "OffsetAndMetadata",
    "decode_position",
    "encode_position",
]

log = logging.getLogger(__name__)

TP = tuple[str, int]  # (notification topic, partition)
#: Commit metadata of a position inside an object: ``memq:<block>:<record>``.
POSITION_PREFIX = "memq:"
#: Logged (WARNING, once per consumer) when the notification Kafka drops commit metadata:
#: a constant, so a program that tells its user itself (``memq consume``) can filter it.
METADATA_DROPPED = (
    "the notification Kafka drops commit metadata: a commit inside an object "
    "keeps only its offset, so a restart reads that object again, whole"
)


class OffsetAndMetadata(NamedTuple):
    """A committed notification offset and its Kafka commit metadata ("" for none)."""

    offset: int
    metadata: str = ""


def encode_position(block: int, record: int) -> str:
    """The commit metadata of "the next record is ``record`` of ``block``" (pure)."""
    return f"{POSITION_PREFIX}{block}:{record}"


def decode_position(metadata: str | None) -> Start | None:
    """Where to start inside the committed object, from its commit metadata; None for no
    metadata, (0, 0), or metadata written by something else (read the object whole)."""
    if not metadata or not metadata.startswith(POSITION_PREFIX):
        return None
    try:
        block, record = (int(x) for x in metadata[len(POSITION_PREFIX) :].split(":"))
    except ValueError:
        return None
    if block < 0 or record < 0 or (block, record) == (0, 0):
        return None
    return Start(block, record)


class GroupSource(Protocol):
    """What the bookkeeping needs of the group member (a ``NotificationSource``)."""

    def commit(self, offsets: dict[TP, OffsetAndMetadata], *, asynchronous: bool) -> None: ...

    def committed(self, parts: list[TP], timeout: float) -> dict[TP, OffsetAndMetadata | None]: ...

    def assignment(self) -> list[TP]: ...


#: Per partition with an object in progress: (its offset, block, record of the next record).
Partial = Callable[[], dict[TP, tuple[int, int, int]]]


class GroupOffsets:
    """Done offsets per partition, commits (explicit and automatic), and forgetting on revoke.

    ``source`` is attached once the consumer has subscribed or assigned; before that
    nothing is sent. ``partial()`` reports the objects in progress (record positions).
    """

    def __init__(
        self,
        *,
        auto_commit: bool,
        auto_commit_interval: float,
        on_commit_error: Callable[[Exception], None] = lambda e: None,
        partial: Partial = dict,
        timeout: float = 10.0,
    ) -> None:
        self.source: GroupSource | None = None
        self._auto_commit = auto_commit
        self._interval = auto_commit_interval
        self._on_commit_error = on_commit_error
        self._partial = partial
        self._timeout = timeout  # reading commits back
        self._done: dict[TP, int] = {}  # next offset to commit, per partition
        #: Per partition whose next object starts inside (a commit, a seek there): that
        #: position, committed until the object is handed out further.
        self._inside: dict[TP, str] = {}
        self._sent: dict[TP, OffsetAndMetadata] = {}  # last commit sent, per partition
        self._last_commit = time.monotonic()
        #: Whether the Kafka keeps commit metadata (record-precise commits); None: not
        #: known yet (no synchronous commit inside an object was read back).
        self.metadata_kept: bool | None = None

    def object_done(self, tp: TP, offset: int) -> None:
        """The object at ``offset`` was fully handed out (or skipped): commit past it."""
        self._done[tp] = offset + 1
        self._inside.pop(tp, None)

    def restart(self, tp: TP, offset: int, start: Start | None = None) -> None:
        """``tp`` continues from ``offset`` (a seek or a reset on assignment), inside that
        object at ``start``'s record position if it has one: a commit before anything of
        it is handed out (a revocation right after the assignment) keeps that position
        instead of taking the group back to the object's first record."""
        self._done[tp] = offset
        if start is not None and (start.block, start.record) != (0, 0):
            self._inside[tp] = encode_position(start.block, start.record)
        else:
            self._inside.pop(tp, None)

    def marks(self, parts: set[TP] | None = None) -> dict[TP, OffsetAndMetadata]:
        """What a commit now would send for ``parts`` (None: every partition with progress)."""
        out = {
            tp: OffsetAndMetadata(o, self._inside.get(tp, ""))
            for tp, o in self._done.items()
            if parts is None or tp in parts
        }
        for tp, (offset, block, record) in self._partial().items():
            if parts is None or tp in parts:
                meta = encode_position(block, record) if (block, record) != (0, 0) else ""
                out[tp] = OffsetAndMetadata(offset, meta)
        return out

    def _send(
        self, marks: dict[TP, OffsetAndMetadata], *, asynchronous: bool
    ) -> dict[TP, OffsetAndMetadata]:
        todo = {tp: m for tp, m in marks.items() if self._sent.get(tp) != m}
        if todo and self.source is not None:
            self.source.commit(todo, asynchronous=asynchronous)
            self._sent.update(todo)
        return todo

    def commit(self, *, asynchronous: bool) -> dict[TP, int]:
        """Commit every partition's progress; returns the offset committed per partition
        (also the unchanged ones, which are not sent again)."""
        marks = self.marks()
        self._send(marks, asynchronous=asynchronous)
        self._last_commit = time.monotonic()
        if not asynchronous and self.metadata_kept is None:
            self._check_metadata_kept(marks)
        return {tp: m.offset for tp, m in marks.items()}

    def _check_metadata_kept(self, marks: dict[TP, OffsetAndMetadata]) -> None:
        """Read a commit inside an object back once: does this Kafka keep the metadata?"""
        inside = {tp: m for tp, m in marks.items() if m.metadata and self._sent.get(tp) == m}
        if not inside or self.source is None:
            return
        try:
            back = self.source.committed(list(inside), self._timeout)
        except Exception as e:  # unknown still: asked again at the next commit
            log.info("reading commits back failed: %s", e)
            return
        self.metadata_kept = all(
            (b := back.get(tp)) is not None and b.metadata == m.metadata for tp, m in inside.items()
        )
        if not self.metadata_kept:
            log.warning(METADATA_DROPPED)

    def maybe_auto_commit(self) -> None:
        """With auto-commit, commit (asynchronously) once the interval has passed.

        Never raises: it runs after records were taken for the application, which must
        get them; a failed commit is reported to ``on_commit_error`` and tried again
        at the next interval.
        """
        if self._auto_commit and time.monotonic() - self._last_commit >= self._interval:
            self._last_commit = time.monotonic()
            try:
                self._send(self.marks(), asynchronous=True)
            except Exception as e:
                log.warning("auto-commit failed (retried next interval): %s", e)
                self._on_commit_error(e)

    def commit_revoked(self, parts: set[TP]) -> None:
        """With auto-commit, commit the progress of ``parts`` (being revoked; may raise)."""
        if self._auto_commit:
            self._send(self.marks(parts), asynchronous=False)

    def forget(self, parts: set[TP]) -> dict[TP, OffsetAndMetadata]:
        """``parts`` left this member: forget their progress; returns it (what a commit
        would have sent: call before the objects in progress are dropped)."""
        marks = self.marks(parts)
        for tp in parts:
            self._sent.pop(tp, None)
            self._done.pop(tp, None)
            self._inside.pop(tp, None)
        return marks

    def close(self) -> None:
        """Final synchronous commit of everything done (auto-commit, once subscribed)."""
        if self._auto_commit and self.source is not None:
            self._send(self.marks(), asynchronous=False)

    def assignment(self) -> list[TP]:
        return self.source.assignment() if self.source is not None else []

    def committed(self, timeout: float) -> dict[TP, OffsetAndMetadata | None]:
        """The group's committed offsets for the assigned partitions."""
        parts = self.assignment()
        return self.source.committed(parts, timeout) if self.source is not None and parts else {}

    def position(self, current: dict[TP, int]) -> dict[TP, int | None]:
        """Per assigned partition, the offset of the next object to finish.

        ``current``: per partition, the offset of the object being handed out (if any).
        """
        return {tp: current.get(tp, self._done.get(tp)) for tp in self.assignment()}

    def known_positions(self, current: dict[TP, int]) -> dict[TP, int]:
        """Like :meth:`position`, without asking the member (safe from another thread):
        the partitions with progress only."""
        return {**dict(self._done), **current}
