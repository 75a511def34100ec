"""Find a topic's batch objects in S3 by listing, pruned by the key's seal-time path.

Keys are ``[<hash>/]<cluster>/topics/<topic>/dt=YYYY-MM-DD/hh=HH/<batch id>``. Listing:

1. one delimiter LIST at the bucket root finds the 2-hex hash prefixes in use (and the
   bare ``<cluster>/`` of an unhashed layout); ``hash_prefix=false`` skips it;
2. each ``<hash>/<cluster>/topics/<topic>/`` is listed concurrently (a thread pool),
   and only over the seal-time window: the listing starts after
   ``.../dt=<first day>/hh=<first hour>`` (S3 ``StartAfter``) and stops at the first key
   past ``.../dt=<last day>/hh=<last hour>/``. Keys sort by time inside a prefix, so a
   window of N hours costs one LIST per hash per 1,000 keys *in the window*, never one
   per hour, and nothing outside the window is listed (beyond the rest of the last page);
3. hedged duplicates (``X`` and ``X-h1``, same size) are collapsed to one object.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from memq.errors import MemqFormatError
from memq.formats.keys import hour_of, parse_object_key, topic_prefix
from memq.spark.options import ScanOptions
from memq.spark.s3io import client_for, with_retries
from memq.spark.stats import StatsSink

__all__ = ["ListResult", "ObjectRef", "dedup_hedged", "list_objects", "list_roots", "probe_objects"]

log = logging.getLogger(__name__)

_HASH_DIR = re.compile(r"^[0-9a-f]{2}/$")
_BATCH = re.compile(r"^(?P<ms>\d{13})-\d{8,}-.+$")
_HEDGE = re.compile(r"^(?P<base>.+)-h(?P<attempt>\d+)$")


class ObjectRef(NamedTuple):
    """One batch object to read: its key, size and seal time (from the batch id)."""

    key: str
    size: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class ListResult:
    objects: list[ObjectRef]  # sorted by (created_ms, key), duplicates removed
    roots: list[str]


def _hour_path(ms: int) -> str:
    dt, hh = hour_of(ms)
    return f"dt={dt}/hh={hh}"


def _list_page(opts: ScanOptions, client: Any, kw: dict[str, Any], what: str) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        page: dict[str, Any] = client.list_objects_v2(**kw)
        return page

    return with_retries(opts, call, what)


def list_roots(opts: ScanOptions, sink: StatsSink) -> list[str]:
    """The topic prefixes to list: one per hash prefix in use (or the unhashed one)."""
    bare = topic_prefix(opts.cluster, opts.topic)
    if opts.hash_prefix == "false":
        sink.add({"prefixes_listed": 0})
        return [bare]
    client = client_for(opts, opts.list_concurrency)
    dirs: list[str] = []
    token: str | None = None
    while True:
        kw: dict[str, Any] = {"Bucket": opts.bucket, "Delimiter": "/", "Prefix": ""}
        if token:
            kw["ContinuationToken"] = token
        page = _list_page(opts, client, kw, f"LIST s3://{opts.bucket}/")
        sink.add({"list_requests": 1})
        dirs.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        if not page.get("IsTruncated"):
            break
        token = page["NextContinuationToken"]
    sink.add({"prefixes_listed": 1})
    roots = [f"{d}{bare}" for d in sorted(dirs) if _HASH_DIR.match(d)]
    if opts.hash_prefix == "auto" and f"{opts.cluster}/" in dirs:
        roots.append(bare)
    return roots


def _list_root(
    opts: ScanOptions,
    root: str,
    lo: int | None,
    hi: int | None,
    sink: StatsSink,
    limit: int | None = None,
) -> list[tuple[ObjectRef, str]]:
    """Objects under one topic prefix sealed in ``[lo, hi]`` (ms, inclusive; None = open);
    with ``limit``, the first that many."""
    client = client_for(opts, opts.list_concurrency)
    start_after = None if lo is None else root + _hour_path(lo)
    stop_after = None if hi is None else root + _hour_path(hi) + "/\uffff"
    out: list[tuple[ObjectRef, str]] = []
    token: str | None = None
    listed = ignored = 0
    done = False
    while not done:
        kw: dict[str, Any] = {"Bucket": opts.bucket, "Prefix": root, "MaxKeys": opts.list_page_size}
        if token:
            kw["ContinuationToken"] = token
        elif start_after:
            kw["StartAfter"] = start_after
        page = _list_page(opts, client, kw, f"LIST s3://{opts.bucket}/{root}")
        sink.add({"list_requests": 1})
        for obj in page.get("Contents", []):
            key: str = obj["Key"]
            listed += 1
            if stop_after is not None and key > stop_after:
                done = True
                break
            try:
                parsed = parse_object_key(key)
            except MemqFormatError:
                parsed = None
            m = _BATCH.match(parsed.batch_id) if parsed is not None else None
            if parsed is None or m is None or parsed.topic != opts.topic:
                ignored += 1
                log.warning("ignoring s3://%s/%s: not a MemQ batch object key", opts.bucket, key)
                continue
            created = int(m["ms"])
            if (lo is not None and created < lo) or (hi is not None and created > hi):
                continue
            out.append((ObjectRef(key, int(obj["Size"]), created), parsed.batch_id))
            if limit is not None and len(out) >= limit:
                done = True
                break
        if done or not page.get("IsTruncated"):
            break
        token = page["NextContinuationToken"]
    sink.add({"prefixes_listed": 1, "keys_listed": listed, "keys_ignored": ignored})
    return out


def dedup_hedged(entries: Iterable[tuple[ObjectRef, str]]) -> tuple[list[ObjectRef], int]:
    """Collapse hedged copies: ``X`` and ``X-h<n>`` of the same size are one object.

    Keeps the lowest attempt of each size (``X`` itself when present). A ``-h<n>`` id whose base is
    not listed stays (it is the only copy, or a broker id that ends in ``-h<n>``).
    """
    by_id: dict[tuple[int, str], list[tuple[int, ObjectRef]]] = {}
    for ref, bid in entries:
        m = _HEDGE.match(bid)
        base, attempt = (m["base"], int(m["attempt"])) if m else (bid, 0)
        by_id.setdefault((ref.created_ms, base), []).append((attempt, ref))
    out: list[ObjectRef] = []
    dropped = 0
    for (_, base), copies in by_id.items():
        copies.sort()
        kept = copies[0][1]
        out.append(kept)
        sizes = {kept.size}  # one copy per size (two same-size copies were both read)
        for _attempt, other in copies[1:]:
            if other.size in sizes:
                dropped += 1
            else:
                sizes.add(other.size)
                log.warning(
                    "%s and %s share batch id %s but differ in size (%d vs %d bytes): reading both",
                    kept.key,
                    other.key,
                    base,
                    kept.size,
                    other.size,
                )
                out.append(other)
    out.sort(key=lambda r: (r.created_ms, r.key))
    return out, dropped


def probe_objects(opts: ScanOptions, sink: StatsSink) -> tuple[list[str], bool]:
    """The topic prefixes a scan of ``opts`` lists, and whether any holds an object in its
    time window; stops at the first object found (a few LISTs when there is data)."""
    lo, hi = opts.seal_window
    roots = list_roots(opts, sink)
    return roots, any(_list_root(opts, root, lo, hi, sink, limit=1) for root in roots)


def list_objects(opts: ScanOptions, lo: int | None, hi: int | None, sink: StatsSink) -> ListResult:
    """Every object of the topic sealed in ``[lo, hi]`` ms (inclusive, None = open)."""
    roots = list_roots(opts, sink)
    if not roots:
        return ListResult([], [])
    workers = max(1, min(opts.list_concurrency, len(roots)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memq-list") as pool:
        parts = list(pool.map(lambda r: _list_root(opts, r, lo, hi, sink), roots))
    objects, dropped = dedup_hedged(e for part in parts for e in part)
    sink.add({"duplicates_dropped": dropped})
    return ListResult(objects, roots)
