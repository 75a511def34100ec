"""A block's msgpack record payload joined from columns, without msgpack (pure, no I/O).

The producer's records without headers (the common case) are not packed by msgpack,
which would need a tuple per record: the payload is joined once, in C-level loops,
from the values (and keys) and a few distinct byte strings (each record's array
header, timestamp, nil key and bin header), cached per distinct timestamp and length.
The bytes are msgpack's own shortest forms, so the payload equals ``msgpack.packb``'s
of the same records (bin 8/16/32 by length, array fix/16/32 by count, ints as
msgpack encodes them): ``tests/unit/test_block.py`` checks this byte for byte.

Records usually share their timestamp in runs (a ``produce_batch()`` call's, the
records of one millisecond): a run's leads are then looked up by length alone, and a
block of one timestamp and one value length is its values joined with their common
lead as the separator, one C-level pass and nothing per record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, groupby, islice

import msgpack

__all__ = ["join_records"]

_KEY_TYPES = frozenset({bytes, type(None)})


def join_records(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes],
    *,
    checked: bool,
) -> tuple[bytes, int, int] | None:
    """``(payload, least timestamp, greatest timestamp)`` of headerless records given
    column by column (equal lengths, values ``bytes``, timestamps ``int``), or None if
    they cannot be joined (a key neither ``bytes`` nor None, unless ``checked``; a
    timestamp msgpack cannot hold): msgpack then packs them, or says what is wrong."""
    leads = _Leads()
    try:
        if keys.count(None) == len(values):
            raw = _join_unkeyed(leads, timestamps, values)
        elif checked or set(map(type, keys)) <= _KEY_TYPES:
            raw = _join_keyed(leads, timestamps, keys, values)
        else:
            return None
    except OverflowError:
        return None
    least, greatest = leads.bounds()  # (from the few distinct timestamps)
    return raw, least, greatest


def _bin_header(n: int) -> bytes:
    if n < 0x100:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


_NIL = b"\xc0"


def _stamped(ts: int) -> bytes:
    """The previous record's nil headers, a record's array header (4 items) and its
    timestamp: how every record's lead starts."""
    stamp: bytes = msgpack.packb(ts)
    return b"\xc0\x94" + stamp


class _Leads(dict[tuple[int, int], bytes]):
    """``(timestamp, length)`` -> the bytes that lead up to a record's value: the
    previous record's nil headers, this record's array header and timestamp, then its
    nil key and the value's bin header (``length`` >= 0) or, for a keyed record
    (``length`` < 0: ``-2 - key length``, or -1 for a nil key), what leads up to the key.
    ``stamps``: the timestamps of leads made elsewhere (:class:`_LeadsAt`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[int] = []

    def __missing__(self, k: tuple[int, int]) -> bytes:
        ts, n = k
        lead = _stamped(ts) + (
            _NIL + _bin_header(n) if n >= 0 else _NIL if n == -1 else _bin_header(-2 - n)
        )
        self[k] = lead
        return lead

    def bounds(self) -> tuple[int, int]:
        """The least and the greatest timestamp of the records."""
        stamps = {ts for ts, _ in self}
        stamps.update(self.stamps)
        return min(stamps), max(stamps)


class _LeadsAt(dict[int, bytes]):
    """Value length -> the lead of an unkeyed record of one timestamp."""

    __slots__ = ("head",)

    def __init__(self, leads: _Leads, ts: int) -> None:
        super().__init__()
        leads.stamps.append(ts)
        self.head: bytes = _stamped(ts) + _NIL

    def __missing__(self, n: int) -> bytes:
        lead = self.head + _bin_header(n)
        self[n] = lead
        return lead


def _join_unkeyed(leads: _Leads, timestamps: Sequence[int], values: Sequence[bytes]) -> bytes:
    """Records share their timestamp in runs (a ``produce_batch()`` call's, the
    records of one millisecond): a run's leads come from its lengths alone, without a
    ``(timestamp, length)`` tuple per record, and a block of one timestamp and one value
    length is its values joined with their common lead as the separator."""
    n = len(values)
    first = timestamps[0]
    if timestamps.count(first) == n:
        runs = [(first, n)]
    else:
        few = n >> 3  # (more runs: timestamps that change every few records)
        runs = [(ts, len(list(run))) for ts, run in islice(groupby(timestamps), few + 1)]
        if len(runs) > few:
            # (columns of one length, checked by the caller: strict would cost per item)
            lead_of = map(leads.__getitem__, zip(timestamps, map(len, values), strict=False))
            return _array(chain.from_iterable(zip(lead_of, values, strict=False)), n)
    size = len(values[0])
    if len(runs) == 1 and len(values[-1]) == size and list(map(len, values)).count(size) == n:
        lead = leads[first, size]
        parts = list(values)
        parts[-1] += _NIL  # (closes the last record: its nil headers)
        parts[0] = b"".join((_array_header(n), memoryview(lead)[1:], parts[0]))
        return lead.join(parts)
    lead_list: list[bytes] = []
    pos = 0
    for ts, k in runs:
        lead_list += map(_LeadsAt(leads, ts).__getitem__, map(len, values[pos : pos + k]))
        pos += k
    pieces: list[bytes | memoryview] = [_NIL] * (2 * n + 2)
    pieces[0] = _array_header(n)
    pieces[1 : 2 * n : 2] = lead_list
    pieces[2 : 2 * n + 1 : 2] = values
    pieces[1] = memoryview(lead_list[0])[1:]  # (no record before the first to close)
    return b"".join(pieces)


def _join_keyed(
    leads: _Leads, timestamps: Sequence[int], keys: Sequence[bytes | None], values: Sequence[bytes]
) -> bytes:
    marks = [-1 if k is None else -2 - len(k) for k in keys]
    vheads = _BinHeaders().__getitem__
    pieces = chain.from_iterable(
        zip(
            map(leads.__getitem__, zip(timestamps, marks, strict=False)),
            [b"" if k is None else k for k in keys],
            map(vheads, map(len, values)),
            values,
            strict=False,
        )
    )
    return _array(pieces, len(values))


def _array(pieces: Iterator[bytes], count: int) -> bytes:
    """The msgpack array of ``count`` records from their pieces, joined once: the first
    lead's nil (it closes the record before, and there is none) gives way to the array
    header, and a nil closes the last record (its headers)."""
    first = next(pieces)
    return b"".join(chain((_array_header(count), memoryview(first)[1:]), pieces, (_NIL,)))


class _BinHeaders(dict[int, bytes]):
    """length -> its msgpack bin header."""

    def __missing__(self, n: int) -> bytes:
        self[n] = h = _bin_header(n)
        return h
