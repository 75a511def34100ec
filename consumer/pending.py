"""An object in the prefetch queue: its notification and its (running or finished) fetch.

A leaf of the consumer: the queue (:mod:`memq.consumer.prefetch`) makes them, the object
being handed out (:class:`~memq.consumer.handout.Current`) carries one, and the consumer
commits and audits it when it is done.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from memq.consumer.fetcher import BlockAudit, FetchedObject, Start
from memq.errors import MemqFormatError
from memq.formats.notification import Notification

__all__ = ["Pending"]

TP = tuple[str, int]  # (notification topic, partition)


@dataclass(eq=False)
class Pending:
    """An object in the queue: its notification and its (running or finished) fetch.

    ``notification`` is None for a notification that did not decode (``error`` says why).
    """

    tp: TP
    offset: int
    notification: Notification | None
    start: Start | None
    future: Future[FetchedObject] | None
    #: Audit of its blocks handed out, and of the copies dedup dropped (set when taken).
    blocks: list[BlockAudit] = field(default_factory=list)
    copies: list[BlockAudit] = field(default_factory=list)
    error: MemqFormatError | None = None

    @property
    def size(self) -> int:
        return self.notification.size if self.notification is not None else 0
