"""Ingest benchmark: MemQ producers -> broker -> storage, beside same-run baselines.

Measures ingest throughput (MB/s of record payload, records/s) and ack latency p50/p99
for 1 KiB records from 4 producer threads, with broker storage devnull, filesystem and
s3 (moto), against:

  (a) confluent-kafka producing the same records straight to the local Kafka-protocol
      broker (Tansu) with acks=all, from 4 threads;
  (b) plain boto3 PUTs of the same bytes in batch.bytes-sized objects to the same S3
      endpoint, with the broker's upload concurrency.

Targets: filesystem >= 1.0x (a); s3 >= 0.8x (b); S3 PUTs per GiB <= 1.1 x (1 GiB /
batch.bytes). The broker runs in its own process (as in production). Writes
``benchmarks/results/produce.json``.

Method: the 4 threads share one producer (the recommended use of both clients), each
client may buffer at most 32 MiB of unacknowledged records, and throughput is
*sustained* throughput: bytes acknowledged while the threads were still producing,
divided by that time. ``total_s`` adds the drain at the end, where MemQ's last,
partial batch waits for ``batch.ms`` (the latency MemQ trades for fewer PUTs).

    python benchmarks/bench_produce.py [--quick] [--records N] [--acks all] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint, now, percentile

RECORD = 1024
THREADS = 4
BATCH_BYTES = 8 << 20
RING = 4
GiB = 1 << 30
CLIENT_BUFFER = 32 << 20


def broker_cfg(state: Any, storage: str, root: str) -> dict[str, Any]:
    store: dict[str, Any] = {"type": storage}
    if storage == "s3":
        store["s3"] = {
            "bucket": state.bucket,
            "endpoint_url": state.s3_endpoint,
            "region": "us-east-1",
            "max_connections": RING * 2,
        }
    elif storage == "filesystem":
        store["filesystem"] = {"root": root}
    return {
        "broker_id": f"bench-{storage}",
        "cluster": "bench",
        "port": 0,
        "http_port": 0,
        "upload_threads": RING * 2,
        "topic_defaults": {
            "storage": store,
            "notification": {"bootstrap_servers": state.kafka_bootstrap, "partitions": 4},
            "batch": {"bytes": BATCH_BYTES, "ms": 1000},
            "ring_size": RING,
        },
        "topics": [{"name": "bench"}],
    }


class _Acks:
    """Ack counter for one client. Both clients run delivery callbacks on a single
    thread (MemQ: its I/O thread; confluent-kafka: the poller), so plain counters are
    exact; latency is sampled on every 16th ack to keep the callback cheap."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.latencies: list[float] = []

    def callback(self, stamp: Any) -> Any:
        """A delivery callback; ``stamp(msg)`` gives the record's produce time in ms."""
        lat = self.latencies

        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors += 1
                return
            n = self.count = self.count + 1
            if not n & 15:
                lat.append(benchlib.time.time() * 1000 - stamp(msg))

        return cb


def _drive(produce: Any, flush: Any, values: list[bytes], acks: _Acks) -> dict[str, float]:
    """4 threads produce ``values``; returns sustained and total figures."""
    parts = [values[i::THREADS] for i in range(THREADS)]
    start = threading.Event()

    def work(part: list[bytes]) -> None:
        start.wait()
        for v in part:
            produce(v)

    with ThreadPoolExecutor(THREADS) as pool:
        futs = [pool.submit(work, p) for p in parts]
        t0 = now()
        start.set()
        for f in futs:
            f.result()
        produced_s = now() - t0
        acked_count = acks.count
        flush()
        total_s = now() - t0
    return {
        "produce_s": produced_s,
        "total_s": total_s,
        "sustained_bytes": acked_count * RECORD,
        "sustained_records": acked_count,
    }


def _summary(name: str, values: list[bytes], fig: dict[str, float], acks: _Acks) -> dict[str, Any]:
    payload = sum(len(v) for v in values)
    if acks.count != len(values) or acks.errors:
        raise RuntimeError(
            f"{name}: {acks.count} of {len(values)} acknowledged, {acks.errors} errors"
        )
    return {
        "name": name,
        "records": len(values),
        "payload_MB": round(payload / 1e6, 2),
        "produce_s": round(fig["produce_s"], 3),
        "total_s": round(fig["total_s"], 3),
        # Sustained rate; a run too short for acks to arrive while producing (--quick)
        # falls back to the total rate, and says so.
        **(
            {
                "MBps": round(fig["sustained_bytes"] / 1e6 / fig["produce_s"], 2),
                "records_per_s": round(fig["sustained_records"] / fig["produce_s"]),
                "basis": "sustained",
            }
            if fig["sustained_records"] >= len(values) // 10
            else {
                "MBps": round(payload / 1e6 / fig["total_s"], 2),
                "records_per_s": round(len(values) / fig["total_s"]),
                "basis": "total",
            }
        ),
        "total_MBps": round(payload / 1e6 / fig["total_s"], 2),
        "ack_p50_ms": round(percentile(acks.latencies, 0.5), 1),
        "ack_p99_ms": round(percentile(acks.latencies, 0.99), 1),
    }


def run_memq(
    state: Any, storage: str, values: list[bytes], acks_mode: str, compression: str
) -> dict[str, Any]:
    from memq import Producer

    root = tempfile.mkdtemp(prefix="memq-bench-fs-")
    acks = _Acks()
    with benchlib.broker_process(
        state, f"bench-{storage}", broker_cfg(state, storage, root)
    ) as info:
        p = Producer(
            {
                "bootstrap.servers": info["endpoint"],
                "acks": acks_mode,
                "compression.type": compression,
                "linger.ms": 5,
                "batch.size": 1 << 20,
                "buffer.memory": CLIENT_BUFFER,
                "encode.threads": 2,
            }
        )
        p.produce("bench", b"warm-up").result(60)
        before = benchlib.scrape(info["http"])
        cpu0 = benchlib.cpu_seconds(info["pid"])

        cb = acks.callback(lambda md: md.timestamp)
        fig = _drive(
            lambda v: p.produce("bench", v, on_delivery=cb), lambda: p.flush(600), values, acks
        )
        p.close()
        after = benchlib.scrape(info["http"])
        cpu = benchlib.cpu_seconds(info["pid"]) - cpu0
        rss = benchlib.peak_rss_bytes(info["pid"])
    out = _summary(f"memq-{storage}", values, fig, acks)
    payload = sum(len(v) for v in values)
    puts = after.get("memq_upload_seconds_count", 0) - before.get("memq_upload_seconds_count", 0)
    out.update(
        storage=storage,
        acks=acks_mode,
        compression=compression,
        batches=int(puts),
        puts_per_GiB=round(puts / (payload / GiB), 1) if storage == "s3" else None,
        broker_cpu_s_per_GiB=round(cpu / (payload / GiB), 2),
        broker_peak_rss_MB=round(rss / 1e6, 1),
    )
    return out


def run_kafka(state: Any, values: list[bytes]) -> dict[str, Any]:
    from confluent_kafka import Producer as KProducer

    from memq.storage_handlers.kafka_sink import ensure_topic

    topic = "bench-kafka-direct"
    ensure_topic(state.kafka_bootstrap, topic, 4)
    acks = _Acks()
    p = KProducer(
        {
            "bootstrap.servers": state.kafka_bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": True,
            "queue.buffering.max.kbytes": CLIENT_BUFFER // 1024,
        }
    )
    p.produce(topic, b"warm-up")
    p.flush(30)
    stop = threading.Event()

    def poller() -> None:  # serves delivery callbacks while the threads produce
        while not stop.is_set():
            p.poll(0.05)

    cb = acks.callback(lambda msg: msg.timestamp()[1])

    def produce(v: bytes) -> None:
        while True:
            try:
                p.produce(topic, v, on_delivery=cb)
                return
            except BufferError:  # queue full: the poller drains it (callbacks stay on it)
                benchlib.time.sleep(0.001)

    def drain() -> None:  # like flush(), but callbacks keep running on the poller only
        deadline = benchlib.time.monotonic() + 600
        while len(p) and benchlib.time.monotonic() < deadline:
            benchlib.time.sleep(0.002)

    t = threading.Thread(target=poller, daemon=True)
    t.start()
    try:
        fig = _drive(produce, drain, values, acks)
    finally:
        stop.set()
        t.join()
    return _summary("kafka-direct (baseline a)", values, fig, acks)


def run_s3_puts(state: Any, values: list[bytes]) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    data = b"".join(values)
    objects = [data[i : i + BATCH_BYTES] for i in range(0, len(data), BATCH_BYTES)]
    client = boto3.client(
        "s3",
        endpoint_url=state.s3_endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=RING * 2, request_checksum_calculation="when_required"),
    )

    def put(i: int) -> None:
        client.put_object(Bucket=state.bucket, Key=f"bench-raw/{i:06d}", Body=objects[i])

    t0 = now()
    with ThreadPoolExecutor(RING) as pool:
        list(pool.map(put, range(len(objects))))
    seconds = now() - t0
    return {
        "name": "s3-raw-put (baseline b)",
        "records": len(values),
        "payload_MB": round(len(data) / 1e6, 2),
        "seconds": round(seconds, 3),
        "MBps": round(len(data) / 1e6 / seconds, 2),
        "records_per_s": round(len(values) / seconds),
        "objects": len(objects),
        "concurrency": RING,
    }


def run(records: int, acks: str, quick: bool) -> dict[str, Any]:
    values = benchlib.log_records(records, RECORD)
    results: dict[str, dict[str, Any]] = {}
    with benchlib.private_stack() as state:
        eprint(f"baseline (a): confluent-kafka -> Tansu, {records} records")
        results["kafka"] = run_kafka(state, values)
        eprint("baseline (b): raw boto3 PUTs")
        results["s3raw"] = run_s3_puts(state, values)
        for storage in ("devnull", "filesystem", "s3"):
            eprint(f"memq {storage}")
            results[storage] = run_memq(state, storage, values, acks, "none")
        eprint("memq filesystem with zstd")
        results["filesystem_zstd"] = run_memq(state, "filesystem", values, acks, "zstd")
    k, s3raw = results["kafka"]["MBps"], results["s3raw"]["MBps"]
    for name in ("devnull", "filesystem", "filesystem_zstd"):
        results[name]["vs_kafka_direct"] = round(results[name]["MBps"] / k, 3)
    results["s3"]["vs_s3_raw_put"] = round(results["s3"]["MBps"] / s3raw, 3)
    results["s3"]["vs_kafka_direct"] = round(results["s3"]["MBps"] / k, 3)
    ideal_puts = GiB / BATCH_BYTES
    puts = results["s3"]["puts_per_GiB"]
    targets = {
        "filesystem_vs_kafka_direct": {
            "value": results["filesystem"]["vs_kafka_direct"],
            "target": 1.0,
        },
        "s3_vs_raw_put": {"value": results["s3"]["vs_s3_raw_put"], "target": 0.8},
        "s3_puts_per_GiB": {
            "value": puts,
            "target": round(1.1 * ideal_puts, 1),
            "ideal": ideal_puts,
        },
    }
    targets["filesystem_vs_kafka_direct"]["met"] = (
        targets["filesystem_vs_kafka_direct"]["value"] >= 1.0
    )
    targets["s3_vs_raw_put"]["met"] = targets["s3_vs_raw_put"]["value"] >= 0.8
    targets["s3_puts_per_GiB"]["met"] = puts is not None and puts <= 1.1 * ideal_puts
    return {
        "benchmark": "produce",
        "quick": quick,
        "time": benchlib.time.strftime("%Y-%m-%dT%H:%M:%SZ", benchlib.time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {
            "record_bytes": RECORD,
            "threads": THREADS,
            "acks": acks,
            "batch_bytes": BATCH_BYTES,
            "ring_size": RING,
            "records": records,
        },
        "results": results,
        "targets": targets,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"MemQ ingest, 1 KiB records, {THREADS} producer threads, acks={doc['setup']['acks']}"
    )
    for col in (
        "run",
        "MB/s",
        "records/s",
        "total MB/s",
        "ack p50 ms",
        "ack p99 ms",
        "ratio",
        "PUTs/GiB",
        "broker CPU s/GiB",
        "broker RSS MB",
    ):
        t.add_column(col, justify="right")
    for key, r in doc["results"].items():
        ratio = r.get("vs_s3_raw_put") if key == "s3" else r.get("vs_kafka_direct")
        basis = " vs (b)" if key == "s3" else " vs (a)"
        t.add_row(
            r["name"] + (" zstd" if key == "filesystem_zstd" else ""),
            f"{r['MBps']:.1f}",
            f"{r['records_per_s']:,}",
            str(r.get("total_MBps", "-")),
            str(r.get("ack_p50_ms", "-")),
            str(r.get("ack_p99_ms", "-")),
            f"{ratio:.2f}x{basis}" if ratio is not None else "baseline",
            str(r.get("puts_per_GiB") or "-"),
            str(r.get("broker_cpu_s_per_GiB", "-")),
            str(r.get("broker_peak_rss_MB", "-")),
        )
    c = Console(width=max(Console().width, 150))
    c.print(t)
    for name, tg in doc["targets"].items():
        mark = "[green]met[/green]" if tg["met"] else "[red]NOT met[/red]"
        c.print(f"target {name}: {tg['value']} (target {tg['target']}): {mark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: few records")
    ap.add_argument(
        "--records", type=int, default=None, help="records per run (default 262144 = 256 MiB)"
    )
    ap.add_argument("--acks", default="all")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "produce.json")
    args = ap.parse_args(argv)
    records = args.records or (4096 if args.quick else 262144)
    doc = run(records, args.acks, args.quick)
    print_table(doc)
    benchlib.write_result(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
