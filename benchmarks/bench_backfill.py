"""Backfill benchmark: Spark ``memq`` source -> Parquet, beside the storage ceiling.

Writes a topic of 1 KiB records into the local stack's S3 (moto) the way brokers do
(blocks -> batch objects -> ``S3Writer``), then measures in the same run:

- **ceiling**: a plain multi-threaded boto3 download of the same objects (list + GET,
  no decoding): the most any reader could get out of this S3;
- **backfill**: ``spark.backfill.run_backfill`` to Parquet (zstd) on Spark ``local[*]``
  (planning, listing, GET, decode, Parquet write), after a warm-up job;
- **source only**: the same read into Spark's ``noop`` sink, to separate the source's
  cost from the Parquet writer's;

Each is run ``repeats`` times (3; 1 with ``--quick``), interleaved, and the best run of
each counts (same policy for all).
- **memq.Consumer**: slot for the consumer baseline; not measured until the consumer
  exists (recorded as such, never estimated).

Prints a table and writes ``benchmarks/results/backfill.json``.

    python benchmarks/bench_backfill.py [--quick] [--out PATH] [--compression none|zstd]

Target: backfill records/s >= 0.7x the ceiling's. Uses a running stack named by
MEMQ_S3_ENDPOINT (plus MEMQ_KAFKA_BOOTSTRAP, MEMQ_ZK_CONNECT), else starts one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memq.devstack import DevStack, StackState
from memq.formats import Compression, batch_id, encode_batch, encode_block, parse_compression
from storage_handlers.s3 import S3Config, S3Writer

TARGET_RATIO = 0.7
RECORD = 1024
BLOCK_RECORDS = 1024  # 1 MiB of payload per block
CLUSTER = "bench"
T0 = 1_763_776_800_000


def _values(n: int, seed: int = 42) -> list[bytes]:
    """Log-like, partly compressible 1 KiB values (as bench_formats makes)."""
    rng = random.Random(seed)
    words = [b"GET", b"POST", b"/api/v1/items", b"/login", b"status=200", b"status=404", b"ms="]
    out = []
    for _ in range(n):
        parts: list[bytes] = []
        size = 0
        while size < RECORD:
            w = rng.choice(words) if rng.random() < 0.6 else rng.randbytes(8).hex().encode()
            parts.append(w)
            size += len(w) + 1
        out.append(b" ".join(parts)[:RECORD])
    return out


def write_topic(
    state: StackState, bucket: str, topic: str, objects: int, blocks: int, codec: Compression
) -> tuple[int, int]:
    """Upload ``objects`` batch objects of ``blocks`` 1 MiB blocks; returns (records, bytes)."""
    cfg = S3Config(bucket=bucket, endpoint_url=state.s3_endpoint, region="us-east-1")
    writer = S3Writer(cfg, CLUSTER)
    values = _values(BLOCK_RECORDS)

    def one(i: int) -> int:
        created = T0 + i * 30_000  # 30 s apart: a few objects per hour folder
        encoded = []
        for b in range(blocks):
            ts = created - 60_000 + b * BLOCK_RECORDS
            recs = [(ts + j, None, v, None) for j, v in enumerate(values)]
            encoded.append(
                encode_block(
                    recs, producer_id=1, epoch=0, sequence=i * blocks + b, compression=codec
                )
            )
        data = encode_batch(encoded)
        writer.store(topic, batch_id(created, "bench-1", i), created, data)
        return len(data)

    with ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(one, range(objects)))
    return objects * blocks * BLOCK_RECORDS, sum(sizes)


def ceiling(state: StackState, bucket: str, threads: int) -> dict[str, float]:
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
    ]

    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(get, keys))
    return {"seconds": time.perf_counter() - t0, "bytes": total, "objects": len(keys)}


def run(quick: bool, codec: Compression, master: str) -> dict[str, Any]:
    objects, blocks = (12, 2) if quick else (64, 8)
    repeats = 1 if quick else 3
    threads = 8
    ext = os.environ.get("MEMQ_S3_ENDPOINT")
    tmp = Path(tempfile.mkdtemp(prefix="memq-bench-backfill-"))
    stack = DevStack(tmp / "stack")
    state = stack.up()
    try:
        for k, v in state.aws_env().items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        bucket = f"bench-backfill-{uuid.uuid4().hex[:8]}"
        warm = f"{bucket}-warm"
        s3 = state.s3_client()
        s3.create_bucket(Bucket=bucket)
        s3.create_bucket(Bucket=warm)
        t = time.perf_counter()
        records, size = write_topic(state, bucket, "logs", objects, blocks, codec)
        write_topic(state, warm, "logs", 4, 1, codec)
        write_s = time.perf_counter() - t

        from pyspark.sql import SparkSession

        from spark.backfill import run_backfill

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
            run_backfill(session, {**opts, **tiny, "bucket": warm}, str(tmp / "warm"))
            ceilings, backfills, sources = [], [], []
            for rep in range(repeats):
                ceilings.append(ceiling(state, bucket, threads))
                t = time.perf_counter()
                session.read.format("memq").options(**opts).load().write.format("noop").mode(
                    "overwrite"
                ).save()
                sources.append(time.perf_counter() - t)
                backfills.append(run_backfill(session, opts, str(tmp / f"out{rep}")))
        finally:
            session.stop()
        for result in backfills:
            if result.records != records or result.objects != objects:
                raise SystemExit(
                    f"backfill read {result.records} records / {result.objects} objects, "
                    f"wrote {records} / {objects}"
                )
        best = min(ceilings, key=lambda c: c["seconds"])
        result = min(backfills, key=lambda r: r.seconds)
        source_s = min(sources)
        ceil_rps = records / best["seconds"]
        ceil_mbps = best["bytes"] / 1e6 / best["seconds"]
        ratio = result.records_per_s / ceil_rps
        out_bytes = sum(f.stat().st_size for f in (tmp / "out0").rglob("*.parquet"))
    finally:
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
            "objects": objects,
            "blocks_per_object": blocks,
            "record_bytes": RECORD,
            "records": records,
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
                "measured": False,
                "reason": "memq.Consumer does not exist yet; fill this slot when it lands",
                "records_per_s": None,
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
    t.add_row("memq.Consumer", "-", "not measured", "-", "-")
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
