"""Block version 2: the record payload as columns (pure, no I/O).

Version 1 packs a block's records as one msgpack array of ``[timestamp, key, value,
headers]``; a reader then builds a tuple, an int and a ``bytes`` per record, copying
every value out of the payload. Version 2 lays the same records out as columns, the
values joined end to end behind an offsets column (Apache Arrow's binary layout, little
endian like Arrow), so a reader can hand the values on without a copy each: as a
:class:`BinaryColumn` (a sequence that slices a value out only when asked) or as an
Arrow array over the payload's own bytes. See docs/formats.md, section 2.

Payload layout (``n`` = the block's ``record_count``; offsets are int32 little endian,
``0`` first, non-decreasing)::

    0        1    columns     bit 0: keys present, bit 1: headers present; others 0
    1        7    reserved    0
    8        8n   timestamps  int64 little endian, ms since the Unix epoch
    .        4n+4 value offsets, then the values joined (offsets[n] bytes)
    if keys: ceil(n/8) validity bitmap (bit i of byte i//8, least significant first:
             1 = key present), 4n+4 key offsets, the keys joined (an absent key: length 0)
    if headers: one msgpack array of n entries, each nil or an array of
             [name (str), value (bin or nil)] pairs
    the payload ends exactly there
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate, islice
from operator import eq, le, sub
from typing import Any, overload

import msgpack

from memq.errors import MalformedError

__all__ = ["BinaryColumn", "header_pairs_ok", "int64_arrow", "join_columns", "split_columns"]

KEYS = 0x01
HEADERS = 0x02
_PREFIX = 8
_OFFSET_MAX = (1 << 31) - 1
_SWAP = sys.byteorder == "big"
_I64 = struct.Struct("<q")  # (the columns are little endian, as Arrow's are)


def _le(a: array[int]) -> bytes:
    if _SWAP:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(typecode: str, buf: Any) -> array[int]:
    a = array(typecode)
    a.frombytes(buf)
    if _SWAP:
        a.byteswap()
    return a


def _offsets(lengths: Iterator[int], what: str) -> array[int]:
    try:
        return array("i", list(accumulate(lengths, initial=0)))
    except OverflowError:
        raise MalformedError(f"a block's {what} add up to 2 GiB or more: send fewer") from None


def join_columns(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes],
    headers: Sequence[Any],
) -> tuple[bytes, int, int]:
    """``(payload, least timestamp, greatest timestamp)`` of records given column by
    column (equal lengths, checked by the caller; values ``bytes``, keys ``bytes`` or
    None, timestamps ``int``): one C-level join of the values, nothing per record
    unless keys or headers are present."""
    n = len(values)
    first = timestamps[0]
    try:
        if timestamps.count(first) == n:  # (one timestamp: a produce_batch() call's)
            least = greatest = first
            ts_column = _I64.pack(first) * n
        else:
            least, greatest = min(timestamps), max(timestamps)
            ts_column = _le(array("q", timestamps))
    except (OverflowError, struct.error):
        raise MalformedError("a record timestamp is outside the signed 64-bit range") from None
    flags = 0
    tail: list[bytes] = []
    if keys.count(None) != n:
        flags |= KEYS
        # (the bitmap as one int parsed from a string of bits, last record first: linear)
        bits = int("".join(["0" if k is None else "1" for k in reversed(keys)]), 2)
        joined_keys = [b"" if k is None else k for k in keys]
        tail += [
            bits.to_bytes((n + 7) // 8, "little"),
            _le(_offsets(map(len, joined_keys), "keys")),
            *joined_keys,
        ]
    if headers.count(None) != n:
        flags |= HEADERS
        try:
            tail.append(msgpack.packb(list(headers), use_bin_type=True))
        except (TypeError, ValueError, OverflowError) as e:
            raise MalformedError(f"record headers cannot be encoded: {e}") from None
    lead = bytes((flags,)) + bytes(_PREFIX - 1) + ts_column
    lead += _le(_offsets(map(len, values), "values"))
    return b"".join([lead, *values, *tail]), least, greatest


class BinaryColumn(Sequence[bytes]):
    """Values joined end to end behind int32 offsets (Arrow's binary layout): a sequence
    of ``bytes`` that copies a value out only when it is asked for. Slices share the
    buffer; :meth:`to_arrow` is an Arrow array over it without a copy."""

    __slots__ = ("_data", "_made", "_offsets", "_start", "_stop")

    def __init__(
        self,
        data: Any,
        offsets: array[int],
        start: int = 0,
        stop: int | None = None,
        made: list[tuple[bytes, ...] | None] | None = None,
    ) -> None:
        self._data = data  # a memoryview (or bytes): the offsets index into it
        self._offsets = offsets  # n + 1 entries
        self._start = start
        self._stop = len(offsets) - 1 if stop is None else stop
        #: Every value of the buffer as ``bytes`` once made, shared by the slices.
        self._made: list[tuple[bytes, ...] | None] = [None] if made is None else made

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> BinaryColumn: ...
    def __getitem__(self, i: int | slice) -> bytes | BinaryColumn:
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step != 1:
                return tuple(self)[i]  # type: ignore[return-value]
            return BinaryColumn(
                self._data, self._offsets, self._start + a, self._start + max(a, b), self._made
            )
        n = len(self)
        if not -n <= i < n:
            raise IndexError("BinaryColumn index out of range")
        j = self._start + (i % n)
        return bytes(self._data[self._offsets[j] : self._offsets[j + 1]])

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.materialize())

    def materialize(self) -> tuple[bytes, ...]:
        """The values as a tuple of ``bytes``. All the buffer's values are made at once,
        the first time any slice of it asks, and shared by its slices (a consumer hands
        a block out in parts): in C by one ``struct`` unpack whose format, ``"<len>s"``
        per value, is joined from cached pieces (about msgpack's speed, a third of
        slicing them one by one in Python)."""
        made = self._made[0]
        if made is None:
            ends = self._offsets.tolist()
            fmt = "".join(map(_FORMATS.__getitem__, map(sub, ends[1:], ends[:-1])))
            # (a Struct of its own: struct's module cache would keep the last 100
            # blocks' formats, ~35 bytes per value, after the blocks are gone)
            made = self._made[0] = struct.Struct(fmt).unpack_from(self._data, ends[0])
        if self._start == 0 and self._stop == len(made):
            return made
        return made[self._start : self._stop]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BinaryColumn | tuple | list):
            return len(self) == len(other) and all(map(eq, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BinaryColumn({len(self)} values, {self.nbytes()} bytes)"

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (self.materialize(),)  # (pickled as the tuple of its values)

    def nbytes(self) -> int:
        """The values' total length."""
        return self._offsets[self._stop] - self._offsets[self._start]

    def to_arrow(self) -> Any:
        """An Arrow ``binary`` array of these values over the same buffer (no copy)."""
        import pyarrow as pa  # (optional: the ``arrow`` extra)

        offs = pa.py_buffer(_le(self._offsets) if _SWAP else self._offsets)
        return pa.Array.from_buffers(
            pa.binary(), len(self), [None, offs, pa.py_buffer(self._data)], 0, self._start
        )


def int64_arrow(ints: Sequence[int]) -> Any:
    """An Arrow int64 array of ``ints``: an ``array('q')`` (a version 2 block's timestamps)
    without a copy where the machine is little endian, as Arrow is."""
    return _int_arrow(ints, "q", "int64")


def int32_arrow(ints: Sequence[int]) -> Any:
    """An Arrow int32 array of ``ints``: an ``array('i')`` without a copy (little endian)."""
    return _int_arrow(ints, "i", "int32")


def _int_arrow(ints: Sequence[int], code: str, kind: str) -> Any:
    import pyarrow as pa  # (optional: the ``arrow`` extra)

    if type(ints) is array and ints.typecode == code and not _SWAP:
        return pa.Array.from_buffers(getattr(pa, kind)(), len(ints), [None, pa.py_buffer(ints)])
    return pa.array(ints, getattr(pa, kind)())


class _Formats(dict[int, str]):
    """length -> its ``struct`` format (``"<length>s"``); the first 4,096 lengths seen
    are kept."""

    def __missing__(self, n: int) -> str:
        f = f"{n}s"
        if len(self) < 4096:
            self[n] = f
        return f


_FORMATS = _Formats()


#: Offsets lists up to this long are checked with ``sorted()`` (one pass of C comparisons
#: over a sorted list: the cheapest check, 13 us per 1,000); longer ones pair by pair
#: (linear: 4x that per item, but a hostile, shuffled list costs ``sorted()`` n log n:
#: 1.4 s for 2 million offsets, measured).
SORT_CHECK_MAX = 1 << 16


def _checked_offsets(raw: memoryview, pos: int, n: int, end: int, what: str) -> array[int]:
    offs = _from_le("i", raw[pos : pos + 4 * (n + 1)])
    ascending = offs.tolist()
    if n <= SORT_CHECK_MAX:
        in_order = ascending == sorted(ascending)
    else:
        in_order = all(map(le, ascending, islice(ascending, 1, None)))
    if offs[0] != 0 or not in_order or pos + 4 * (n + 1) + offs[n] > end:
        raise MalformedError(f"block {what} offsets are not a run from 0 within the payload")
    return offs


def split_columns(
    raw: bytes | memoryview, n: int, min_timestamp: int, max_timestamp: int
) -> tuple[array[int], tuple[bytes | None, ...], BinaryColumn, tuple[Any, ...]]:
    """A version 2 payload's columns, every length and offset checked: the timestamps
    the keys, the values (a :class:`BinaryColumn` over ``raw``) and
    the headers. Raises :class:`MalformedError` for any payload that is not one."""
    if n < 1:
        raise MalformedError(f"a block holds at least one record, not {n}")
    view = memoryview(raw)
    end = len(view)
    pos = _PREFIX + 8 * n
    if end < pos + 4 * (n + 1):
        raise MalformedError(f"block payload of {end} bytes is too short for {n} records")
    flags = view[0]
    if flags & ~(KEYS | HEADERS) or any(view[1:_PREFIX]):
        raise MalformedError(f"block columns byte {flags:#04x} or its reserved bytes are not 0")
    column = view[_PREFIX:pos]
    ts = _from_le("q", column)
    if min_timestamp == max_timestamp:  # (one timestamp: compared as bytes)
        inside = column == _I64.pack(min_timestamp) * n
    else:
        stamps = ts.tolist()  # (min and max of a list: no int object made per item twice)
        inside = min(stamps) >= min_timestamp and max(stamps) <= max_timestamp
    if not inside:
        raise MalformedError(
            f"a record timestamp is outside the block's [{min_timestamp}, {max_timestamp}]"
        )
    voffs = _checked_offsets(view, pos, n, end, "value")
    pos += 4 * (n + 1)
    values = BinaryColumn(view[pos : pos + voffs[n]], voffs)  # (a view: no copy)
    pos += voffs[n]
    keys: tuple[bytes | None, ...] = (None,) * n
    if flags & KEYS:
        keys, pos = _split_keys(view, pos, n, end)
    hdrs: tuple[Any, ...] = (None,) * n
    if flags & HEADERS:
        hdrs = _split_headers(view[pos:], n)
        pos = end
    if pos != end:
        raise MalformedError(f"{end - pos} unexpected bytes after a block's columns")
    return ts, keys, values, hdrs


def _split_keys(
    view: memoryview, pos: int, n: int, end: int
) -> tuple[tuple[bytes | None, ...], int]:
    nbits = (n + 7) // 8
    if end < pos + nbits + 4 * (n + 1):
        raise MalformedError("block key columns run past the payload")
    bits = int.from_bytes(view[pos : pos + nbits], "little")
    if bits >> n:
        raise MalformedError("block key bitmap has bits set past the last record")
    pos += nbits
    koffs = _checked_offsets(view, pos, n, end, "key")
    pos += 4 * (n + 1)
    data = bytes(view[pos : pos + koffs[n]])
    present = format(bits, f"0{n}b")[::-1]  # record i's bit at i (linear, unlike shifts)
    spans = list(zip(present, koffs[:-1], koffs[1:], strict=True))
    if any(b > a for p, a, b in spans if p == "0"):
        raise MalformedError("an absent key has a length in the block's key offsets")
    return tuple(data[a:b] if p == "1" else None for p, a, b in spans), pos + koffs[n]


def _split_headers(view: memoryview, n: int) -> tuple[Any, ...]:
    try:
        hdrs = msgpack.unpackb(view, use_list=False, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises assorted ValueError/TypeError subclasses
        raise MalformedError(
            f"block headers are not valid msgpack: {type(e).__name__}: {e}"
        ) from None
    if type(hdrs) is not tuple or len(hdrs) != n:
        raise MalformedError(f"block headers column is not an array of {n} entries")
    for h in hdrs:
        if not header_pairs_ok(h):
            raise MalformedError(f"block header entry is not [[name, value], ...]: {h!r:.80}")
    return hdrs


def header_pairs_ok(h: Any, *, decoded: bool = True) -> bool:
    """Whether ``h`` is a record's headers: None, or ``(name: str, value: bytes | None)``
    pairs. ``decoded``: exactly msgpack's tuples, ``str`` and ``bytes``; otherwise (a
    writer's input) tuples or lists, and subclasses of ``str`` and ``bytes`` (msgpack
    packs them as theirs)."""
    if h is None:
        return True
    if decoded:
        return type(h) is tuple and all(
            type(x) is tuple
            and len(x) == 2
            and type(x[0]) is str
            and (x[1] is None or type(x[1]) is bytes)
            for x in h
        )
    return isinstance(h, tuple | list) and all(
        isinstance(x, tuple | list)
        and len(x) == 2
        and isinstance(x[0], str)
        and (x[1] is None or isinstance(x[1], bytes))
        for x in h
    )
