"""Backfill benchmark: Spark ``memq`` source -> Parquet, beside the storage ceiling.

Produces a topic of 1 KiB records through a real broker (acks=all) into the local
stack's S3 (moto), with notifications in its Kafka, then measures in the same run:

- **ceiling**: a plain multi-threaded boto3 download of the same objects (list + GET,
  no decoding): the most any reader could get out of this S3;
- **backfill**: ``spark.backfill.run_backfill`` to Parquet (zstd) on Spark ``local[*]``
  (planning, listing, GET, decode, Parquet write), after a warm-up job;
- **source only**: the same read into Spark's ``noop`` sink, to separate the source's
  cost from the Parquet writer's;

Each is run ``repeats`` times (3; 1 with ``--quick``), interleaved, and the best run of
each counts (same policy for all).
- **memq.Consumer**: a consumer group reading the same objects through their
  notifications, with as many fetch threads as the ceiling uses.

Prints a table and writes ``benchmarks/results/backfill.json``.

    python benchmarks/bench_backfill.py [--quick] [--out PATH] [--compression none|zstd]

Target: backfill records/s >= 0.7x the ceiling's. Uses a running stack named by
MEMQ_S3_ENDPOINT (plus MEMQ_KAFKA_BOOTSTRAP, MEMQ_ZK_CONNECT), else starts one; the
broker runs in its own process either way.
"""

from __future__ import annotations

import argparse
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

from memq.devstack import DevStack, StackState
from memq.devstack.brokers import start_broker
from memq.devstack.procs import ProcessRef, stop
from memq.formats import Compression, parse_compression

TARGET_RATIO = 0.7
RECORD = 1024
BLOCK_RECORDS = 1024  # 1 MiB of payload per block
CLUSTER = "bench"


def broker_config(state: StackState, bucket: str, batch_bytes: int) -> dict[str, Any]:
    return {
        "broker_id": "bench-backfill",
        "cluster": CLUSTER,
        "port": 0,
        "http_port": 0,
        "topic_defaults": {
            "storage": {
                "type": "s3",
                "s3": {"bucket": bucket, "endpoint_url": state.s3_endpoint, "region": "us-east-1"},
            },
            "notification": {"bootstrap_servers": state.kafka_bootstrap, "partitions": 4},
            "batch": {"bytes": batch_bytes, "ms": 1000},
        },
        "topics": [{"name": "logs"}, {"name": "warm"}],
    }


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


def consume(endpoint: str, topic: str, records: int, threads: int) -> dict[str, Any]:
    """Read the whole topic with a new ``memq.Consumer`` group (time to the last record)."""
    from memq import Consumer

    c = Consumer(
        {
            "bootstrap.servers": endpoint,
            "group.id": f"bench-backfill-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "enable.auto.commit": False,
            "fetch.concurrency": threads,
            "prefetch.objects": threads * 2,
        }
    )
    try:
        start = time.perf_counter()
        c.subscribe(topic)
        got = 0
        t0: float | None = None
        deadline = time.monotonic() + 600
        while got < records and time.monotonic() < deadline:
            n = len(c.consume(5000, 1.0))
            if n and t0 is None:  # the Kafka group join (seconds on Tansu) is not reading
                t0 = time.perf_counter()
            got += n
        end = time.perf_counter()
        seconds = end - (t0 or end)
        objects = c.stats.objects
    finally:
        c.close()
    if got != records:
        raise SystemExit(f"memq.Consumer read {got} records of {records}")
    return {"seconds": seconds, "objects": objects, "join_seconds": (t0 or end) - start}


def ceiling(state: StackState, bucket: str, threads: int, topic: str) -> dict[str, float]:
    """List the bucket and GET every object with ``threads`` threads (no decoding)."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=state.s3_endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=threads, s3={"addressing_style": "path"}),
    )
    t0 = time.perf_counter()
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
    return {"seconds": time.perf_counter() - t0, "bytes": total, "objects": len(keys)}


def run(
    quick: bool,
    codec: Compression,
    master: str,
    size: tuple[int, int] | None = None,
    repeats: int | None = None,
) -> dict[str, Any]:
    """``size``: (objects, blocks of 1 MiB per object); default 64 x 8 (12 x 2 quick)."""
    objects, blocks = size or ((12, 2) if quick else (64, 8))
    repeats = repeats or (1 if quick else 3)
    threads = 8
    records = objects * blocks * BLOCK_RECORDS
    ext = os.environ.get("MEMQ_S3_ENDPOINT")
    tmp = Path(tempfile.mkdtemp(prefix="memq-bench-backfill-"))
    stack = DevStack(tmp / "stack")
    state = stack.up(brokers=0, auditor=False)
    broker = None
    try:
        for k, v in state.aws_env().items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        bucket = f"bench-backfill-{uuid.uuid4().hex[:8]}"
        state.s3_client().create_bucket(Bucket=bucket)
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

        from memq.spark.backfill import run_backfill

        t = time.perf_counter()
        session = (
            SparkSession.builder.master(master)
            .appName("memq-bench-backfill")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        spark_start_s = time.perf_counter() - t
        cores = int(session.sparkContext.defaultParallelism)
        try:
            opts = {"bucket": bucket, "topic": "logs", "cluster": CLUSTER,
                    "endpoint_url": state.s3_endpoint, "region": "us-east-1"}  # fmt: skip
            # Warm-up: JIT, and one Python worker per core (one object per partition).
            tiny = {"min_partition_bytes": "1", "target_partition_bytes": "1"}
            run_backfill(session, {**opts, **tiny, "topic": "warm"}, str(tmp / "warm"))
            ceilings, backfills, sources, consumers = [], [], [], []
            for rep in range(repeats):
                ceilings.append(ceiling(state, bucket, threads, "logs"))
                consumers.append(consume(broker["endpoint"], "logs", records, threads))
                t = time.perf_counter()
                session.read.format("memq").options(**opts).load().write.format("noop").mode(
                    "overwrite"
                ).save()
                sources.append(time.perf_counter() - t)
                backfills.append(run_backfill(session, opts, str(tmp / f"out{rep}")))
        finally:
            session.stop()
        stored = ceilings[0]["objects"]
        size = ceilings[0]["bytes"]
        for result in backfills:
            if result.records != records or result.objects != stored:
                raise SystemExit(
                    f"backfill read {result.records} records / {result.objects} objects, "
                    f"wrote {records} / {stored}"
                )
        best = min(ceilings, key=lambda c: c["seconds"])
        cons = min(consumers, key=lambda c: c["seconds"])
        result = min(backfills, key=lambda r: r.seconds)
        source_s = min(sources)
        ceil_rps = records / best["seconds"]
        ceil_mbps = best["bytes"] / 1e6 / best["seconds"]
        ratio = result.records_per_s / ceil_rps
        out_bytes = sum(f.stat().st_size for f in (tmp / "out0").rglob("*.parquet"))
    finally:
        if broker is not None:
            stop(ProcessRef(broker["pid"], broker.get("start_time")), timeout=60)
        stack.down()
        shutil.rmtree(tmp, ignore_errors=True)
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
            "s3": "external" if ext else "moto server (local stack)",
        },
        "data": {
            "objects": stored,
            "batch_bytes": blocks * BLOCK_RECORDS * RECORD,
            "block_records": BLOCK_RECORDS,
            "record_bytes": RECORD,
            "records": records,
            "payload_bytes": payload,
            "object_bytes": size,
            "compression": codec.name.lower(),
            "write_seconds": round(write_s, 2),
        },
        "target": {
            "what": f"backfill records/s >= {TARGET_RATIO}x the multi-threaded boto3 download",
            "ratio": round(ratio, 3),
            "met": ratio >= TARGET_RATIO,
        },
        "results": {
            "ceiling_boto3_download": {
                "threads": threads,
                "seconds": round(best["seconds"], 3),
                "runs_seconds": [round(c["seconds"], 3) for c in ceilings],
                "records_per_s": round(ceil_rps),
                "MBps": round(ceil_mbps, 1),
            },
            "spark_source_only_noop": {
                "what": "memq source -> Spark noop sink: listing, GET, decode, Arrow to JVM",
                "seconds": round(source_s, 3),
                "runs_seconds": [round(x, 3) for x in sources],
                "records_per_s": round(records / source_s),
                "MBps": round(size / 1e6 / source_s, 1),
                "vs_ceiling": round(records / source_s / ceil_rps, 3),
            },
            "spark_backfill_parquet": {
                "seconds": round(result.seconds, 3),
                "runs_seconds": [round(r.seconds, 3) for r in backfills],
                "compression": "zstd",
                "records_per_s": round(result.records_per_s),
                "MBps": round(result.mb_per_s, 1),
                "vs_ceiling": round(ratio, 3),
                "partitions": result.stats.partitions_planned,
                "list_requests": result.stats.list_requests,
                "parquet_bytes": out_bytes,
                "spark_start_seconds": round(spark_start_s, 2),
            },
            "memq_consumer": {
                "what": "memq.Consumer group: notifications from Kafka, GET, decode, hand out",
                "fetch_concurrency": threads,
                "seconds": round(cons["seconds"], 3),
                "timed": "first record to last (the group join before it is excluded)",
                "join_seconds": round(cons["join_seconds"], 2),
                "runs_seconds": [round(c["seconds"], 3) for c in consumers],
                "objects": cons["objects"],
                "records_per_s": round(records / cons["seconds"]),
                "MBps": round(size / 1e6 / cons["seconds"], 1),
                "vs_ceiling": round(records / cons["seconds"] / ceil_rps, 3),
                "backfill_vs_consumer": round(result.records_per_s * cons["seconds"] / records, 3),
            },
        },
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    d = doc["data"]
    t = Table(
        title=(
            f"MemQ backfill: {d['records']:,} records of {d['record_bytes']} B in "
            f"{d['objects']} objects ({d['object_bytes'] / 1e6:.0f} MB, {d['compression']})"
        )
    )
    for col in ("reader", "seconds", "records/s", "MB/s", "vs ceiling"):
        t.add_column(col, justify="right")
    c = doc["results"]["ceiling_boto3_download"]
    s = doc["results"]["spark_backfill_parquet"]
    t.add_row(
        f"boto3 GET x{c['threads']} (ceiling)",
        f"{c['seconds']:.2f}",
        f"{c['records_per_s']:,}",
        f"{c['MBps']:.1f}",
        "1.000",
    )
    n = doc["results"]["spark_source_only_noop"]
    t.add_row(
        "Spark memq -> noop (source only)",
        f"{n['seconds']:.2f}",
        f"{n['records_per_s']:,}",
        f"{n['MBps']:.1f}",
        f"{n['vs_ceiling']:.3f}",
    )
    t.add_row(
        "Spark memq -> Parquet (backfill)",
        f"{s['seconds']:.2f}",
        f"{s['records_per_s']:,}",
        f"{s['MBps']:.1f}",
        f"{s['vs_ceiling']:.3f}",
    )
    m = doc["results"]["memq_consumer"]
    t.add_row(
        f"memq.Consumer x{m['fetch_concurrency']}",
        f"{m['seconds']:.2f}",
        f"{m['records_per_s']:,}",
        f"{m['MBps']:.1f}",
        f"{m['vs_ceiling']:.3f}",
    )
    console = Console(width=max(Console().width, 100))
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
    args = ap.parse_args(argv)
    doc = run(args.quick, parse_compression(args.compression), args.master)
    print_table(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
