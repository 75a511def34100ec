"""PySpark Python DataSource ``memq`` over S3 prefixes, and the backfill job.

``register(session)`` makes ``session.read.format("memq")`` and
``session.readStream.format("memq")`` available and returns the scan counters
(:class:`MemqSource`). See ``docs/spark.md``.

This package is named ``spark``; it never shadows ``pyspark`` (a different name).
"""

from memq.spark.datasource import MemqDataSource, MemqSource, plan_scan, register
from memq.spark.options import ScanOptions, parse_options
from memq.spark.stats import ScanStats

__all__ = [
    "MemqDataSource",
    "MemqSource",
    "ScanOptions",
    "ScanStats",
    "parse_options",
    "plan_scan",
    "register",
]
