"""S3 access for the data source: one cached boto3 client per process, bounded retries.

boto3 clients cannot be pickled, so nothing S3-related travels with a Spark partition:
each Python worker process builds its client on first use (:func:`client_for`) and
reuses it for every task it runs. Credentials come from boto3's standard chain.

In a worker forked by PySpark's daemon, building a client also freezes the process's
objects out of the cyclic garbage collector (:func:`gc.freeze`). The daemon's worker loop
runs a full ``gc.collect()`` after every task, and once boto3 has loaded the S3 service
model a full collection walks ~140,000 objects: ~70 ms of CPU per task (measured), about
half of the workers' CPU in a backfill. What is alive then (modules, the service model,
the client) lives as long as the worker; frozen objects are still freed by reference
counting, only cycles among them would be kept. Objects made later are collected as
usual. Other processes (a driver, tests) are left alone.
"""

from __future__ import annotations

import gc
import sys
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
                if in_pyspark_daemon():
                    gc.freeze()  # see the module doc: no full GC pass over boto3 per task
    return client


def in_pyspark_daemon() -> bool:
    """Whether this process is a Python worker forked by ``python -m pyspark.daemon``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon"


def with_retries(opts: ScanOptions, fn: Callable[[], T], what: str) -> T:
    """Run one S3 call with the storage retry policy; failures become typed MemQ errors."""

    def attempt() -> T:
        try:
            return fn()
        except Exception as e:
            raise classify_s3_error(e, what) from e

    return call_with_retries(attempt, s3_config(opts, 1).retry_policy())
