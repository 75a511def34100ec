"""Consume benchmark: memq.Consumer reading 1 KiB records, beside same-run baselines.

Measures steady-state MB/s of record payload handed out, and CPU seconds per GiB of
every process involved (the consumer's own process, the broker, Kafka, moto), for one
``memq.Consumer`` reading a topic stored in S3 (moto) with ``consume(500)`` and with
``consume_batch(2000)`` (columns, no ``Message`` per record: its ``values`` list, and
``to_arrow()``, a pyarrow Table whose values of block format 2 share the fetched bytes),
and one stored on the filesystem, against:

  (a) raw boto3 GETs of the same S3 objects with the same concurrency (the storage
      ceiling: bytes only, no decoding);
  (b) confluent-kafka consuming the same records produced straight to the local
      Apache Kafka (the stack's one KRaft node), from a topic of the same partition count
      made with AdminClient.

Method (issue 19): the topic (``--records``, default 1 GiB) is written once, then each
reader reads it over and over (``assign()`` at the first offset again after each full
pass: no group joins) while a warm-up (5 s, excluded) and a window of >= 20 s run;
only what is handed out inside the window counts, and CPU seconds (utime + stime from
/proc/<pid>/stat) are read at the window's edges. ``--quick``: 2 s windows, a smoke of
the method, not a figure. Targets: S3 paths >= 0.8x (a); filesystem path >= 1.0x (b).
Writes ``benchmarks/results/consume.json``.

    python benchmarks/bench_consume.py [--quick] [--records N] [--out PATH]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import Counter, eprint

RECORD = 1024
CONCURRENCY = 4
PARTITIONS = 4
#: Records per ``consume()`` call: a few hundred, as docs/clients.md advises (a list of
#: thousands is walked by CPython's cyclic GC: ``consume(2000)`` measured 1.73-1.75
#: CPU-s/GiB against 1.43-1.52); ``consume_batch()`` and confluent-kafka take 2,000.
CONSUME_CALL = 500
#: A full run's topic: 1 GiB, so the refill after each pass's ``assign()`` (~0.1 s
#: with no records handed out) is a small part of a pass, as for a consumer reading
#: one long topic (with 128 MiB it took about 1/3 of the filesystem path's time).
FULL_RECORDS = 1 << 20


def broker_cfg(state: Any, storage: str, root: str, topic: str) -> dict[str, Any]:
    store = benchlib.storage_config(
        storage, bucket=state.bucket, endpoint=state.s3_endpoint, root=root
    )
    return benchlib.broker_config(
        state, f"bench-{storage}", store, [{"name": topic}],
        partitions=PARTITIONS, batch={"bytes": 8 << 20, "ms": 500},
    )  # fmt: skip


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


def run_memq(
    state: Any,
    info: dict[str, Any],
    topic: str,
    n: int,
    name: str,
    quick: bool,
    mode: str = "consume",
) -> dict[str, Any]:
    """``mode``: ``consume`` (``consume(500)``: a Message per record), ``values``
    (``consume_batch(2000).values``: a list of the values) or ``arrow``
    (``consume_batch(2000).to_arrow()``: a pyarrow Table; its bytes summed by Arrow)."""
    import pyarrow.compute as pc

    from memq import Consumer

    counter = Counter()
    stats: list[Any] = []

    def load(stop: threading.Event) -> None:
        c = Consumer(
            {
                "bootstrap.servers": info["endpoint"],
                "fetch.concurrency": CONCURRENCY,
                "prefetch.objects": CONCURRENCY * 2,
            }
        )
        try:
            got = 0
            c.assign([(topic, p, 0) for p in range(PARTITIONS)])
            while not stop.is_set():
                if mode == "values":
                    values = c.consume_batch(2000, 1.0).values
                    got += len(values)
                    counter.add(sum(map(len, values)), len(values))
                elif mode == "arrow":
                    table = c.consume_batch(2000, 1.0).to_arrow()
                    size = pc.sum(pc.binary_length(table.column("value"))).as_py() or 0
                    got += table.num_rows
                    counter.add(size, table.num_rows)
                else:
                    batch = c.consume(CONSUME_CALL, 1.0)
                    got += len(batch)
                    counter.add(sum(len(m.value) for m in batch), len(batch))
                if got >= n:  # a full pass: read it all again
                    got = 0
                    c.assign([(topic, p, 0) for p in range(PARTITIONS)])
            stats.append(c.stats)
        finally:
            c.close()

    procs = {"broker": info["pid"], **benchlib.stack_pids(state)}
    out = benchlib.steady_state(load, counter, procs, quick)
    out.update(name=name, objects_read=stats[0].objects if stats else None)
    return out


def run_raw_gets(state: Any, keys: list[str], quick: bool) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=state.s3_endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=CONCURRENCY * 2),
    )
    counter = Counter()
    seq = iter(range(1 << 62))

    def load(stop: threading.Event) -> None:
        def worker() -> None:
            while not stop.is_set():
                k = keys[next(seq) % len(keys)]
                body = client.get_object(Bucket=state.bucket, Key=k)["Body"].read()
                counter.add(len(body), len(body) // RECORD)

        ts = [threading.Thread(target=worker, daemon=True) for _ in range(CONCURRENCY)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(600)

    out = benchlib.steady_state(load, counter, benchlib.stack_pids(state), quick)
    out.update(name="s3-raw-get (baseline a)", objects=len(keys), concurrency=CONCURRENCY)
    return out


def run_kafka(state: Any, values: list[bytes], quick: bool) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka import Consumer as KConsumer
    from confluent_kafka import Producer as KProducer

    from memq.storage_handlers.kafka_sink import ensure_topic

    topic = f"bench-kafka-consume-{uuid.uuid4().hex[:8]}"
    ensure_topic(state.kafka_bootstrap, topic, PARTITIONS)
    p = KProducer({"bootstrap.servers": state.kafka_bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        while True:
            try:
                p.produce(topic, v)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(600):
        raise RuntimeError("kafka baseline: loading did not complete in 600 s")
    counter = Counter()
    start = [TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(PARTITIONS)]

    def load(stop: threading.Event) -> None:
        # fetch sizes raised per librdkafka's throughput advice
        c = KConsumer(
            {
                "bootstrap.servers": state.kafka_bootstrap,
                "group.id": f"bench-kafka-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 64 << 20,
                "max.partition.fetch.bytes": 8 << 20,
                "queued.max.messages.kbytes": 262_144,
            }
        )
        try:
            c.assign(start)
            got = 0
            while not stop.is_set():
                ms = [m for m in c.consume(2000, 1.0) if m.error() is None]
                got += len(ms)
                counter.add(sum(len(m.value() or b"") for m in ms), len(ms))
                if got >= len(values):
                    got = 0
                    c.assign(start)
        finally:
            c.close()

    try:
        out = benchlib.steady_state(load, counter, benchlib.stack_pids(state), quick)
    finally:
        benchlib.delete_kafka_topic(state.kafka_bootstrap, topic)
    out.update(name="kafka-direct (baseline b)")
    return out


def run(records: int, quick: bool) -> dict[str, Any]:
    values = benchlib.log_records(records, RECORD)
    results: dict[str, dict[str, Any]] = {}
    with benchlib.private_stack() as state:
        root = tempfile.mkdtemp(prefix="memq-bench-consume-")
        for storage in ("s3", "filesystem"):
            topic = f"consume-{storage}-{uuid.uuid4().hex[:6]}"
            with benchlib.broker_process(
                state, f"bc-{storage}", broker_cfg(state, storage, root, topic)
            ) as info:
                eprint(f"loading {records} records into {storage}")
                keys = load(info["endpoint"], topic, values)
                eprint(f"memq consume from {storage}")
                results[storage] = run_memq(state, info, topic, records, f"memq-{storage}", quick)
                if storage == "s3":
                    eprint("memq consume_batch() from s3")
                    results["s3_batch"] = run_memq(
                        state, info, topic, records, "memq-s3 consume_batch()", quick, "values"
                    )
                    eprint("memq consume_batch().to_arrow() from s3")
                    results["s3_arrow"] = run_memq(
                        state, info, topic, records, "memq-s3 to_arrow()", quick, "arrow"
                    )
                    eprint("baseline (a): raw parallel GETs")
                    results["s3raw"] = run_raw_gets(state, keys, quick)
        shutil.rmtree(root, ignore_errors=True)
        eprint("baseline (b): confluent-kafka consuming from Apache Kafka")
        results["kafka"] = run_kafka(state, values, quick)
    for key in ("s3", "s3_batch", "s3_arrow"):
        results[key]["vs_s3_raw_get"] = round(results[key]["MBps"] / results["s3raw"]["MBps"], 3)
    results["filesystem"]["vs_kafka_direct"] = round(
        results["filesystem"]["MBps"] / results["kafka"]["MBps"], 3
    )
    results["s3"]["vs_kafka_direct"] = round(results["s3"]["MBps"] / results["kafka"]["MBps"], 3)
    targets = {
        "s3_vs_raw_get": {"value": results["s3"]["vs_s3_raw_get"], "target": 0.8},
        "s3_consume_batch_vs_raw_get": {
            "value": results["s3_batch"]["vs_s3_raw_get"],
            "target": 0.8,
        },
        "s3_to_arrow_vs_raw_get": {
            "value": results["s3_arrow"]["vs_s3_raw_get"],
            "target": 0.8,
        },
        "filesystem_vs_kafka_direct": {
            "value": results["filesystem"]["vs_kafka_direct"],
            "target": 1.0,
        },
    }
    for t in targets.values():
        t["met"] = t["value"] >= t["target"]
    warmup, window = benchlib.timing(quick)
    return {
        "benchmark": "consume",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {
            "record_bytes": RECORD,
            "records": records,
            "fetch_concurrency": CONCURRENCY,
            "warmup_s": warmup,
            "window_s": window,
        },
        "results": results,
        "targets": targets,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    s = doc["setup"]
    smoke = " [SMOKE: 2 s window, not a figure]" if doc["quick"] else ""
    t = Table(
        title=f"MemQ consume, 1 KiB records, {s['window_s']:g} s steady window after "
        f"{s['warmup_s']:g} s warm-up{smoke}"
    )
    procs = ("client", "broker", "kafka", "s3_moto")
    for col in ("run", "MB/s", "1 s min-max", "ratio", *(f"{p} CPU-s/GiB" for p in procs)):
        t.add_column(col, justify="right")
    for key, r in doc["results"].items():
        on_s3 = key in ("s3", "s3_batch", "s3_arrow")
        ratio = r.get("vs_s3_raw_get") if on_s3 else r.get("vs_kafka_direct")
        basis = " vs (a)" if on_s3 else " vs (b)"
        one = r.get("MBps_1s") or {}
        t.add_row(
            r["name"],
            f"{r['MBps']:.1f}",
            f"{one.get('min', '-')}-{one.get('max', '-')}",
            f"{ratio:.2f}x{basis}" if ratio is not None else "baseline",
            *(str(r["cpu_s_per_GiB"].get(p, "-")) for p in procs),
        )
    c = Console(width=max(Console().width, 140))
    c.print(t)
    for name, tg in doc["targets"].items():
        mark = "[green]met[/green]" if tg["met"] else "[red]NOT met[/red]"
        c.print(f"target {name}: {tg['value']} (target {tg['target']}): {mark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--records",
        type=int,
        default=None,
        help="records written once and re-read (default 1048576 = 1 GiB)",
    )
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "consume.json")
    args = ap.parse_args(argv)
    records = args.records or (8192 if args.quick else FULL_RECORDS)
    doc = run(records, args.quick)
    print_table(doc)
    benchlib.write_result(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
