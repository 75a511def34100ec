"""Scan-wide block dedup: keep one copy of each record whatever object holds it.

A block can be stored more than once (a producer retry stored in two objects, a hedged
upload under a different name): every copy has the same block id ``(producer_id, epoch,
sequence)`` and the same records in the same order, so the same ``record_index`` values.
The ``dedup=true`` option drops copies inside one read task; copies read by different
tasks only meet in a shuffle, which :func:`drop_duplicate_blocks` adds.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from memq.errors import ConfigError

__all__ = ["RECORD_ID", "drop_duplicate_blocks"]

#: What identifies a record across copies of its block (the topic: unions of topics).
RECORD_ID = ("topic", "producer_id", "epoch", "sequence", "record_index")


def drop_duplicate_blocks(df: DataFrame) -> DataFrame:
    """``df`` with one row per :data:`RECORD_ID`: each record once, over the whole scan.

    A shuffle (``dropDuplicates``), so it catches copies read by different tasks, unlike
    the ``dedup`` option. Which copy's ``object_key``/``block_index`` survives is not
    specified; every other column is the same in all copies. Batch DataFrames only: on
    a stream it would keep every id in its state forever; use
    ``withWatermark(...).dropDuplicatesWithinWatermark(list(RECORD_ID))`` there.
    """
    missing = [c for c in RECORD_ID if c not in df.columns]
    if missing:
        raise ConfigError(
            f"drop_duplicate_blocks needs the columns {', '.join(RECORD_ID)} of the memq "
            f"schema; missing: {', '.join(missing)} (apply it before selecting columns)"
        )
    if df.isStreaming:
        raise ConfigError(
            "drop_duplicate_blocks is for batch DataFrames (its state would grow forever on "
            "a stream): use df.withWatermark('timestamp', '...')"
            ".dropDuplicatesWithinWatermark(list(memq.spark.dedup.RECORD_ID))"
        )
    return df.dropDuplicates(list(RECORD_ID))
