"""Backfill benchmark: Spark ``memq`` source vs Spark's built-in Parquet reader over S3A.

Produces a topic of 1 KiB records through a real broker (acks=all) into the local
stack's S3 (moto), with notifications in its Kafka, then measures in the same run:

- **parquet over S3A** (the baseline): the same records written once as uncompressed
  Parquet into a bucket of the same S3, read by Spark's built-in Parquet reader through
  Hadoop's S3A connector (benchmarks/spark_s3a.py: its jars from ``make install``; the
  ``analytics`` input stream S3A's docs recommend for Parquet, or ``--s3a-stream
  classic`` with fadvise random) into the ``noop`` sink;
- **parquet on local disk** (a secondary reference): the same Parquet files read from
  local disk, no S3 in the way;
- **memq source**: ``spark.read.format("memq")`` into the ``noop`` sink (planning,
  listing, GET, decode, Arrow to the JVM);
- **backfill**: ``memq.spark.backfill.run_backfill`` to Parquet (zstd): source + writer;
- **ceiling**: a plain multi-threaded boto3 download of the objects (list + GET, no
  decoding): the most any reader could get out of this S3;
- **python source floor**: a Python data source with no work of its own: it yields the
  Parquet baseline's rows as Arrow batches of the memq source's schema, kept in each
  Python worker's memory after its first read of the local files (no I/O, no decoding,
  no listing), into the ``noop`` sink: Spark's own cost of taking Arrow batches from a
  Python data source (Python workers, the Arrow stream to the JVM, rows), the most any
  Python data source can reach on this machine;
- **where**: a query keeping the middle tenth of the records by time (``WHERE`` on
  ``timestamp``), by the Parquet reader over S3A (the baseline for these rows: its
  row-group statistics) and by the memq source without and with Spark's Python filter pushdown
  (``spark.sql.python.filterPushdown.enabled``: objects outside the window cost a header
  read); their rates count the records the query keeps.

Method (issue 19): on Spark ``local[*]``, after a warm-up job each, every reader's job is
run back to back for a window of >= 20 s (2 s with ``--quick``: a smoke, not a figure);
its rate is the record payload of all measured jobs over their total time, and CPU
seconds per GiB are read from /proc for this process, the Spark JVM with its Python
workers (``spark_tree``), the broker, Kafka and moto. Repeated ``repeats`` times (3),
interleaved; min/median/max. ``vs_parquet_s3a`` is each reader's rate over the S3A
baseline's (the filtered rows: over its filtered read), ``vs_parquet_local`` over the
local-disk read's.

Prints a table and writes ``benchmarks/results/backfill.json``.

    python benchmarks/bench_backfill.py [--quick] [--out PATH] [--compression none|zstd]
                                        [--s3a-stream analytics|classic]

Target (issues 19, 42): memq source records/s >= 1.0x the Parquet reader's over S3A. Uses a running stack named
by MEMQ_S3_ENDPOINT (plus MEMQ_KAFKA_BOOTSTRAP, MEMQ_ZK_CONNECT), else starts one; the
broker runs in its own process either way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import benchlib
import spark_s3a
from benchlib import eprint, spread

from memq.devstack import DevStack, StackState
from memq.devstack.brokers import start_broker
from memq.devstack.procs import ProcessRef, stop
from memq.formats import Compression, parse_compression
from memq.spark.pushdown import FILTER_PUSHDOWN_CONF

TARGET_RATIO = 1.0
RECORD = 1024
BLOCK_RECORDS = 1024  # 1 MiB of payload per block
CLUSTER = "bench"


def broker_config(state: StackState, bucket: str, batch_bytes: int) -> dict[str, Any]:
    return benchlib.broker_config(
        state, "bench-backfill",
        benchlib.storage_config("s3", bucket=bucket, endpoint=state.s3_endpoint),
        [{"name": "logs"}, {"name": "warm"}],
        partitions=4, batch={"bytes": batch_bytes, "ms": 1000}, cluster=CLUSTER,
    )  # fmt: skip


def write_topic(endpoint: str, topic: str, records: int, codec: Compression) -> int:
    """Produce ``records`` 1 KiB values (acks=all) through the broker; returns payload bytes."""
    from memq import Producer

    values = benchlib.log_records(records, RECORD)
    conf = {
        "bootstrap.servers": endpoint,
        "compression.type": codec.name.lower(),
        "batch.size": BLOCK_RECORDS * RECORD,
        "linger.ms": 5,
    }
    with Producer(conf) as p:
        for v in values:
            p.produce(topic, v)
        if p.flush(600):
            raise SystemExit(f"producing {topic} did not complete in 600 s")
    return sum(map(len, values))


def ceiling(state: StackState, bucket: str, threads: int, topic: str) -> tuple[int, list[str]]:
    """List the bucket and GET every object with ``threads`` threads (no decoding)."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=state.s3_endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=threads, s3={"addressing_style": "path"}),
    )
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
        if f"/{topic}/" in o["Key"]
    ]

    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(get, keys))
    return total, keys


def floor_source(parquet_dir: str, parts: int) -> type:
    """The "python source floor" reader (module doc): registered as
    ``memq_bench_floor``; its partitions are the Parquet files of ``parquet_dir`` dealt
    into ``parts`` groups. Defined in a function so that PySpark ships the classes to
    its workers by value (this module is not importable there)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from memq.spark.decode import SCHEMA

    files = sorted(str(f) for f in Path(parquet_dir).glob("*.parquet"))
    groups = [files[i :: max(1, parts)] for i in range(min(max(1, parts), len(files)))]

    class FloorReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(g) for g in groups]

        def read(self, partition: InputPartition) -> Any:
            import sys
            import types

            import pyarrow.parquet as pq

            from memq.spark.decode import ARROW_SCHEMA

            cache = sys.modules.get("_memq_bench_floor")
            if cache is None:  # (one per Python worker process, kept while it lives)
                cache = types.ModuleType("_memq_bench_floor")
                cache.batches = {}
                sys.modules["_memq_bench_floor"] = cache
            for path in partition.value:
                if path not in cache.batches:
                    table = pq.read_table(path).select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA)
                    # (the memq source yields one batch per object: 4,096 rows here)
                    cache.batches[path] = table.to_batches(max_chunksize=BLOCK_RECORDS * 4)
                yield from cache.batches[path]

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "memq_bench_floor"

        def schema(self) -> Any:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    return FloorSource


def run(
    quick: bool,
    codec: Compression,
    master: str,
    size: tuple[int, int] | None = None,
    repeats: int | None = None,
    s3a_stream: str = "analytics",
) -> dict[str, Any]:
    """``size``: (objects, blocks of 1 MiB per object); default 64 x 8 (12 x 2 quick);
    ``s3a_stream``: S3A's input stream for the baseline (``spark_s3a.STREAMS``)."""
    objects, blocks = size or ((12, 2) if quick else (64, 8))
    repeats = repeats or (1 if quick else 3)
    threads = 8
    records = objects * blocks * BLOCK_RECORDS
    ext = os.environ.get("MEMQ_S3_ENDPOINT")
    tmp = Path(tempfile.mkdtemp(prefix="memq-bench-backfill-"))
    spark_s3a.jars()  # before any server starts: are S3A's jars installed?
    stack = DevStack(tmp / "stack")
    state = stack.up(brokers=0, auditor=False)
    broker = None
    s3 = state.s3_client()
    bucket = f"bench-backfill-{uuid.uuid4().hex[:8]}"
    parquet_bucket = f"{bucket}-parquet"  # the baseline's, on the same S3
    try:
        for k, v in state.aws_env().items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        s3.create_bucket(Bucket=bucket)
        s3.create_bucket(Bucket=parquet_bucket)
        broker = start_broker(
            tmp,
            "broker",
            broker_config(state, bucket, blocks * BLOCK_RECORDS * RECORD),
            state.aws_env(),
        )
        t = time.perf_counter()
        payload = write_topic(broker["endpoint"], "logs", records, codec)
        write_s = time.perf_counter() - t
        write_topic(broker["endpoint"], "warm", 4 * BLOCK_RECORDS, codec)

        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F  # noqa: N812

        from memq.spark import register
        from memq.spark.backfill import run_backfill

        t = time.perf_counter()
        builder = (
            SparkSession.builder.master(master)
            .appName("memq-bench-backfill")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
        for k, v in spark_s3a.session_conf(state.s3_endpoint, master, s3a_stream).items():
            builder = builder.config(k, v)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        spark_start_s = time.perf_counter() - t
        cores = int(session.sparkContext.defaultParallelism)
        procs = {"broker": broker["pid"], **benchlib.stack_pids(state)}
        gateway = getattr(session.sparkContext, "_gateway", None)
        jvm = getattr(getattr(gateway, "proc", None), "pid", None)
        if jvm is not None:
            procs["spark_tree"] = jvm
        try:
            opts = {"bucket": bucket, "topic": "logs", "cluster": CLUSTER,
                    "endpoint_url": state.s3_endpoint, "region": "us-east-1"}  # fmt: skip
            # Warm-up: JIT, and one Python worker per core (one object per partition).
            tiny = {"min_partition_bytes": "1", "target_partition_bytes": "1"}
            run_backfill(session, {**opts, **tiny, "topic": "warm"}, str(tmp / "warm"))
            # The baselines' input: the same records as uncompressed Parquet, on local
            # disk and (the same files) in a bucket of the same S3, read through S3A.
            parquet_in = str(tmp / "baseline-parquet")
            session.read.format("memq").options(**opts).load().write.option(
                "compression", "none"
            ).parquet(parquet_in)
            parquet_bytes = spark_s3a.upload(s3, Path(parquet_in), parquet_bucket, "logs")
            parquet_s3a = f"s3a://{parquet_bucket}/logs/"
            s3a_rows = session.read.parquet(parquet_s3a).count()  # (S3A's start: warm-up)
            if s3a_rows != records:
                raise SystemExit(f"Parquet over S3A has {s3a_rows} rows, not {records}")
            stored = len(ceiling(state, bucket, threads, "logs")[1])
            outs = iter(range(1 << 30))
            plan: dict[str, int] = {}
            # A query with a WHERE on timestamp keeping the middle tenth of the records
            # (by time; the producer writes in bursts, so by quantile, not by time span):
            # Spark's Parquet reader (its own row-group pushdown) against the memq source
            # with and without Spark's Python filter pushdown.
            q = session.read.parquet(parquet_in).select(
                F.percentile_approx(F.unix_micros("timestamp"), [0.45, 0.55], 100_000)
            )
            lo_us, hi_us = q.first()[0]
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            window = (F.col("timestamp") >= F.lit(epoch + dt.timedelta(microseconds=lo_us))) & (
                F.col("timestamp") < F.lit(epoch + dt.timedelta(microseconds=hi_us))
            )
            hits = session.read.parquet(parquet_in).where(window).count()
            if not hits:
                raise SystemExit(f"the WHERE window [{lo_us}, {hi_us}) us holds no record")

            def pushdown(on: bool) -> None:
                session.conf.set(FILTER_PUSHDOWN_CONF, "true" if on else "false")
                register(session)  # (the setting is taken when registering)

            def job_ceiling() -> tuple[int, int]:
                ceiling(state, bucket, threads, "logs")
                return payload, records

            def job_source() -> tuple[int, int]:
                pushdown(False)
                session.read.format("memq").options(**opts).load().write.format("noop").mode(
                    "overwrite"
                ).save()
                return payload, records

            def job_parquet(path: str) -> tuple[int, int]:
                session.read.parquet(path).write.format("noop").mode("overwrite").save()
                return payload, records

            session.dataSource.register(floor_source(parquet_in, cores))
            floor_rows = session.read.format("memq_bench_floor").load().count()
            if floor_rows != records:
                raise SystemExit(f"the floor source yields {floor_rows} rows, not {records}")

            def job_floor() -> tuple[int, int]:
                session.read.format("memq_bench_floor").load().write.format("noop").mode(
                    "overwrite"
                ).save()
                return payload, records

            def noop_where(df: Any) -> tuple[int, int]:
                df.where(window).write.format("noop").mode("overwrite").save()
                return hits * RECORD, hits

            def job_parquet_where() -> tuple[int, int]:
                return noop_where(session.read.parquet(parquet_s3a))

            def job_source_where(on: bool) -> tuple[int, int]:
                pushdown(on)
                return noop_where(session.read.format("memq").options(**opts).load())

            def job_backfill() -> tuple[int, int]:
                pushdown(False)
                out = tmp / f"out{next(outs)}"
                r = run_backfill(session, opts, str(out))
                shutil.rmtree(out, ignore_errors=True)
                plan.update(
                    partitions=r.stats.partitions_planned, list_requests=r.stats.list_requests
                )
                if r.records != records or r.objects != stored:
                    raise SystemExit(
                        f"backfill read {r.records} records / {r.objects} objects, "
                        f"wrote {records} / {stored}"
                    )
                return payload, records

            jobs = {
                "spark_parquet_s3a_noop": lambda: job_parquet(parquet_s3a),
                "spark_parquet_local_noop": lambda: job_parquet(parquet_in),
                "spark_python_source_floor_noop": job_floor,
                "spark_memq_source_noop": job_source,
                "spark_backfill_parquet": job_backfill,
                "ceiling_boto3_download": job_ceiling,
                "spark_parquet_s3a_where_noop": job_parquet_where,
                "spark_memq_source_where_noop": lambda: job_source_where(False),
                "spark_memq_source_where_pushdown_noop": lambda: job_source_where(True),
            }
            windows: dict[str, list[dict[str, Any]]] = {k: [] for k in jobs}
            for rep in range(repeats):
                for name, job in jobs.items():
                    eprint(f"backfill: {name} rep {rep + 1}/{repeats}")
                    windows[name].append(benchlib.repeat_window(job, procs, quick))
        finally:
            session.stop()
    finally:
        if broker is not None:
            stop(ProcessRef(broker["pid"], broker.get("start_time")), timeout=60)
        for b in (bucket, parquet_bucket):  # (an external S3 outlives this run)
            try:
                benchlib.drop_bucket(s3, b)
            except Exception as e:
                eprint(f"could not drop bucket {b}: {e}")
        stack.down()
        shutil.rmtree(tmp, ignore_errors=True)

    def vs(ws: list[dict[str, Any]], base: str) -> dict[str, float]:
        """Rate over the baseline's, within each repetition."""
        return spread([w["MBps"] / b["MBps"] for w, b in zip(ws, windows[base], strict=True)])

    results: dict[str, Any] = {}
    for name, ws in windows.items():
        results[name] = {
            "windows": ws,
            "MBps": spread([w["MBps"] for w in ws]),
            "records_per_s": spread([w["records_per_s"] for w in ws]),
            "cpu_s_per_GiB": {
                p: spread([w["cpu_s_per_GiB"][p] for w in ws]) for p in ws[0]["cpu_s_per_GiB"]
            },
            # (a filtered read is compared with the Parquet reader's read of the same WHERE)
            "vs_parquet_s3a": vs(
                ws, "spark_parquet_s3a_where_noop" if "where" in name else "spark_parquet_s3a_noop"
            ),
        }
        if "where" not in name:
            results[name]["vs_parquet_local"] = vs(ws, "spark_parquet_local_noop")
    results["spark_backfill_parquet"].update(plan, compression="zstd")
    ratio = results["spark_memq_source_noop"]["vs_parquet_s3a"]["median"]
    _, window = benchlib.timing(quick)
    return {
        "benchmark": "backfill",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "spark_master": master,
            "spark_cores": cores,
            "spark_start_seconds": round(spark_start_s, 2),
            "s3": "external" if ext else "moto server (local stack)",
        },
        "data": {
            "objects": stored,
            "batch_bytes": blocks * BLOCK_RECORDS * RECORD,
            "block_records": BLOCK_RECORDS,
            "record_bytes": RECORD,
            "records": records,
            "where_records": hits,
            "payload_bytes": payload,
            "baseline_parquet_bytes": parquet_bytes,
            "baseline_parquet_s3a": {
                "stream": s3a_stream,
                "settings": spark_s3a.settings(state.s3_endpoint, s3a_stream),
                "jars": [j.name for j in spark_s3a.jars()],
            },
            "compression": codec.name.lower(),
            "write_seconds": round(write_s, 2),
            "window_s": window,
            "repeats": repeats,
        },
        "target": {
            "what": (f"memq source records/s >= {TARGET_RATIO}x Spark's Parquet reader's over S3A"),
            "ratio": round(ratio, 3),
            "met": ratio >= TARGET_RATIO,
        },
        "results": results,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    d = doc["data"]
    smoke = " [SMOKE: 2 s windows, not a figure]" if doc["quick"] else ""
    t = Table(
        title=(
            f"MemQ backfill: {d['records']:,} records of {d['record_bytes']} B in "
            f"{d['objects']} objects, {d['window_s']:g} s windows x {d['repeats']}{smoke}"
        )
    )
    procs = ("client", "spark_tree", "broker", "s3_moto")
    for col in ("reader", "MB/s (median)", "records/s", "vs Parquet S3A", "vs Parquet local",
                *(f"{p} CPU-s/GiB" for p in procs)):  # fmt: skip
        t.add_column(col, justify="right", no_wrap=col == "reader")
    for name, r in doc["results"].items():
        cpu = r["cpu_s_per_GiB"]
        t.add_row(
            name,
            f"{r['MBps']['median']:.1f}",
            f"{r['records_per_s']['median']:,.0f}",
            f"{r['vs_parquet_s3a']['median']:.3f}",
            f"{r['vs_parquet_local']['median']:.3f}" if "vs_parquet_local" in r else "-",
            *(f"{cpu[p]['median']:.2f}" if p in cpu else "-" for p in procs),
        )
    console = Console(width=max(Console().width, 190))
    console.print(t)
    tg = doc["target"]
    mark = "[green]met[/green]" if tg["met"] else "[red]NOT met[/red]"
    console.print(f"target ({tg['what']}): ratio {tg['ratio']:.3f}: {mark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: small data, < 60 s")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "backfill.json")
    ap.add_argument("--compression", default="none", help="block codec: none, zstd, lz4, gzip")
    ap.add_argument("--master", default="local[*]", help="Spark master URL")
    ap.add_argument("--s3a-stream", default="analytics", choices=spark_s3a.STREAMS,
                    help="S3A input stream of the Parquet baseline (analytics)")  # fmt: skip
    args = ap.parse_args(argv)
    doc = run(
        args.quick, parse_compression(args.compression), args.master, s3a_stream=args.s3a_stream
    )
    print_table(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
