"""S3 access for the data source: one cached boto3 client per process, bounded retries.

boto3 clients cannot be pickled, so nothing S3-related travels with a Spark partition:
each Python worker process builds its client on first use (:func:`client_for`) and
reuses it for every task it runs. Credentials come from boto3's standard chain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from memq.retry import call_with_retries
from memq.spark.options import ScanOptions
from memq.storage_handlers.s3 import S3Config, classify_s3_error, make_client

__all__ = ["client_for", "s3_config", "with_retries"]

T = TypeVar("T")

_lock = threading.Lock()
_clients: dict[tuple[str | None, str | None, str | None, int], Any] = {}


def s3_config(opts: ScanOptions, max_connections: int) -> S3Config:
    return S3Config(
        bucket=opts.bucket,
        region=opts.region,
        endpoint_url=opts.endpoint_url,
        profile=opts.profile,
        max_connections=max(1, min(max_connections, 1024)),
    )


def client_for(opts: ScanOptions, max_connections: int) -> Any:
    """This process's boto3 S3 client for ``opts``' endpoint (built once, thread-safe)."""
    key = (opts.endpoint_url, opts.region, opts.profile, max_connections)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = make_client(s3_config(opts, max_connections))
    return client


def with_retries(opts: ScanOptions, fn: Callable[[], T], what: str) -> T:
    """Run one S3 call with the storage retry policy; failures become typed MemQ errors."""

    def attempt() -> T:
        try:
            return fn()
        except Exception as e:
            raise classify_s3_error(e, what) from e

    return call_with_retries(attempt, s3_config(opts, 1).retry_policy())
