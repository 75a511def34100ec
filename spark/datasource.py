"""The ``memq`` PySpark data source: a topic's batch objects read straight from S3.

    from memq.spark import register
    source = register(session)                      # once per SparkSession
    df = (session.read.format("memq")
          .option("bucket", "memq-prod").option("topic", "events")
          .option("start_time", "2025-11-22T00:00:00Z").option("end_time", "2025-11-23")
          .load())
    source.stats()                                  # LIST requests, objects, skips, ...

No broker and no Kafka are involved: the driver lists the topic's prefixes (pruned by
the seal-time ``dt=/hh=`` path), groups the objects into partitions by bytes, and each
task GETs and decodes its objects into Arrow batches. With the session's
``spark.sql.python.filterPushdown.enabled`` set before :func:`register`, a ``WHERE`` on
``timestamp`` is pushed down exactly (:class:`MemqPushdownReader`: each task reads an
object's header first and GETs only the blocks in the window). Options, schema and
semantics: ``docs/spark.md``.

Before the SparkSession starts, set ``PYSPARK_PYTHON`` to an interpreter that has this
package installed (``sys.executable`` in tests) and put AWS credentials where boto3's
standard chain finds them on every node (``AWS_*`` env vars, a profile, an IAM role).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.accumulators import Accumulator
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from memq.errors import ConfigError
from memq.spark.decode import SCHEMA, SCHEMA_DDL
from memq.spark.listing import list_objects
from memq.spark.options import ScanOptions, parse_options
from memq.spark.planning import ScanPartition, pack_partitions
from memq.spark.pushdown import FILTER_PUSHDOWN_CONF, time_window
from memq.spark.reading import read_objects
from memq.spark.stats import Counter, CountsParam, ScanStats

if TYPE_CHECKING:  # (Spark 4.1+; the source itself runs on 4.0, without pushdown)
    from pyspark.sql.datasource import Filter

__all__ = [
    "MemqBatchReader",
    "MemqDataSource",
    "MemqPushdownReader",
    "MemqSource",
    "plan_scan",
    "register",
]

log = logging.getLogger(__name__)


def plan_scan(opts: ScanOptions, cores: int, counter: Counter | None = None) -> list[ScanPartition]:
    """List the objects a batch read needs and pack them into partitions (driver side)."""
    counter = counter if counter is not None else Counter()
    lo, hi = opts.seal_window
    listed = list_objects(opts, lo, hi, counter)
    parts = pack_partitions(listed.objects, opts, cores)
    counter.add(
        {
            "objects_planned": len(listed.objects),
            "bytes_planned": sum(o.size for o in listed.objects),
            "partitions_planned": len(parts),
        }
    )
    log.info(
        "memq scan of %s: %d objects in %d partitions (%s)",
        opts.location(),
        len(listed.objects),
        len(parts),
        counter.snapshot(),
    )
    return parts


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise ConfigError(
            "the memq data source has a fixed schema; do not pass .schema(...): select or "
            f"cast columns after load() (schema: {SCHEMA_DDL})"
        )


class MemqBatchReader(DataSourceReader):
    """Plans partitions on the driver; reads them in the executors."""

    def __init__(self, opts: ScanOptions, stats: Accumulator[dict[str, int]] | None, cores: int):
        self.opts = opts
        self.stats = stats
        self.cores = cores
        self.empty = False

    def partitions(self) -> Sequence[InputPartition]:
        if self.empty:  # (pushed filters that no record can pass: nothing to list)
            return []
        counter = Counter()
        try:
            return plan_scan(self.opts, self.cores, counter)
        finally:
            counter.flush_to(self.stats)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, ScanPartition):  # Spark's placeholder for "no partitions"
            return iter(())
        start_ms, end_ms = self.opts.record_window
        return read_objects(
            partition.objects, self.opts, self.stats, start_ms=start_ms, end_ms=end_ms
        )


class MemqPushdownReader(MemqBatchReader):
    """A batch reader that takes Spark's filters on ``timestamp`` as its time window
    (``memq.spark.pushdown``); used when the session enables Python filter pushdown."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802
        window = time_window(filters, *self.opts.record_window)
        self.empty = window.empty
        if (window.start_ms, window.end_ms) != self.opts.record_window:
            self.opts = replace(
                self.opts, filter_start_ms=window.start_ms, filter_end_ms=window.end_ms
            )
        return filters  # Spark still checks every filter: the window is only narrower


class MemqDataSource(DataSource):
    """``spark.read.format("memq")`` and ``spark.readStream.format("memq")``.

    Register with :func:`register` (which also wires up the scan counters); registering
    this class directly with ``session.dataSource.register`` works too, without counters.
    """

    _stats: ClassVar[Accumulator[dict[str, int]] | None] = None
    _cores: ClassVar[int] = 0
    #: Whether Spark calls ``pushFilters`` (its ``FILTER_PUSHDOWN_CONF`` when registered):
    #: a reader that implements it is refused by a session that does not enable it.
    _pushdown: ClassVar[bool] = False

    @classmethod
    def name(cls) -> str:
        return "memq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        cls = MemqPushdownReader if type(self)._pushdown else MemqBatchReader
        return cls(parse_options(self.options), type(self)._stats, type(self)._cores)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from memq.spark.streaming import MemqStreamReader

        _check_schema(schema)
        return MemqStreamReader(parse_options(self.options), type(self)._stats, type(self)._cores)


class MemqSource:
    """What :func:`register` returns: the session's scan counters."""

    def __init__(self, accumulator: Accumulator[dict[str, int]], cls: type[MemqDataSource]):
        self._acc = accumulator
        self.data_source = cls

    def stats(self) -> ScanStats:
        """Counts of every ``memq`` scan in this SparkContext so far (subtract snapshots)."""
        return ScanStats.from_counts(dict(self._acc.value))


_registry_lock = threading.Lock()
_sources: weakref.WeakKeyDictionary[Any, MemqSource] = weakref.WeakKeyDictionary()


def register(session: SparkSession) -> MemqSource:
    """Register the ``memq`` format with ``session``; returns its scan counters.

    Filters on ``timestamp`` are pushed down when the session's
    ``spark.sql.python.filterPushdown.enabled`` is true at this call (Spark refuses a
    reader that takes filters when it is off): call again after changing it.

    Idempotent: sessions of one SparkContext share one set of counters. Needs a classic
    (not Spark Connect) session, whose SparkContext holds the counters; on Spark Connect
    register :class:`MemqDataSource` directly (no counters).
    """
    try:
        sc = session.sparkContext
    except Exception as e:  # Spark Connect sessions have no SparkContext
        raise ConfigError(
            f"spark.register needs a classic SparkSession ({type(e).__name__}: {e}); on "
            "Spark Connect use session.dataSource.register(spark.MemqDataSource)"
        ) from e
    with _registry_lock:
        source = _sources.get(sc)
        if source is None:
            acc = sc.accumulator({}, CountsParam())
            # A class made here (not importable by name) is pickled by value, so the
            # accumulator and core count travel with it to Spark's planner and workers.
            cls = type(
                "MemqDataSource",
                (MemqDataSource,),
                {
                    "_stats": acc,
                    "_cores": int(sc.defaultParallelism),
                    "__module__": __name__,
                    "__qualname__": "register.<locals>.MemqDataSource",
                },
            )
            source = _sources[sc] = MemqSource(acc, cls)
        # (registering pickles the class: the setting as of this call goes with it)
        conf = session.conf.get(FILTER_PUSHDOWN_CONF, "false")
        source.data_source._pushdown = str(conf).strip().lower() == "true"
        session.dataSource.register(source.data_source)
    return source
