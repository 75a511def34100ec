"""What a consumer hands to the application: messages and their sortable, seekable ids."""

from __future__ import annotations

from typing import NamedTuple

from memq.errors import MemqError

__all__ = ["Message", "MessageId"]


class MessageId(NamedTuple):
    """Where a record is: notification partition and offset (the object), block, record.

    Ids sort in the order the consumer delivers records of one partition, and
    ``Consumer.seek(id)`` re-reads from that very record. ``str(id)`` is
    ``"partition:offset:block:record"``; :meth:`parse` reads it back.
    """

    partition: int
    offset: int
    block: int
    record: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}:{self.block}:{self.record}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        try:
            p, o, b, r = (int(x) for x in text.split(":"))
        except ValueError:
            raise MemqError(f"bad message id {text!r}: use partition:offset:block:record") from None
        if min(p, o, b, r) < 0:
            raise MemqError(f"bad message id {text!r}: parts must be >= 0")
        return cls(p, o, b, r)


class Message(NamedTuple):
    """One record, with where it came from (a NamedTuple: cheap to build per record)."""

    topic: str
    partition: int
    offset: int
    block: int
    record: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...] | None
    producer_id: int
    epoch: int
    sequence: int
    object_key: str

    @property
    def id(self) -> MessageId:
        return MessageId(self.partition, self.offset, self.block, self.record)
