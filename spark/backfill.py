"""The backfill job: read a topic's objects from S3 with the ``memq`` source, write files.

Output is partitioned by the records' UTC date and hour (``dt=YYYY-MM-DD/hh=HH``):

- ``parquet``: every column of the ``memq`` schema (``docs/spark.md``), timestamps as
  ``TIMESTAMP_MICROS`` (UTC), ``compression`` (default zstd), no dictionary encoding
  on ``value`` (payloads are nearly unique: trying a dictionary only costs CPU);
- ``json``: one JSON object per line::

    {"id": "<batch id>/<block>/<record>", "key": "...", "key_b64": null,
     "value": "...", "value_b64": null, "headers": {"name": "..."}, "headers_b64": null,
     "timestamp": "2025-11-22T05:00:00.950Z"}

  ``key``/``value`` are the UTF-8 text when the bytes are valid UTF-8, else null with the
  bytes base64-encoded in ``key_b64``/``value_b64`` (a null key has both null).
  ``headers`` maps each name to its UTF-8 text (null when the value is null or not
  UTF-8); ``headers_b64`` maps only the names whose values are not UTF-8 to base64, and
  is null when there are none. ``headers`` is null when the record has no headers.

Counts (objects, bytes, records read) come from the source's scan counters, so they are
what the tasks actually read, not a second pass over the output.

``dedup=True`` writes each record once however many objects hold a copy of its block:
:func:`memq.spark.dedup.drop_duplicate_blocks` (a shuffle) runs before the write, and
the records written are counted on the way out (a Spark ``Observation``), so
``duplicate_records_dropped`` is records read minus records written.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

from memq.spark.datasource import register
from memq.spark.dedup import drop_duplicate_blocks
from memq.spark.errors import BackfillError
from memq.spark.stats import ScanStats

__all__ = ["JOB_CONF", "BackfillResult", "Progress", "json_columns", "run_backfill"]

OutputFormat = Literal["parquet", "json"]
#: (tasks done, tasks known so far) of the write job, polled from Spark's status tracker.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class BackfillResult:
    output: str
    format: str
    objects: int
    records: int  # records written (records read, less duplicate_records_dropped)
    bytes: int
    seconds: float
    stats: ScanStats
    duplicate_records_dropped: int = 0  # dedup: copies of records already written

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def json_columns(df: DataFrame) -> DataFrame:
    """The JSON output projection of a ``memq`` DataFrame (plus ``dt``/``hh``)."""
    text_or_null = "CASE WHEN {c} IS NOT NULL AND is_valid_utf8(CAST({c} AS STRING)) THEN CAST({c} AS STRING) END"
    b64_or_null = (
        "CASE WHEN {c} IS NOT NULL AND NOT is_valid_utf8(CAST({c} AS STRING)) THEN base64({c}) END"
    )
    headers_b64 = (
        "map_filter(transform_values(headers, (k, v) -> "
        + b64_or_null.format(c="v")
        + "), (k, v) -> v IS NOT NULL)"
    )
    return df.select(
        F.concat_ws(
            "/",
            F.substring_index("object_key", "/", -1),
            F.col("block_index").cast("string"),
            F.col("record_index").cast("string"),
        ).alias("id"),
        F.expr(text_or_null.format(c="key")).alias("key"),
        F.expr(b64_or_null.format(c="key")).alias("key_b64"),
        F.expr(text_or_null.format(c="value")).alias("value"),
        F.expr(b64_or_null.format(c="value")).alias("value_b64"),
        F.expr("transform_values(headers, (k, v) -> " + text_or_null.format(c="v") + ")").alias(
            "headers"
        ),
        F.expr(f"CASE WHEN size({headers_b64}) > 0 THEN {headers_b64} END").alias("headers_b64"),
        F.col("timestamp"),
        F.col("dt"),
        F.col("hh"),
    )


#: Session settings for the job's duration: UTC dates and hours, and Parquet timestamps
#: as standard TIMESTAMP_MICROS (UTC-adjusted) instead of Spark's legacy INT96.
JOB_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


#: Output codecs Spark has without extra libraries, per format.
CODECS = {
    "parquet": ("none", "uncompressed", "snappy", "zstd", "lz4_raw", "gzip"),
    "json": ("none", "gzip", "bzip2", "deflate"),
}


def check_codec(fmt: str, compression: str | None) -> str:
    """The output codec (``compression`` or the format's default), else a BackfillError
    (Spark found out only after starting, in a long traceback)."""
    codec = (compression or ("none" if fmt == "json" else "zstd")).lower()
    if codec not in CODECS[fmt]:
        raise BackfillError(
            f"compression {compression!r} is not available for {fmt}: use one of "
            + ", ".join(CODECS[fmt])
        )
    return codec


#: A MemQ error raised in a Spark worker, as the job failure's text shows it.
_WORKER_ERROR = re.compile(r"\b(\w+Error): ((?:corrupt )?MemQ [^\n]*)")


def memq_cause(text: str) -> str | None:
    """The message of the MemQ error that failed a Spark job (a corrupt or missing object,
    ...), from the job failure's text; None when it was not one."""
    m = _WORKER_ERROR.search(text)
    return f"{m.group(1)}: {m.group(2).strip()}" if m else None


@contextmanager
def _session_conf(session: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    old: dict[str, str | None] = {k: session.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        session.conf.set(k, v)
    try:
        yield
    finally:
        for k, prev in old.items():
            if prev is None:
                session.conf.unset(k)
            else:
                session.conf.set(k, prev)


def _watch(session: SparkSession, group: str, progress: Progress, stop: threading.Event) -> None:
    tracker = session.sparkContext.statusTracker()
    while not stop.wait(0.2):
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        if total:
            progress(done, total)


def run_backfill(
    session: SparkSession,
    options: Mapping[str, str],
    out: str,
    *,
    fmt: OutputFormat = "parquet",
    overwrite: bool = False,
    compression: str | None = None,
    progress: Progress | None = None,
    dedup: bool = False,
) -> BackfillResult:
    """Read the topic named by ``options`` (the ``memq`` source options) and write ``out``.

    ``compression``: the output codec; default zstd for Parquet (none, snappy, zstd,
    lz4_raw, gzip) and none for JSON (none, gzip, bzip2, ...). ``dedup``: write each
    record once over the whole scan (:func:`memq.spark.dedup.drop_duplicate_blocks`).
    """
    if fmt not in ("parquet", "json"):
        raise BackfillError(f"unknown output format {fmt!r}: use parquet or json")
    codec = check_codec(fmt, compression)
    source = register(session)
    before = source.stats()
    t0 = time.monotonic()
    group = f"memq-backfill-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    watcher = None
    written = Observation("memq_backfill_written") if dedup else None
    with _session_conf(session, JOB_CONF):
        df = session.read.format("memq").options(**dict(options)).load()
        if written is not None:
            df = drop_duplicate_blocks(df).observe(written, F.count(F.lit(1)).alias("records"))
        df = df.withColumn("dt", F.date_format("timestamp", "yyyy-MM-dd")).withColumn(
            "hh", F.date_format("timestamp", "HH")
        )
        writer = (json_columns(df) if fmt == "json" else df).write.partitionBy("dt", "hh")
        writer = writer.mode("overwrite" if overwrite else "errorifexists")
        sc = session.sparkContext
        sc.setJobGroup(group, f"memq backfill -> {out}")
        if progress is not None:
            watcher = threading.Thread(
                target=_watch, args=(session, group, progress, stop), daemon=True
            )
            watcher.start()
        try:
            if fmt == "json":
                writer.option("ignoreNullFields", "false").option(
                    "timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
                ).option("compression", codec).json(out)
            else:
                writer.option("compression", codec).option(
                    "parquet.enable.dictionary#value", "false"
                ).parquet(out)
        except Exception as e:  # a Spark job failure carries a worker's error as text
            if "PATH_ALREADY_EXISTS" in str(e):
                raise BackfillError(
                    f"output {out} already exists: choose another --out or pass --overwrite"
                ) from None
            cause = memq_cause(str(e))
            if cause is not None:
                raise BackfillError(cause) from None
            raise
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    seconds = time.monotonic() - t0
    delta = source.stats() - before
    records = delta.records_read if written is None else int(written.get["records"])
    if progress is not None:
        progress(1, 1)
    return BackfillResult(
        output=out,
        format=fmt,
        objects=delta.objects_read,
        records=records,
        bytes=delta.bytes_read,
        seconds=seconds,
        stats=delta,
        duplicate_records_dropped=delta.records_read - records,
    )
