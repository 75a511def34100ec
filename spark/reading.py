"""Read one Spark partition: fetch its objects concurrently, decode, apply the corrupt policy.

Runs inside Spark's Python workers. Each task keeps up to ``read_concurrency`` GETs in
flight on a per-process thread pool (so network and decoding overlap), and emits one
Arrow RecordBatch per object, in the partition's order.

With ``dedup=true`` a task drops every block whose id ``(producer_id, epoch, sequence)``
it already read (a retried block stored in two objects of the same partition),
counting ``duplicate_blocks_dropped``; copies read by different tasks are only caught
by a shuffle (:func:`memq.spark.dedup.drop_duplicate_blocks`).

Corrupt or missing objects: with ``on_corrupt=fail`` (default) the task fails with
:class:`CorruptObjectError` / :class:`MissingObjectError`, whose message names the
object; with ``on_corrupt=skip`` the object is skipped, logged at WARNING and counted
(``corrupt_skipped`` / ``missing_skipped`` in the scan stats). Other storage failures
(network, throttling past the retry budget, access denied) always fail the task.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from memq.errors import MalformedError, MemqFormatError, ObjectNotFoundError, TruncatedError
from memq.formats.batch import BatchHeader, batch_header_length, decode_batch_header
from memq.spark.decode import BlockId, decode_object
from memq.spark.errors import MissingObjectError, corrupt_object
from memq.spark.listing import ObjectRef
from memq.spark.options import ScanOptions
from memq.spark.s3io import client_for, s3_config
from memq.spark.stats import Counter
from memq.storage_handlers.s3 import S3Reader

__all__ = ["Fetched", "fetch", "fetch_object", "read_objects"]

log = logging.getLogger(__name__)

_pool_lock = threading.Lock()
_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _pool(size: int) -> ThreadPoolExecutor:
    """This process's fetch pool (rebuilt after a fork: Spark's daemon forks workers)."""
    key = (os.getpid(), size)
    pool = _pools.get(key)
    if pool is None:
        with _pool_lock:
            pool = _pools.get(key)
            if pool is None:
                pool = _pools[key] = ThreadPoolExecutor(size, thread_name_prefix="memq-get")
    return pool


def fetch_object(opts: ScanOptions, key: str, start: int = 0, end: int | None = None) -> bytes:
    """The object, or its bytes ``[start, end)`` (one GET, retried by the storage policy)."""
    n = max(opts.read_concurrency, 4)
    return S3Reader(s3_config(opts, n), client_for(opts, n)).read(opts.bucket, key, start, end)


#: The first GET of a header-first read: the header of up to ~1,800 blocks.
HEADER_READ = 64 * 1024


class Fetched(NamedTuple):
    """What a task fetched of one object: its bytes from ``base`` on (all of them, or
    the blocks a pushed time window needs, then with the object's ``header``)."""

    data: bytes
    base: int = 0
    header: BatchHeader | None = None
    #: Bytes read, the header's included.
    nbytes: int = 0


def fetch(opts: ScanOptions, ref: ObjectRef) -> Fetched:
    """One object for a task: whole, or, when pushed filters bound the records
    (``opts.filtered``) and it is larger than :data:`HEADER_READ`, its header first
    and then only the run of blocks from the first to the last whose index entry
    overlaps the window (none: no second GET). The header must describe an object of
    the listed size (a range past the end would fail as an access error, not as a
    corrupt object).

    An object sealed more than ``time_slack_ms`` inside the window is most likely
    wholly in it: it is read whole, in one GET instead of two (only the cost differs:
    the records are filtered exactly either way)."""
    key = ref.key
    lo, hi = opts.record_window
    slack = opts.time_slack_ms
    inside = (lo is None or ref.created_ms - slack >= lo) and (
        hi is None or ref.created_ms + slack < hi
    )
    if not opts.filtered or inside or ref.size <= HEADER_READ:
        data = fetch_object(opts, key)
        return Fetched(data, nbytes=len(data))
    head = fetch_object(opts, key, 0, HEADER_READ)
    hlen = batch_header_length(head)
    if hlen > ref.size:  # (a range past the end would be S3's 416, not a format error)
        raise TruncatedError(f"the object is {ref.size} bytes, its header alone {hlen}")
    if len(head) < hlen:
        head += fetch_object(opts, key, len(head), hlen)
    header = decode_batch_header(head)
    if header.object_size != ref.size:
        kind = TruncatedError if header.object_size > ref.size else MalformedError
        raise kind(f"the object is {ref.size} bytes, its header says {header.object_size}")
    wanted = [
        e
        for e in header.entries
        if (lo is None or e.max_timestamp >= lo) and (hi is None or e.min_timestamp < hi)
    ]
    if not wanted:
        return Fetched(b"", header.object_size, header, len(head))
    base, end = wanted[0].offset, wanted[-1].offset + wanted[-1].length
    if end <= len(head):  # (a small object: the first GET had it all)
        return Fetched(head[base:end], base, header, len(head))
    data = fetch_object(opts, key, base, end)
    if len(data) != end - base:  # (blocks past a short read must not pass as pruned)
        raise TruncatedError(
            f"bytes {base}-{end - 1} of the object came back as {len(data)} bytes: its "
            f"header says it holds {header.object_size}"
        )
    return Fetched(data, base, header, len(head) + len(data))


def read_objects(
    objects: tuple[ObjectRef, ...],
    opts: ScanOptions,
    stats: Any = None,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> Iterator[Any]:
    """Yield one RecordBatch per object with records in ``[start_ms, end_ms)``.

    ``stats`` is a Spark accumulator (or any ``add(dict)`` sink) that receives this
    call's counts when it ends, or None.
    """
    counter = Counter()
    seen: set[BlockId] | None = set() if opts.dedup else None  # block ids this call read
    pool = _pool(opts.read_concurrency)
    pending: deque[tuple[ObjectRef, Future[Fetched]]] = deque()
    todo = iter(objects)

    def refill() -> None:
        while len(pending) < opts.read_concurrency:
            ref = next(todo, None)
            if ref is None:
                return
            pending.append((ref, pool.submit(fetch, opts, ref)))

    try:
        refill()
        while pending:
            ref, fut = pending.popleft()
            refill()
            try:
                try:
                    got = fut.result()
                except ObjectNotFoundError as e:
                    if opts.on_corrupt == "fail":
                        raise MissingObjectError(opts.bucket, ref.key, e) from e
                    log.warning("skipping missing object s3://%s/%s: %s", opts.bucket, ref.key, e)
                    counter.add({"missing_skipped": 1})
                    continue
                batch, counts = decode_object(
                    got.data, topic=opts.topic, key=ref.key, start_ms=start_ms, end_ms=end_ms,
                    seen=seen, header=got.header, base=got.base,
                )  # fmt: skip
            except MemqFormatError as e:  # (the object's bytes, or its header read first)
                if opts.on_corrupt == "fail":
                    raise corrupt_object(opts.bucket, ref.key, e) from e
                log.warning("skipping corrupt object s3://%s/%s: %s", opts.bucket, ref.key, e)
                counter.add({"corrupt_skipped": 1})
                continue
            read = got.header is None or len(got.data) > 0  # (else: its header only)
            counter.add(
                {
                    "objects_read" if read else "objects_pruned": 1,
                    "bytes_read": got.nbytes,
                    "blocks_read": counts.blocks_read,
                    "blocks_pruned": counts.blocks_pruned,
                    "records_read": counts.records,
                    "duplicate_blocks_dropped": counts.duplicate_blocks,
                }
            )
            del got
            if batch is not None:
                yield batch
    finally:
        for _, fut in pending:
            fut.cancel()
        counter.flush_to(stats)
