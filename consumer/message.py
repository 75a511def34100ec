"""What a consumer hands to the application: messages and their sortable, seekable ids,
and the columnar forms records are kept in until (unless) a message is asked for."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from itertools import accumulate, chain, repeat
from typing import Any, NamedTuple, overload

from memq.errors import MemqError
from memq.formats.block import BinaryColumn
from memq.formats.columnar import int32_arrow, int64_arrow

__all__ = ["Chunk", "Message", "MessageId", "RecordBatch", "Records"]


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


class Chunk(NamedTuple):
    """Consecutive records of one decoded block, column by column (the columns are the
    decoder's tuples, or slices of them), with where they come from: the unit a
    consumer hands records out in."""

    topic: str
    partition: int
    offset: int
    object_key: str
    block: int
    record: int  # the first one's index in its block
    timestamps: Sequence[int]  # a tuple, or an array('q') (block version 2)
    keys: tuple[bytes | None, ...]
    values: Sequence[bytes]  # a tuple, or a BinaryColumn (block version 2: no copy yet)
    headers: tuple[tuple[tuple[str, bytes | None], ...] | None, ...]
    producer_id: int
    epoch: int
    sequence: int

    @property
    def length(self) -> int:
        """Its number of records."""
        return len(self.values)

    def part(self, a: int, b: int) -> Chunk:
        """Its records ``[a, b)`` (positions within this chunk)."""
        if a <= 0 and b >= len(self.values):
            return self
        return self._replace(
            record=self.record + a,
            timestamps=self.timestamps[a:b],
            keys=self.keys[a:b],
            values=self.values[a:b],
            headers=self.headers[a:b],
        )

    def messages(self) -> list[Message]:
        """One :class:`Message` per record (built here, in one C-level pass)."""
        n = len(self.values)
        rows = zip(
            repeat(self.topic, n),
            repeat(self.partition, n),
            repeat(self.offset, n),
            repeat(self.block, n),
            range(self.record, self.record + n),
            self.timestamps,
            self.keys,
            self.values,
            self.headers,
            repeat(self.producer_id, n),
            repeat(self.epoch, n),
            repeat(self.sequence, n),
            repeat(self.object_key, n),
            strict=False,  # (columns of one length: checking costs)
        )
        messages: list[Message] = list(map(tuple.__new__, repeat(Message), rows))
        return messages


class Records(Sequence[Message]):
    """An object's records to hand out, kept as decoded columns (:class:`Chunk`): a
    :class:`Message` is built only for a record asked for (lazily, by index or slice)."""

    __slots__ = ("_ends", "chunks")

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self.chunks = [c for c in chunks if c.values]
        self._ends = list(accumulate(len(c.values) for c in self.chunks))

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Records:
        """Records of ready-made messages (a chunk each: for tests and fakes)."""
        return cls(
            Chunk(
                m.topic, m.partition, m.offset, m.object_key, m.block, m.record,
                (m.timestamp,), (m.key,), (m.value,), (m.headers,), m.producer_id,
                m.epoch, m.sequence,
            )
            for m in messages
        )  # fmt: skip

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            return list(chain.from_iterable(c.messages() for c in self.between(a, b)))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("record index out of range")
        k = bisect_right(self._ends, i)
        c = self.chunks[k]
        j = i - (self._ends[k] - len(c.values))
        return tuple.__new__(
            Message,
            (
                c.topic, c.partition, c.offset, c.block, c.record + j, c.timestamps[j],
                c.keys[j], c.values[j], c.headers[j], c.producer_id, c.epoch, c.sequence,
                c.object_key,
            ),
        )  # fmt: skip

    def __iter__(self) -> Iterator[Message]:
        for c in self.chunks:
            yield from c.messages()

    def record_runs(self, a: int, b: int) -> list[tuple[int, int, int]]:
        """Records ``[a, b)`` as (index, first record number, count) runs of consecutive
        record numbers (one per chunk they touch); nothing is sliced or built."""
        out: list[tuple[int, int, int]] = []
        k = bisect_right(self._ends, a)
        while k < len(self.chunks) and a < b:
            c = self.chunks[k]
            start = self._ends[k] - len(c.values)
            end = min(b, self._ends[k])
            out.append((a, c.record + a - start, end - a))
            a = end
            k += 1
        return out

    def between(self, a: int, b: int) -> list[Chunk]:
        """The chunks of records ``[a, b)`` (cut where they straddle the bounds)."""
        out: list[Chunk] = []
        if a >= b:
            return out
        k = bisect_right(self._ends, a)
        while k < len(self.chunks) and a < b:
            c = self.chunks[k]
            first = self._ends[k] - c.length
            out.append(c.part(a - first, min(b, self._ends[k]) - first))
            a = self._ends[k]
            k += 1
        return out

    def select(self, runs: Iterable[tuple[int, int]]) -> Records:
        """The records of index runs ``[a, b)``, in order."""
        return Records(chain.from_iterable(self.between(a, b) for a, b in runs))


class RecordBatch:
    """Records handed out by ``Consumer.consume_batch``, column by column.

    Nothing is built per record: :attr:`values` (and the other columns) are lists of the
    decoded objects themselves, made on first access. :meth:`messages` (or iterating)
    builds :class:`Message` objects for callers that want them after all;
    :attr:`chunks` says which records came from which object and block.
    """

    __slots__ = ("_cols", "chunks")

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self._cols: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return sum(len(c.values) for c in self.chunks)

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def __iter__(self) -> Iterator[Message]:
        for c in self.chunks:
            yield from c.messages()

    def _column(self, name: str) -> list[Any]:
        col = self._cols.get(name)
        if col is None:
            col = list(chain.from_iterable(getattr(c, name) for c in self.chunks))
            self._cols[name] = col
        return col

    @property
    def values(self) -> list[bytes]:
        """Every record's value, in order."""
        return self._column("values")

    @property
    def keys(self) -> list[bytes | None]:
        return self._column("keys")

    @property
    def timestamps(self) -> list[int]:
        """Record timestamps (ms since the Unix epoch)."""
        return self._column("timestamps")

    @property
    def headers(self) -> list[tuple[tuple[str, bytes | None], ...] | None]:
        return self._column("headers")

    def value_bytes(self) -> int:
        """Total bytes of the values."""
        return sum(
            c.values.nbytes() if type(c.values) is BinaryColumn else sum(map(len, c.values))
            for c in self.chunks
        )

    def to_arrow(self) -> Any:
        """The records as a ``pyarrow.Table`` (needs ``pyarrow``: the ``arrow`` extra):
        ``partition`` (int32), ``offset`` (int64: the object's notification offset),
        ``timestamp`` (ms, UTC), ``key``, ``value`` (binary), ``headers`` (a list of
        ``name``/``value`` structs, or null). Values of version 2 blocks are not copied:
        the table's value arrays share the fetched objects' bytes (which stay in memory
        as long as the table does)."""
        try:
            import pyarrow as pa
        except ImportError:
            raise ImportError(
                "RecordBatch.to_arrow() needs pyarrow: pip install 'memq-py[arrow]'"
            ) from None
        return _table(pa, self.chunks)

    def messages(self) -> list[Message]:
        """One :class:`Message` per record (what ``consume`` would have returned)."""
        return list(chain.from_iterable(c.messages() for c in self.chunks))

    def ids(self) -> list[MessageId]:
        """Each record's :class:`MessageId`."""
        return [
            MessageId(c.partition, c.offset, c.block, r)
            for c in self.chunks
            for r in range(c.record, c.record + c.length)
        ]


@cache
def _arrow_schema(pa: Any) -> Any:
    header = pa.struct([("name", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("ms", tz="UTC")),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
        ]
    )


def _table(pa: Any, chunks: Sequence[Chunk]) -> Any:
    """The chunks' records as one table, each column built once for all of them (Arrow
    calls per chunk cost more than a batch's records do): the per-chunk constants and the
    timestamps as one buffer each, keys and headers as one array (or all null), the values
    one array per chunk over the fetched bytes where the block allows."""
    schema = _arrow_schema(pa)
    n = sum(c.length for c in chunks)
    parts, offsets, stamps = array("i"), array("q"), array("q")
    for c in chunks:
        parts.extend(array("i", (c.partition,)) * c.length)
        offsets.extend(array("q", (c.offset,)) * c.length)
        ts = c.timestamps
        stamps.extend(ts if type(ts) is array else array("q", ts))
    values = [
        c.values.to_arrow() if type(c.values) is BinaryColumn else pa.array(c.values, pa.binary())
        for c in chunks
    ]
    return pa.Table.from_arrays(
        [
            int32_arrow(parts),
            int64_arrow(offsets),
            int64_arrow(stamps).view(schema.field("timestamp").type),
            _nullable(pa, [c.keys for c in chunks], n, pa.binary(), lambda k: k),
            pa.chunked_array(values, pa.binary()),
            _nullable(
                pa,
                [c.headers for c in chunks],
                n,
                schema.field("headers").type,
                lambda h: [{"name": k, "value": v} for k, v in h],
            ),
        ],
        schema=schema,
    )


def _nullable(pa: Any, columns: list[tuple[Any, ...]], n: int, kind: Any, conv: Any) -> Any:
    """The columns joined as one Arrow array: all null, without a look at each record,
    when no record has a value (the usual case), else each record's ``conv(item)``."""
    if all(col.count(None) == len(col) for col in columns):
        return pa.nulls(n, kind)
    return pa.array([None if x is None else conv(x) for x in chain.from_iterable(columns)], kind)
