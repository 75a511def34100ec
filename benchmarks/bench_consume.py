"""Consume benchmark: memq.Consumer reading 1 KiB records, beside same-run baselines.

Measures records/s and MB/s of record payload for a consumer group reading a topic
stored in S3 (moto) and one stored on the filesystem, against:

  (a) plain boto3 GETs of the same S3 objects with the same concurrency (the storage
      ceiling: bytes only, no decoding);
  (b) confluent-kafka consuming the same records produced straight to the local
      Kafka-protocol broker (Tansu).

Targets: S3 path >= 0.8x (a); filesystem path >= 1.0x (b). Timing starts at the first
record, so group joins (slow on Tansu) are not counted. Writes
``benchmarks/results/consume.json``.

    python benchmarks/bench_consume.py [--quick] [--records N] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint, now

RECORD = 1024
CONCURRENCY = 4
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "earliest"}


def broker_cfg(state: Any, storage: str, root: str) -> dict[str, Any]:
    store: dict[str, Any] = {"type": storage}
    if storage == "s3":
        store["s3"] = {
            "bucket": state.bucket,
            "endpoint_url": state.s3_endpoint,
            "region": "us-east-1",
        }
    else:
        store["filesystem"] = {"root": root}
    return {
        "broker_id": f"bench-{storage}",
        "cluster": "bench",
        "port": 0,
        "http_port": 0,
        "topic_defaults": {
            "storage": store,
            "notification": {"bootstrap_servers": state.kafka_bootstrap, "partitions": 4},
            "batch": {"bytes": 8 << 20, "ms": 500},
        },
        "topics": [{"name": f"consume-{storage}"}],
    }


def load(address: str, topic: str, values: list[bytes]) -> list[str]:
    """Produce ``values`` (acks=all, uncompressed) and return the object keys."""
    from memq import Producer

    keys: set[str] = set()
    with Producer({"bootstrap.servers": address, "compression.type": "none", "linger.ms": 5}) as p:
        futs = [p.produce(topic, v) for v in values]
        if p.flush(600):
            raise RuntimeError("load did not complete")
        for f in futs[:: max(1, len(futs) // 2000)] + futs[-1:]:
            keys.add(f.result().key or "")
    return sorted(keys)


def run_memq(address: str, topic: str, n: int, name: str) -> dict[str, Any]:
    from memq import Consumer

    c = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"bench-{topic}",
            **GROUP,
            "fetch.concurrency": CONCURRENCY,
            "prefetch.objects": CONCURRENCY * 2,
        }
    )
    c.subscribe(topic)
    got = nbytes = 0
    t0: float | None = None
    deadline = time.monotonic() + 600
    while got < n and time.monotonic() < deadline:
        batch = c.consume(2000, 1.0)
        if batch and t0 is None:
            t0 = now()
        got += len(batch)
        nbytes += sum(len(m.value) for m in batch)
    seconds = now() - (t0 or now())
    stats = c.stats
    c.close()
    if got != n:
        raise RuntimeError(f"{name}: consumed {got} of {n}")
    return {
        "name": name,
        "records": got,
        "payload_MB": round(nbytes / 1e6, 2),
        "seconds": round(seconds, 3),
        "MBps": round(nbytes / 1e6 / seconds, 2),
        "records_per_s": round(got / seconds),
        "objects": stats.objects,
        "fetched_MB": round(stats.bytes / 1e6, 2),
    }


def run_raw_gets(state: Any, keys: list[str], n: int, payload: int) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=state.s3_endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=CONCURRENCY * 2),
    )

    def get(k: str) -> int:
        return len(client.get_object(Bucket=state.bucket, Key=k)["Body"].read())

    t0 = now()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        total = sum(pool.map(get, keys))
    seconds = now() - t0
    return {
        "name": "s3-raw-get (baseline a)",
        "records": n,
        "payload_MB": round(payload / 1e6, 2),
        "seconds": round(seconds, 3),
        "MBps": round(payload / 1e6 / seconds, 2),
        "records_per_s": round(n / seconds),
        "objects": len(keys),
        "fetched_MB": round(total / 1e6, 2),
        "concurrency": CONCURRENCY,
    }


def run_kafka(state: Any, values: list[bytes]) -> dict[str, Any]:
    from confluent_kafka import Consumer as KConsumer
    from confluent_kafka import Producer as KProducer

    from memq.storage_handlers.kafka_sink import ensure_topic

    topic = "bench-kafka-consume"
    ensure_topic(state.kafka_bootstrap, topic, 4)
    p = KProducer({"bootstrap.servers": state.kafka_bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        while True:
            try:
                p.produce(topic, v)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(600)
    c = KConsumer({"bootstrap.servers": state.kafka_bootstrap, "group.id": "bench-kafka", **GROUP})
    c.subscribe([topic])
    got = nbytes = 0
    t0: float | None = None
    deadline = time.monotonic() + 600
    while got < len(values) and time.monotonic() < deadline:
        for m in c.consume(2000, 1.0):
            if m.error() is None:
                if t0 is None:
                    t0 = now()
                got += 1
                nbytes += len(m.value() or b"")
    seconds = now() - (t0 or now())
    c.close()
    if got != len(values):
        raise RuntimeError(f"kafka baseline consumed {got} of {len(values)}")
    return {
        "name": "kafka-direct (baseline b)",
        "records": got,
        "payload_MB": round(nbytes / 1e6, 2),
        "seconds": round(seconds, 3),
        "MBps": round(nbytes / 1e6 / seconds, 2),
        "records_per_s": round(got / seconds),
    }


def run(records: int, quick: bool) -> dict[str, Any]:
    values = benchlib.log_records(records, RECORD)
    payload = sum(len(v) for v in values)
    results: dict[str, dict[str, Any]] = {}
    with benchlib.private_stack() as state:
        root = tempfile.mkdtemp(prefix="memq-bench-consume-")
        for storage in ("s3", "filesystem"):
            with benchlib.broker_process(
                state, f"bc-{storage}", broker_cfg(state, storage, root)
            ) as info:
                eprint(f"loading {records} records into {storage}")
                keys = load(info["endpoint"], f"consume-{storage}", values)
                eprint(f"memq consume from {storage}")
                results[storage] = run_memq(
                    info["endpoint"], f"consume-{storage}", records, f"memq-{storage}"
                )
                if storage == "s3":
                    eprint("baseline (a): raw parallel GETs")
                    results["s3raw"] = run_raw_gets(state, keys, records, payload)
        eprint("baseline (b): confluent-kafka consuming from Tansu")
        results["kafka"] = run_kafka(state, values)
    results["s3"]["vs_s3_raw_get"] = round(results["s3"]["MBps"] / results["s3raw"]["MBps"], 3)
    results["filesystem"]["vs_kafka_direct"] = round(
        results["filesystem"]["MBps"] / results["kafka"]["MBps"], 3
    )
    results["s3"]["vs_kafka_direct"] = round(results["s3"]["MBps"] / results["kafka"]["MBps"], 3)
    targets = {
        "s3_vs_raw_get": {"value": results["s3"]["vs_s3_raw_get"], "target": 0.8},
        "filesystem_vs_kafka_direct": {
            "value": results["filesystem"]["vs_kafka_direct"],
            "target": 1.0,
        },
    }
    for t in targets.values():
        t["met"] = t["value"] >= t["target"]
    return {
        "benchmark": "consume",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {"record_bytes": RECORD, "records": records, "fetch_concurrency": CONCURRENCY},
        "results": results,
        "targets": targets,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="MemQ consume, 1 KiB records (timed from the first record)")
    for col in ("run", "MB/s", "records/s", "seconds", "ratio"):
        t.add_column(col, justify="right")
    for key, r in doc["results"].items():
        ratio = r.get("vs_s3_raw_get") if key == "s3" else r.get("vs_kafka_direct")
        basis = " vs (a)" if key == "s3" else " vs (b)"
        t.add_row(
            r["name"],
            f"{r['MBps']:.1f}",
            f"{r['records_per_s']:,}",
            f"{r['seconds']:.2f}",
            f"{ratio:.2f}x{basis}" if ratio is not None else "baseline",
        )
    c = Console(width=max(Console().width, 110))
    c.print(t)
    for name, tg in doc["targets"].items():
        mark = "[green]met[/green]" if tg["met"] else "[red]NOT met[/red]"
        c.print(f"target {name}: {tg['value']} (target {tg['target']}): {mark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=None, help="default 262144 (256 MiB)")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "consume.json")
    args = ap.parse_args(argv)
    records = args.records or (8192 if args.quick else 262144)
    doc = run(records, args.quick)
    print_table(doc)
    benchlib.write_result(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
