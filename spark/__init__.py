"""PySpark Python DataSource ``memq`` over S3 prefixes, and the backfill job.

``register(session)`` makes ``session.read.format("memq")`` and
``session.readStream.format("memq")`` available and returns the scan counters
(:class:`MemqSource`); ``drop_duplicate_blocks(df)`` keeps one copy of each record over
a whole scan. See ``docs/spark.md``.

This package is named ``spark``; it never shadows ``pyspark`` (a different name).
"""

from memq.spark.datasource import MemqDataSource, MemqSource, plan_scan, register
from memq.spark.dedup import drop_duplicate_blocks
from memq.spark.local import local_stack_options
from memq.spark.options import ScanOptions, parse_options
from memq.spark.stats import ScanStats

__all__ = [
    "MemqDataSource",
    "MemqSource",
    "ScanOptions",
    "ScanStats",
    "drop_duplicate_blocks",
    "local_stack_options",
    "parse_options",
    "plan_scan",
    "register",
]
